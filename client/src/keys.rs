//! Every Redis key name hourglass uses, and nothing else names keys.
//!
//! All keys of one topic share the hash tag `{topic}`, so each topic lives
//! in one Redis Cluster slot and every script touches keys of one slot only.

/// The keys of one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicKeys {
    /// The topic's name.
    pub topic: String,
    /// The time index of the waiting jobs (scheduled, waiting to retry, or
    /// due now): a zset of buckets, bucket name → its lower bound (ms), each
    /// bucket `<pending>:<name>` a zset id → due time (ms); `<pending>:next`
    /// names new buckets. A job of priority 1..9 waits on an index of its
    /// own, `<pending>:p<priority>`, built the same way. See `lua/index.lua`.
    pub pending: String,
    /// hash id → priority (1..9) of the live jobs that have one (0, the
    /// highest, is every other job's): `<pending>:priority`, so the scripts
    /// that hold the time index find it beside it.
    pub priority: String,
    /// zset id → deadline (ms) of the live jobs enqueued with one: not
    /// started by then, a job expires (`lua/prelude.lua`: expired_take).
    pub expire: String,
    /// How many of the topic's jobs expired, ever (a counter).
    pub expired: String,
    /// Layout 2's zset id → due time (ms) of the waiting jobs, emptied by
    /// `hourglass migrate` and by every claim (`lua/index.lua`: absorb).
    pub legacy_pending: String,
    /// zset id → lease deadline (ms): claimed by a runner; plus one member
    /// of 520 `~` at +inf, no job, that keeps it a skiplist (`lua/prelude.lua`:
    /// leases_write).
    pub lease: String,
    /// hash id → encoded record (max attempts, enqueued-at, payload).
    pub job: String,
    /// hash id → attempts started so far (fencing token of a lease); plus
    /// one field of 520 `~`, no job, that keeps it a hash table
    /// (`lua/prelude.lua`: keep_hashed).
    pub attempt: String,
    /// hash id → last error of a failed attempt.
    pub error: String,
    /// zset id → time of death (ms).
    pub dead: String,
    /// hash id → JSON with reason, attempts and last error.
    pub dead_info: String,
    /// Counter behind generated job ids.
    pub seq: String,
    /// hash "attempt:id" → follow-up jobs of an acked attempt, until delivered.
    pub outbox: String,
    /// zset "attempt:id" → when an undelivered outbox entry is swept (ms).
    pub outbox_due: String,
    /// Set while the topic is paused: it accepts jobs and claims none.
    pub paused: String,
    /// The topic's rate limiter (GCRA state), when it has a rate.
    pub rate: String,
    /// hash: which handler version serves (stable, canary with its share,
    /// window and counts, pinned, retired) and the last verdict.
    pub rollout: String,
    /// hash: every kept handler version, when first seen, its attempts,
    /// failures and crashes across all runners.
    pub versions: String,
    /// The topic's layout version (see `layout.rs`), in its own slot.
    pub layout: String,
    /// hash id → the account its producer tagged it with (only tagged jobs).
    pub account: String,
    /// hash id → the latest progress a running job reported (JSON).
    pub progress: String,
    /// The pub/sub channel of the topic's job events (`"<id>\n<json>"`):
    /// progress, failed attempts and ends, for waiters.
    pub events: String,
    /// hash id → '1' for each job of a durable handler that has a journal,
    /// kept at `<journal>:<id>` (see `lua/step.lua`, `journal.rs`).
    pub journal: String,
    /// hash id → what a suspended job waits for (JSON, `journal.rs`:
    /// `Suspension`), until it is claimed again.
    pub suspended: String,
    /// hash: the fairness state of the topic's tenant keys (virtual clock,
    /// jobs queued, the settings of the last fair claim), and the prefix of
    /// the keys beside it: `<fair>:of` (hash id → the job's tenant key),
    /// `:jobs` (zset: queued jobs by finish tag), `:parked:<key>` (zset: a
    /// held key's jobs by tag), `:q:<key>` (zset: a key's jobs beyond its
    /// window under share "cpu", by due time), `:wait` (zset: rate-held keys
    /// by when they may start), `:len`, `:F`, `:w`, `:running`, `:weight`,
    /// `:tat`, `:cost` (hashes key → value), `:paused` (set), `:cpu:<10 s>`
    /// (zset key → CPU µs); `:ready` and `:idle` only from the build before,
    /// deleted when met. See `lua/prelude.lua` and `lua/claim_fair.lua`.
    pub fair: String,
    /// hash: a flow's state, when these are the keys of flow `<id>`
    /// (`Queue::flow_keys`, topic name `flow:<id>`; see `flow/`).
    pub flow: String,
    /// hash id → the log lines a stored job's attempts wrote (`logs.rs`),
    /// at most the topic's `logs.keep` bytes each (`lua/prelude.lua`: logs_add).
    pub logs: String,
    /// zset id → when it ended (ms): the most recent ends of a topic that
    /// keeps them (`results`), newest 10,000 at most (`lua/prelude.lua`: ended).
    pub ended: String,
}

impl TopicKeys {
    /// The cursor of schedule `name` enqueueing into this topic.
    pub fn schedule(&self, name: &str) -> String {
        format!("{}:schedule:{name}", self.prefix())
    }

    /// `namespace:{topic}`, what every key of the topic starts with.
    fn prefix(&self) -> &str {
        self.legacy_pending.trim_end_matches(":pending")
    }

    /// Where the end of job `id` (state, result) is kept, when the topic
    /// keeps results (same hash tag as the topic).
    pub fn result(&self, id: &str) -> String {
        format!("{}:result:{id}", self.prefix())
    }

