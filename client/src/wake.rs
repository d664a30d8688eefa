//! Listens on the wake channel: scripts publish `"<topic> <due ms>"` (see
//! `wake` in `prelude.lua`) when a job becomes due earlier than anything
//! pending before it. Reconnects with backoff; after every (re)connect it asks
//! the scheduler to look at every topic, since messages sent while
//! disconnected are lost.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;

use super::Queue;

/// A hint for the scheduler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wake {
    /// `topic` has a job due at this time (ms).
    Due(String, u64),
    /// Anything may have changed: look at every topic.
    All,
}

/// Forward wake messages until the receiver is gone.
pub async fn listen(queue: Queue, tx: mpsc::UnboundedSender<Wake>) {
    let mut pause = Duration::from_millis(100);
    let mut failing = false;
    loop {
        match queue.subscribe(queue.wake_channel()).await {
            Ok(mut pubsub) => {
                if failing {
                    tracing::info!("wake-up subscription restored");
                }
                pause = Duration::from_millis(100);
                // messages sent while we were away are lost: look at every topic
                if tx.send(Wake::All).is_err() {
                    return;
                }
                let mut messages = pubsub.on_message();
                while let Some(msg) = messages.next().await {
                    let text: String = msg.get_payload().unwrap_or_default();
                    if let Some(wake) = parse(&text)
                        && tx.send(wake).is_err()
                    {
                        return;
                    }
                }
                tracing::warn!(
                    "wake-up subscription lost; reconnecting (the 1s watchdog covers the gap)"
                );
                failing = true;
            }
            Err(e) if !failing => {
                tracing::warn!("cannot subscribe to wake-ups, retrying with backoff up to 5s: {e}");
                failing = true;
            }
            Err(e) => tracing::debug!("cannot subscribe to wake-ups, retrying in {pause:?}: {e}"),
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// A wake message as `prelude.lua` writes it: `"<topic> <due ms>"`.
fn parse(text: &str) -> Option<Wake> {
    let (topic, due) = text.rsplit_once(' ')?;
    Some(Wake::Due(topic.to_owned(), due.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_messages_parse_as_prelude_writes_them() {
        assert_eq!(
            parse("orders 1700000000123"),
            Some(Wake::Due("orders".into(), 1700000000123))
        );
        assert_eq!(parse("orders"), None);
        assert_eq!(parse("orders soon"), None);
    }
}
