//! The Lua scripts, loaded once. Each state change of a job is one script;
//! each script has exactly one wrapper in [`super::Queue`].

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($name:ident, $file:literal) => {
        pub(super) static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../lua/prelude.lua"),
                include_str!(concat!("../lua/", $file))
            ))
        });
    };
}

script!(ENQUEUE, "enqueue.lua");
script!(CLAIM, "claim.lua");
script!(ACK, "ack.lua");
script!(RETRY, "retry.lua");
script!(BURY, "bury.lua");
script!(REQUEUE, "requeue.lua");
script!(RELEASE, "release.lua");
script!(OUTBOX_TAKE, "outbox_take.lua");
script!(OUTBOX_CLEAR, "outbox_clear.lua");
script!(CANCEL, "cancel.lua");
script!(DEAD_RETRY, "dead_retry.lua");
script!(DEAD_PURGE, "dead_purge.lua");
script!(PAUSE, "pause.lua");
script!(HEARTBEAT, "heartbeat.lua");
script!(SCHEDULE_ADVANCE, "schedule_advance.lua");
script!(ROLLOUT_SYNC, "rollout_sync.lua");
script!(ROLLOUT_SET, "rollout_set.lua");
script!(PROGRESS, "progress.lua");
script!(PEEK, "peek.lua");
script!(COUNTS, "counts.lua");
script!(MIGRATE, "migrate.lua");
