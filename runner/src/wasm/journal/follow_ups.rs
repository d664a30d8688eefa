//! The follow-ups of a journaled attempt: each takes its place in the
//! effects journal, and on a replay the id the journal recorded for it (so
//! that a retried attempt's follow-up is the same job, enqueued once).

use sha2::{Digest, Sha256};

use super::effects::Effects;
use crate::redis::effects::{Entry, Kind};

impl Effects {
    /// A follow-up queued: the id it takes (the recorded one on a replay),
    /// or why it is refused (a divergence).
    pub fn follow_up(&self, topic: &str, payload: &[u8], id: String) -> Result<String, String> {
        let hash: [u8; 32] = Sha256::digest(payload).into();
        let recorded = {
            let mut s = self.state();
            if let Some(why) = &s.failed {
                return Err(why.clone());
            }
            let (scope, pos) = s.next(Kind::FollowUp, 1);
            match s
                .replay
                .follow_ups
                .get(&(scope.clone(), pos as u32))
                .cloned()
            {
                Some(r) => Some((r, pos)),
                None => {
                    let entry = Entry::FollowUp {
                        scope,
                        pos: pos as u32,
                        attempt: self.ctx.attempt,
                        topic: topic.to_owned(),
                        payload_sha256: hash,
                        id: id.clone(),
                    };
                    if s.admit(entry.size(), self.ctx.attempt) {
                        s.counts.recorded[3] += 1;
                        s.pending.push(entry);
                    }
                    None
                }
            }
        };
        match recorded {
            None => Ok(id),
            Some(((t, h, recorded_id), _)) if t == topic && h == hash => {
                self.state().counts.replayed[3] += 1;
                Ok(recorded_id)
            }
            Some(((t, _, _), pos)) => {
                let message = format!(
                    "journal divergence at follow-up {}: recorded one to {t:?}, now {} to {topic:?}",
                    pos + 1,
                    if t == topic {
                        "a different payload"
                    } else {
                        "one"
                    }
                );
                if self.diverged(message.clone()) {
                    Err(message)
                } else {
                    Ok(id)
                }
            }
        }
    }
}
