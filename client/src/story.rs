//! A job's story: each of its attempts (the most recent [`KEPT_ATTEMPTS`])
//! with when it ran, on which runner and handler version, how it ended and
//! what it used.
//!
//! Where it is kept: while the job lives, in the topic's error hash as a
//! [`Failure`] (its `attempts`; its `error` empty while no attempt has
//! failed), written by the scripts that end an attempt (`retry.lua`,
//! `suspend.lua`; `requeue.lua` adds the attempt whose lease expired) and
//! read back by the claim, so the runner appends each attempt to what it was
//! handed and no script builds JSON; with the dead letter
//! ([`super::DeadInfo::costs`]); with the kept end of a topic with `results`
//! ([`super::JobEnd::history`]). An attempt that acks on a topic without
//! `results` writes nothing: the job and its story are deleted together.

use serde::{Deserialize, Serialize};

/// What one attempt used, as the runner measured it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct Usage {
    /// From the start of instantiation to the handler's answer (or its stop), µs.
    pub wall_us: u64,
    /// CPU the runner's threads spent running the instance, µs.
    pub cpu_us: u64,
    /// The most linear memory the instance held at once, bytes.
    pub memory_peak: u64,
    /// How long the fresh instance took to start, µs.
    pub start_us: u64,
    /// Outbound HTTP requests sent.
    pub requests: u32,
    /// Request body bytes sent.
    pub bytes_out: u64,
    /// Response body bytes received.
    pub bytes_in: u64,
}

impl Usage {
    /// The CPU time.
    pub fn cpu(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.cpu_us)
    }

    /// The wall time.
    pub fn wall(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.wall_us)
    }
}

/// How an attempt ended, in a job's story.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// Its handler acked.
    Ack,
    /// It failed and the job runs again.
    Retry,
    /// It failed and the job was dead-lettered.
    Dead,
    /// Its durable handler slept or waited for a signal (not counted).
    Suspend,
    /// The job's deadline passed: it was not run again.
    Expired,
    /// Its runner stopped or lost Redis: the lease expired (`requeue.lua`).
    LeaseExpired,
}

/// One attempt of a job, as its story keeps it. Fields an older runner did
/// not record are absent (0 or empty), so stories written before them read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AttemptCost {
    /// Which attempt (1 for the first). A suspended attempt is not counted:
    /// the attempt after it has the same number.
    pub attempt: u32,
    /// The content hash of the handler that ran it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
    /// What it used.
    #[serde(flatten)]
    pub usage: Usage,
    /// How it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<AttemptOutcome>,
    /// Why it failed (at most [`STORY_ERROR`] bytes), for a failed attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When it was due (ms).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub due_at_ms: u64,
    /// When its handler was called (ms).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub started_at_ms: u64,
    /// When it ended (ms).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ended_at_ms: u64,
    /// The runner that ran it (`host-pid-random`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<String>,
    /// A durable handler's steps it recorded (ran) and replayed (read back).
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub steps_recorded: u32,
    /// Steps it replayed from the journal.
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub steps_replayed: u32,
    /// The signals its journal held when it started (a durable handler's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signals: Vec<String>,
    /// For a suspended attempt: until when it sleeps or waits (ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits_until_ms: Option<u64>,
    /// For a suspended attempt: the signal it waits for, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits_for: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero32(n: &u32) -> bool {
    *n == 0
}

impl AttemptCost {
    /// Attempt `attempt` on `handler`, which used `usage`; the rest unknown.
    pub fn new(attempt: u32, handler: Option<String>, usage: Usage) -> AttemptCost {
        AttemptCost {
            attempt,
            handler,
            usage,
            outcome: None,
            error: None,
            due_at_ms: 0,
            started_at_ms: 0,
            ended_at_ms: 0,
            runner: None,
            steps_recorded: 0,
            steps_replayed: 0,
            signals: Vec::new(),
            waits_until_ms: None,
            waits_for: None,
        }
    }

    /// This attempt ended as `outcome`, failing with `error` (cut to
    /// [`STORY_ERROR`] bytes: the story stays small however long an error is).
    pub fn ended_as(&mut self, outcome: AttemptOutcome, error: Option<&str>) {
        self.outcome = Some(outcome);
        self.error = error.map(|e| {
            if e.len() <= STORY_ERROR {
                return e.to_owned();
            }
            let mut cut = STORY_ERROR;
            while !e.is_char_boundary(cut) {
                cut -= 1;
            }
            format!("{}…", &e[..cut])
        });
    }
}

/// Attempts a job's story keeps: the most recent ones.
pub const KEPT_ATTEMPTS: usize = 25;

/// The longest error an attempt of a story keeps, in bytes (the job's last
/// failure keeps the whole of its own).
pub const STORY_ERROR: usize = 1024;

