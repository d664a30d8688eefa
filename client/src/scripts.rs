//! The Lua scripts, loaded once, each with the KEYS of a topic it takes,
//! named once here. Each state change of a job is one script; each script
//! has exactly one wrapper (a method of [`super::Queue`] or of one of its
//! handles). A test checks each list against its script's `KEYS[n]` header.

use std::sync::LazyLock;

use redis::{Script, ScriptInvocation};

use super::TopicKeys;

/// A script, and the keys of a topic it takes first, in `KEYS` order.
pub(super) struct Lua {
    script: LazyLock<Script>,
    /// Its file in `client/lua/` (for the test of its header).
    #[cfg_attr(not(test), allow(dead_code))]
    file: &'static str,
    keys: &'static [fn(&TopicKeys) -> &String],
}

impl Lua {
    /// An invocation with the keys of the topic `keys` in place; the caller
    /// adds any further KEYS (a job's result key, ...) and the ARGV.
    pub(super) fn on(&self, keys: &TopicKeys) -> ScriptInvocation<'_> {
        let mut inv = self.script.prepare_invoke();
        for key in self.keys {
            inv.key(key(keys));
        }
        inv
    }

    /// An invocation with no keys in place: for scripts on keys that are
    /// not a topic's (the runners', a schedule's cursor).
    pub(super) fn bare(&self) -> ScriptInvocation<'_> {
        self.script.prepare_invoke()
    }
}

macro_rules! script {
    // with the prelude (`prelude.lua`, then the time index, `index.lua`)
    // and `fair.lua`: a script that queues, picks or moves
    // jobs per tenant key
    ($name:ident, $file:literal, [$($key:ident),*], fair) => {
        pub(super) static $name: Lua = Lua {
            script: LazyLock::new(|| {
                Script::new(concat!(
                    include_str!("../lua/prelude.lua"),
                    include_str!("../lua/index.lua"),
                    include_str!("../lua/fair.lua"),
                    include_str!(concat!("../lua/", $file))
                ))
            }),
            file: $file,
            keys: &[$(|k: &TopicKeys| -> &String { &k.$key }),*],
        };
    };
    // without the prelude: a script on the path of a single call that uses
    // none of it (the prelude's definitions cost about 5 us a call)
    ($name:ident, $file:literal, [$($key:ident),*], alone) => {
        pub(super) static $name: Lua = Lua {
            script: LazyLock::new(|| Script::new(include_str!(concat!("../lua/", $file)))),
            file: $file,
            keys: &[$(|k: &TopicKeys| -> &String { &k.$key }),*],
        };
    };
    ($name:ident, $file:literal, [$($key:ident),*]) => {
        pub(super) static $name: Lua = Lua {
            script: LazyLock::new(|| {
                Script::new(concat!(
                    include_str!("../lua/prelude.lua"),
                    include_str!("../lua/index.lua"),
                    include_str!(concat!("../lua/", $file))
                ))
            }),
            file: $file,
            keys: &[$(|k: &TopicKeys| -> &String { &k.$key }),*],
        };
    };
}

