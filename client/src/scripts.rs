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

/// The shared Lua every script but the `alone` ones is built on, in
/// order: a later file uses the earlier ones' definitions.
const LIBRARIES: [&str; 3] = [
    include_str!("../lua/prelude.lua"),
    include_str!("../lua/index.lua"),
    include_str!("../lua/fair.lua"),
];

/// `body` after the definitions of [`LIBRARIES`] it uses, directly or
/// through another definition, in their order, and nothing else of them.
/// Redis runs a script's whole text at every call, so each definition
/// kept costs each call its closure (defining all 58 of the three files
/// cost 14 us a call on top of an empty script's 7). At the top level the
/// libraries hold only `local` definitions, each running to the next line
/// that starts with `local` (test: `libraries_hold_only_definitions`); a
/// name is used where it appears as a word outside a whole-line comment
/// (after `--` on a line of code, or in a string, it counts: keeping a
/// definition too many costs a closure, one too few an error).
fn with_libraries(body: &str) -> String {
    assemble(&LIBRARIES, body)
}

/// `body` after what it uses of `libs`: [`with_libraries`].
fn assemble(libs: &[&str], body: &str) -> String {
    let defs: Vec<(&str, &str)> = libs.iter().flat_map(|lib| definitions(lib)).collect();
    let mut wanted: std::collections::HashSet<&str> = words(body).collect();
    // a definition uses only earlier ones: walking back, each wanted
    // definition's words are added before any definition it uses is reached
    let mut kept = vec![false; defs.len()];
    for (i, (name, text)) in defs.iter().enumerate().rev() {
        if wanted.contains(name) {
            kept[i] = true;
            wanted.extend(words(text));
        }
    }
    let mut out = String::new();
    for ((_, text), keep) in defs.iter().zip(kept) {
        if keep {
            out.push_str(text);
        }
    }
    out.push_str(body);
    out
}

/// A library's top-level definitions, as (name, text): each from a line
/// starting with `local` to the next one (what comes before the first is
/// its header comment, dropped).
fn definitions(lib: &str) -> Vec<(&str, &str)> {
    let starts: Vec<usize> = lib
        .starts_with("local ")
        .then_some(0)
        .into_iter()
        .chain(lib.match_indices("\nlocal ").map(|(i, _)| i + 1))
        .collect();
    starts
        .iter()
        .zip(starts.iter().skip(1).copied().chain([lib.len()]))
        .map(|(&from, to)| {
            let text = &lib[from..to];
            let rest = text["local ".len()..].trim_start_matches("function ");
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            (&rest[..end], text)
        })
        .collect()
}

/// The Lua names in `text` outside its whole-line comments (a script's
/// header names the helpers its keys are for).
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .flat_map(|line| line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
}

macro_rules! script {
    // with what it uses of the libraries (`prelude.lua`, the time index
    // `index.lua`, tenant keys `fair.lua`): see `with_libraries`
    ($name:ident, $file:literal, [$($key:ident),*]) => {
        pub(super) static $name: Lua = Lua {
            script: LazyLock::new(|| {
                Script::new(&with_libraries(include_str!(concat!("../lua/", $file))))
            }),
            file: $file,
            keys: &[$(|k: &TopicKeys| -> &String { &k.$key }),*],
        };
    };
    // alone: a script that uses none of the libraries
    ($name:ident, $file:literal, [$($key:ident),*], alone) => {
        pub(super) static $name: Lua = Lua {
            script: LazyLock::new(|| Script::new(include_str!(concat!("../lua/", $file)))),
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
    ]
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
    ]
);
script!(
    ACK,
    "ack.lua",
    [
        lease, job, attempt, error, outbox, outbox_due, account, progress, journal, fair, expire,
        priority, logs, ended
    ]
);
script!(
    RETRY,
    "retry.lua",
    [lease, pending, attempt, error, job, fair, logs]
);
script!(
    BURY,
    "bury.lua",
    [
        lease, job, attempt, error, dead, dead_info, account, progress, journal, outbox,
        outbox_due, fair, expire, priority, expired, logs, ended
    ]
);
script!(
    REQUEUE,
    "requeue.lua",
    [lease, pending, error, job, fair, attempt]
);
script!(RELEASE, "release.lua", [lease, pending, attempt, job, fair]);
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
        expire,
        logs,
        ended
    ]
);
script!(
    DEAD_RETRY,
    "dead_retry.lua",
    [dead, dead_info, pending, job, attempt, error, journal]
);
script!(
    DEAD_PURGE,
    "dead_purge.lua",
    [dead, dead_info, job, account, journal, fair, priority, logs]
);
script!(STEP, "step.lua", [attempt, journal], alone);
script!(
    UPGRADE,
    "upgrade.lua",
    [job, lease, dead, attempt, journal, suspended],
    alone
);
script!(HOLDS, "holds.lua", [journal, job, dead], alone);
script!(
    SUSPEND,
    "suspend.lua",
    [
        lease, pending, attempt, job, journal, suspended, fair, error, logs
    ]
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
script!(EXTEND, "extend.lua", [lease, attempt]);
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
script!(
    SCALE,
    "scale.lua",
    [pending, lease, suspended, fair, legacy_pending, paused]
);
script!(KEY_PAUSE, "key_pause.lua", [fair]);
script!(KEY_CHARGE, "key_charge.lua", [fair], alone);
script!(KEY_STATS, "key_stats.lua", [fair, lease]);
script!(FAIR_OFF, "fair_off.lua", [pending, job, fair]);
script!(MIGRATE, "migrate.lua", [pending, job, legacy_pending]);
script!(
    FLOW_CREATE,
    "flow_create.lua",
    [flow, outbox, outbox_due],
    alone
);
script!(FLOW_END, "flow_end.lua", [flow, outbox, outbox_due]);
script!(FLOW_READ, "flow_read.lua", [flow], alone);
script!(FLOW_CANCEL, "flow_cancel.lua", [flow, outbox, outbox_due]);
script!(FLOW_ADD, "flow_add.lua", [flow, outbox, outbox_due], alone);
script!(FLOW_UNINDEX, "flow_unindex.lua", [], alone);
script!(
    BROWSE,
    "browse.lua",
    [
        pending, lease, dead, suspended, ended, error, dead_info, fair
    ]
);

#[cfg(test)]
mod tests;