    /// The journal of job `id` (same hash tag as the topic).
    pub fn journal_of(&self, id: &str) -> String {
        format!("{}:{id}", self.journal)
    }

    /// The unique-for reservation of job `id` (same hash tag as the topic).
    pub fn unique(&self, id: &str) -> String {
        format!("{}:unique:{id}", self.prefix())
    }

    /// The keys of `topic` under `namespace`.
    pub fn new(namespace: &str, topic: &str) -> TopicKeys {
        let key = |name: &str| format!("{namespace}:{{{topic}}}:{name}");
        TopicKeys {
            topic: topic.to_owned(),
            pending: key("due"),
            priority: key("due:priority"),
            expire: key("expire"),
            expired: key("expired"),
            legacy_pending: key("pending"),
            lease: key("lease"),
            job: key("job"),
            attempt: key("attempt"),
            error: key("error"),
            dead: key("dead"),
            dead_info: key("dead_info"),
            seq: key("seq"),
            outbox: key("outbox"),
            outbox_due: key("outbox_due"),
            paused: key("paused"),
            rate: key("rate"),
            rollout: key("rollout"),
            versions: key("versions"),
            layout: key("layout"),
            account: key("account"),
            progress: key("progress"),
            events: key("events"),
            journal: key("journal"),
            suspended: key("suspended"),
            fair: key("fair"),
            flow: key("flow"),
            logs: key("logs"),
            ended: key("ended"),
        }
    }
}

/// The keys where runners say they are alive: one hash tag of their own,
/// `{:runners}` (a topic name cannot hold ':'), so one slot on a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerKeys {
    /// hash runner id → what it reports (JSON).
    pub info: String,
    /// zset runner id → alive until (ms).
    pub alive: String,
}

impl RunnerKeys {
    /// The runners' keys under `namespace`.
    pub fn new(namespace: &str) -> RunnerKeys {
        RunnerKeys {
            info: format!("{namespace}:{{:runners}}:info"),
            alive: format!("{namespace}:{{:runners}}:alive"),
        }
    }
}

/// The namespace's layout version (see `layout.rs`), with a hash tag of its own.
pub fn layout_key(namespace: &str) -> String {
    format!("{namespace}:{{:layout}}")
}

/// The usage of tagged jobs in the hour starting at `hour_s` (Unix seconds),
/// summed per account: one hash per hour, a hash tag of its own.
pub fn usage_key(namespace: &str, hour_s: u64) -> String {
    format!("{namespace}:{{:usage}}:{hour_s}")
}

/// A topic's history in the hour starting at `hour_s` (Unix seconds), by
/// the minute (`minutes.rs`): one hash, in the `{:minutes}` slot.
pub fn minutes_key(namespace: &str, topic: &str, hour_s: u64) -> String {
    format!("{namespace}:{{:minutes}}:{topic}:{hour_s}")
}

/// Which runner takes each topic's counts in minute `minute` (Unix
/// minutes): topic → runner, the first to claim it (`minutes.rs`).
pub fn minute_claims(namespace: &str, minute: u64) -> String {
    format!("{namespace}:{{:minutes}}:claims:{minute}")
}

/// Recent flows (flow id → when it was created, ms), the newest
/// [`crate::flow::RECENT_FLOWS`]: in the slot of [`flows_stats`], which a
/// flow's creation writes too.
pub fn flows_recent(namespace: &str) -> String {
    format!("{{{}}}:recent", flows_stats(namespace))
}

/// The pub/sub channel on which scripts announce a job that became due earlier
/// than anything before it: runners sleep until the next due time or this.
pub fn wake_channel(namespace: &str) -> String {
    format!("{namespace}:wake")
}

/// The zset of flows that may have releases to sweep (flow id → when), in
/// a slot of its own: each command on it touches only it. A flow's own keys
/// are those of the pseudo-topic `flow:<id>` ([`TopicKeys::flow`]).
pub fn flows_due(namespace: &str) -> String {
    format!("{namespace}:flows:due")
}

/// The hash of flow counts for `/metrics` (`created`, `completed`,
/// `failed`), in a slot of its own.
pub fn flows_stats(namespace: &str) -> String {
    format!("{namespace}:flows:stats")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_keys_of_a_topic_share_one_hash_tag() {
        let k = TopicKeys::new("ns", "orders");
        // destructured, so a key added later cannot be missed here
        let TopicKeys {
            topic: _,
            pending,
            priority,
            expire,
            expired,
            legacy_pending,
            lease,
            job,
            attempt,
            error,
            dead,
            dead_info,
            seq,
            outbox,
            outbox_due,
            paused,
            rate,
            rollout,
            versions,
            layout,
            account,
            progress,
            events,
            journal,
            suspended,
            fair,
            flow,
            logs,
            ended,
        } = &k;
        for key in [
            pending,
            priority,
            expire,
            expired,
            legacy_pending,
            lease,
            job,
            attempt,
            error,
            dead,
            dead_info,
            seq,
            outbox,
            outbox_due,
            paused,
            rate,
            rollout,
            versions,
            layout,
            account,
            progress,
            events,
            journal,
            suspended,
            fair,
            flow,
            logs,
            ended,
            &k.journal_of("order-1"),
            &k.schedule("nightly"),
            &k.result("order-1"),
            &k.unique("order-1"),
        ] {
            assert!(key.starts_with("ns:{orders}:"), "{key}");
        }
        // the scripts that hold the time index find the priorities beside it
        assert_eq!(*priority, format!("{pending}:priority"));
    }
}