script!(
    ENQUEUE,
    "enqueue.lua",
    [
        pending,
        job,
        dead,
        dead_info,
        seq,
        lease,
        attempt,
        error,
        layout,
        account,
        legacy_pending,
        journal,
        fair,
        expire
    ],
    fair
);
script!(
    CLAIM,
    "claim.lua",
    [
        pending,
        lease,
        job,
        attempt,
        error,
        paused,
        rate,
        account,
        legacy_pending,
        journal,
        suspended,
        expire
    ]
);
script!(
    CLAIM_FAIR,
    "claim_fair.lua",
    [
        pending, lease, job, attempt, error, paused, rate, account, journal, suspended, fair,
        expire
    ],
    fair
);
script!(
    ACK,
    "ack.lua",
    [
        lease, job, attempt, error, outbox, outbox_due, account, progress, journal, fair, expire,
        priority
    ]
);
script!(
    RETRY,
    "retry.lua",
    [lease, pending, attempt, error, job, fair]
);
script!(
    BURY,
    "bury.lua",
    [
        lease, job, attempt, error, dead, dead_info, account, progress, journal, outbox,
        outbox_due, fair, expire, priority, expired
    ]
);
script!(
    REQUEUE,
    "requeue.lua",
    [lease, pending, error, job, fair],
    fair
);
script!(
    RELEASE,
    "release.lua",
    [lease, pending, attempt, job, fair],
    fair
);
script!(OUTBOX_TAKE, "outbox_take.lua", [outbox, outbox_due]);
script!(OUTBOX_CLEAR, "outbox_clear.lua", [outbox, outbox_due]);
script!(
    CANCEL,
    "cancel.lua",
    [
        pending,
        lease,
        job,
        attempt,
        error,
        dead,
        dead_info,
        account,
        progress,
        legacy_pending,
        journal,
        suspended,
        fair,
        expire
    ],
    fair
);
script!(
    DEAD_RETRY,
    "dead_retry.lua",
    [dead, dead_info, pending, job, attempt, error, journal]
);
script!(
    DEAD_PURGE,
    "dead_purge.lua",
    [dead, dead_info, job, account, journal, fair, priority]
);
script!(STEP, "step.lua", [attempt, journal], alone);
script!(
    SUSPEND,
    "suspend.lua",
    [lease, pending, attempt, job, journal, suspended, fair]
);
script!(
    SIGNAL,
    "signal.lua",
    [job, dead, journal, suspended, pending]
);
script!(WAKE, "wake.lua", [job, journal, suspended, pending]);
script!(PAUSE, "pause.lua", [paused, pending]);
script!(HEARTBEAT, "heartbeat.lua", []);
script!(SCHEDULE_ADVANCE, "schedule_advance.lua", []);
script!(ROLLOUT_SYNC, "rollout_sync.lua", [rollout, versions]);
script!(ROLLOUT_SET, "rollout_set.lua", [rollout, versions]);
script!(PROGRESS, "progress.lua", [lease, attempt, progress]);
script!(PEEK, "peek.lua", [job, dead, lease, progress]);
script!(
    COUNTS,
    "counts.lua",
    [
        pending,
        job,
        lease,
        dead,
        paused,
        legacy_pending,
        suspended,
        fair,
        expired
    ]
);
script!(KEY_PAUSE, "key_pause.lua", [fair], fair);
script!(KEY_CHARGE, "key_charge.lua", [fair], alone);
script!(KEY_STATS, "key_stats.lua", [fair, lease]);
script!(FAIR_OFF, "fair_off.lua", [pending, job, fair], fair);
script!(MIGRATE, "migrate.lua", [pending, job, legacy_pending]);
script!(
    FLOW_CREATE,
    "flow_create.lua",
    [flow, outbox, outbox_due],
    alone
);
script!(FLOW_END, "flow_end.lua", [flow, outbox, outbox_due], alone);
script!(FLOW_READ, "flow_read.lua", [flow], alone);
script!(
    FLOW_CANCEL,
    "flow_cancel.lua",
    [flow, outbox, outbox_due],
    alone
);
script!(FLOW_ADD, "flow_add.lua", [flow, outbox, outbox_due], alone);
script!(FLOW_UNINDEX, "flow_unindex.lua", [], alone);

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbered `KEYS[n]:` a script's header names (not `KEYS[8 + j]`).
    fn header_keys(file: &str) -> usize {
        let path = format!("{}/lua/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).expect("script file");
        text.lines()
            .take_while(|l| l.starts_with("--"))
            .flat_map(|l| l.match_indices("KEYS[").map(move |(i, _)| &l[i + 5..]))
            .filter(|rest| {
                rest.split_once("]:")
                    .is_some_and(|(n, _)| n.parse::<usize>().is_ok())
            })
            .count()
    }

    #[test]
    fn each_scripts_topic_keys_match_its_header() {
        // with the numbered KEYS its wrapper adds after the topic's
        let all = [
            (&ENQUEUE, 0),
            (&CLAIM, 0),
            (&CLAIM_FAIR, 0),
            (&KEY_PAUSE, 0),
            (&KEY_CHARGE, 0),
            (&KEY_STATS, 0),
            (&FAIR_OFF, 0),
            (&ACK, 0),
            (&RETRY, 0),
            (&BURY, 0),
            (&REQUEUE, 0),
            (&RELEASE, 0),
            (&OUTBOX_TAKE, 0),
            (&OUTBOX_CLEAR, 0),
            (&CANCEL, 0),
            (&DEAD_RETRY, 0),
            (&DEAD_PURGE, 0),
            (&PAUSE, 0),
            (&HEARTBEAT, 2),
            (&SCHEDULE_ADVANCE, 1),
            (&ROLLOUT_SYNC, 0),
            (&ROLLOUT_SET, 0),
            (&PROGRESS, 0),
            (&PEEK, 1),
            (&COUNTS, 0),
            (&MIGRATE, 0),
            (&STEP, 0),
            (&SUSPEND, 0),
            (&SIGNAL, 0),
            (&WAKE, 0),
            (&FLOW_CREATE, 0),
            (&FLOW_END, 0),
            (&FLOW_READ, 0),
            (&FLOW_CANCEL, 0),
            (&FLOW_UNINDEX, 1),
        ];
        for (lua, added) in all {
            assert_eq!(
                lua.keys.len() + added,
                header_keys(lua.file),
                "{}: the KEYS its header names and the topic keys listed in scripts.rs differ",
                lua.file
            );
        }
    }
}
