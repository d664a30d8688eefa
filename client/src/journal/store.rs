//! The journal's Redis side: recording steps and effects while the attempt
//! owns the job, suspending it, signals and wakes, and reading a journal.

use redis::Value;

use super::{Journal, MAX_SIGNAL, Signalled, Step, Suspending, Suspension, Woken, check_name};
use crate::{Pipeline, Queue, QueueError, Refusal, TopicKeys, attempt, scripts};

impl Pipeline<'_> {
    /// Record step `field` (`s:<name>`, [`Step::encode`]d) in job `id`'s
    /// journal while `attempt` still owns the job; `version` pins the job if
    /// this is its first entry. `false`: refused (the attempt lost the job).
    pub async fn record_step(
        self,
        keys: &TopicKeys,
        id: &str,
        attempt: u32,
        version: &str,
        name: &str,
        step: &Step,
    ) -> Result<bool, QueueError> {
        let mut inv = scripts::STEP.on(keys);
        inv.arg(id)
            .arg(attempt)
            .arg(version)
            .arg(format!("s:{name}"))
            .arg(step.encode());
        let recorded: i64 = self.q.invoke_durable(&inv).await?;
        Ok(recorded == 1)
    }

    /// Record how `patched(name)` answered job `id` (`p:<name>`: `1` the new
    /// path, `0` the old) while `attempt` still owns the job, as
    /// [`Pipeline::record_step`] does. `false`: refused.
    pub async fn record_patch(
        self,
        keys: &TopicKeys,
        id: &str,
        attempt: u32,
        version: &str,
        name: &str,
        new_path: bool,
    ) -> Result<bool, QueueError> {
        let mut inv = scripts::STEP.on(keys);
        inv.arg(id)
            .arg(attempt)
            .arg(version)
            .arg(format!("p:{name}"))
            .arg(if new_path { "1" } else { "0" });
        let recorded: i64 = self.q.invoke_durable(&inv).await?;
        Ok(recorded == 1)
    }

    /// Record batch `batch` of job `id`'s effects journal (`e:<batch>`,
    /// [`crate::effects::encode`]d) while `attempt` still owns the job, as
    /// [`Pipeline::record_step`] does. `false`: refused.
    pub async fn record_effects(
        self,
        keys: &TopicKeys,
        id: &str,
        attempt: u32,
        version: &str,
        batch: u32,
        encoded: &[u8],
    ) -> Result<bool, QueueError> {
        let mut inv = scripts::STEP.on(keys);
        inv.arg(id)
            .arg(attempt)
            .arg(version)
            .arg(format!("e:{batch}"))
            .arg(encoded);
        let recorded: i64 = self.q.invoke_durable(&inv).await?;
        Ok(recorded == 1)
    }

    /// Suspend jobs (`suspend.lua`), keeping each one's story and logs (as
    /// `kept` says); the jobs left alone and why.
    pub async fn suspend(
        self,
        keys: &TopicKeys,
        jobs: &[Suspending],
        now_ms: u64,
        kept: crate::Kept,
    ) -> Result<Vec<Refusal>, QueueError> {
        let mut inv = scripts::SUSPEND.on(keys);
        self.q.wake_args(&mut inv, keys);
        inv.arg(now_ms).arg(kept.logs);
        for s in jobs {
            let waits = serde_json::to_string(&s.suspension).expect("a suspension is JSON");
            inv.arg(&s.id)
                .arg(s.attempt)
                .arg(s.suspension.until_ms)
                .arg(&s.suspension.timer)
                .arg(&s.version)
                .arg(waits)
                .arg(crate::Failure::story(s.story.clone()).encode())
                .arg(&s.logs);
        }
        attempt::refusals(self.q.invoke_durable(&inv).await?)
    }
}

impl Queue {
    /// Send signal `name` with `payload` to job `id` (`signal.lua`).
    pub async fn signal(
        &self,
        keys: &TopicKeys,
        id: &str,
        name: &str,
        payload: &[u8],
        now_ms: u64,
    ) -> Result<Signalled, QueueError> {
        check_name("signal", name).map_err(QueueError::Invalid)?;
        if payload.len() > MAX_SIGNAL {
            return Err(QueueError::Invalid(format!(
                "signal payload of {} bytes is over the limit of {MAX_SIGNAL} bytes",
                payload.len()
            )));
        }
        let mut inv = scripts::SIGNAL.on(keys);
        self.wake_args(&mut inv, keys);
        inv.arg(now_ms).arg(id).arg(name).arg(payload);
        let answer: String = self.invoke_durable(&inv).await?;
        Ok(match answer.as_str() {
            "woken" => Signalled::Woken,
            "kept" => Signalled::Kept,
            "duplicate" => Signalled::Duplicate,
            "dead" => Signalled::Dead,
            "none" => Signalled::NoSuchJob,
            other => return Err(QueueError::Protocol(format!("signal answered {other:?}"))),
        })
    }

    /// Wake suspended job `id` now (`wake.lua`): its sleep ends, its wait
    /// for a signal times out.
    pub async fn wake(&self, keys: &TopicKeys, id: &str, now_ms: u64) -> Result<Woken, QueueError> {
        let mut inv = scripts::WAKE.on(keys);
        self.wake_args(&mut inv, keys);
        inv.arg(now_ms).arg(id);
        let answer: String = self.invoke_durable(&inv).await?;
        Ok(match answer.as_str() {
            "woken" => Woken::Woken,
            "awake" => Woken::NotSuspended,
            "none" => Woken::NoSuchJob,
            other => return Err(QueueError::Protocol(format!("wake answered {other:?}"))),
        })
    }

    /// Job `id`'s journal (`None`: it has none) and what it waits for, if
    /// it is suspended.
    pub async fn journal(
        &self,
        keys: &TopicKeys,
        id: &str,
    ) -> Result<(Option<Journal>, Option<Suspension>), QueueError> {
        let mut pipe = redis::pipe();
        pipe.hgetall(keys.journal_of(id)).hget(&keys.suspended, id);
        let (fields, waits): (Value, Option<String>) =
            pipe.query_async(&mut self.conn.clone()).await?;
        let journal = Journal::from_reply(&fields)?;
        let journal = (journal != Journal::default()).then_some(journal);
        let waits = waits.and_then(|w| serde_json::from_str(&w).ok());
        Ok((journal, waits))
    }
}