/// `earlier` with `this` added, the oldest dropped past [`KEPT_ATTEMPTS`].
pub fn with_attempt(mut earlier: Vec<AttemptCost>, this: AttemptCost) -> Vec<AttemptCost> {
    earlier.push(this);
    if earlier.len() > KEPT_ATTEMPTS {
        earlier.drain(..earlier.len() - KEPT_ATTEMPTS);
    }
    earlier
}

/// How the last attempt failed, and the job's story so far: what the topic's
/// error hash keeps (as JSON) while the job lives. `error` is empty when
/// no attempt failed yet (a durable job that only slept so far).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Failure {
    /// What went wrong ('' while nothing has).
    #[serde(default)]
    pub error: String,
    /// The content hash of the handler that ran the attempt, if one ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
    /// When (ms since the Unix epoch).
    #[serde(default)]
    pub at: u64,
    /// The job's story: each attempt so far, with what it used (the most
    /// recent [`KEPT_ATTEMPTS`]). Written last: `requeue.lua` keeps it by
    /// taking what follows `,"attempts":` (see `Failure::encode`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<AttemptCost>,
}

impl Failure {
    /// The stored form (JSON), the one encoding of a failure: Lua stores what
    /// it is given and never builds one. `attempts` is the last field, so
    /// `requeue.lua` can keep a story whole when it records a lost lease.
    pub(super) fn encode(&self) -> String {
        serde_json::to_string(self).expect("a failure serializes")
    }

    /// Read a stored failure; text from before failures were JSON is the error itself.
    pub(super) fn parse(text: String) -> Failure {
        let mut f = serde_json::from_str(&text).unwrap_or(Failure {
            error: text,
            handler: None,
            at: 0,
            attempts: Vec::new(),
        });
        // requeue.lua appends without cutting: the story is cut here
        if f.attempts.len() > KEPT_ATTEMPTS {
            f.attempts.drain(..f.attempts.len() - KEPT_ATTEMPTS);
        }
        f
    }

    /// Only the story (nothing failed yet): what a suspension keeps.
    pub fn story(attempts: Vec<AttemptCost>) -> Failure {
        Failure {
            error: String::new(),
            handler: None,
            at: 0,
            attempts,
        }
    }

    /// Whether an attempt failed (else it holds only the story).
    pub fn failed(&self) -> bool {
        !self.error.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_story_written_before_its_new_fields_still_reads() {
        let old = r#"{"error":"boom","handler":"h","at":5,"attempts":[{"attempt":1,"handler":"h","wall_us":3,"cpu_us":2,"memory_peak":1,"start_us":1,"requests":0,"bytes_out":0,"bytes_in":0}]}"#;
        let f = Failure::parse(old.into());
        assert_eq!(f.attempts.len(), 1);
        assert_eq!(f.attempts[0].usage.cpu_us, 2);
        assert_eq!(f.attempts[0].outcome, None);
        assert_eq!(Failure::parse("plain text".into()).error, "plain text");
    }

    #[test]
    fn the_story_is_the_last_field_written_for_requeue_lua() {
        let mut a = AttemptCost::new(1, Some("h".into()), Usage::default());
        a.ended_as(AttemptOutcome::Retry, Some("x"));
        let f = Failure {
            error: "a \"quoted\" ,\"attempts\":[ error".into(),
            handler: Some("h".into()),
            at: 9,
            attempts: vec![a],
        };
        let text = f.encode();
        // the first unescaped `,"attempts":` is the field itself
        let at = text.find(",\"attempts\":").unwrap();
        assert!(
            text[at..].starts_with(",\"attempts\":[{\"attempt\":1"),
            "{text}"
        );
        assert!(text.ends_with("]}"));
        // what requeue.lua writes from it reads back with the story whole
        let spliced = format!("{{\"error\":\"lease expired\",\"at\":10{}", &text[at..]);
        let back = Failure::parse(spliced);
        assert_eq!(back.error, "lease expired");
        assert_eq!(back.attempts, f.attempts);
    }

    #[test]
    fn a_long_error_is_cut_in_the_story_and_the_story_keeps_the_last_25() {
        let mut a = AttemptCost::new(1, None, Usage::default());
        a.ended_as(AttemptOutcome::Dead, Some(&"é".repeat(2000)));
        let kept = a.error.unwrap();
        assert!(kept.len() <= STORY_ERROR + 3 && kept.ends_with('…'));
        let mut story = Vec::new();
        for n in 1..=30 {
            story = with_attempt(story, AttemptCost::new(n, None, Usage::default()));
        }
        assert_eq!(story.len(), KEPT_ATTEMPTS);
        assert_eq!(story[0].attempt, 6);
    }
}
