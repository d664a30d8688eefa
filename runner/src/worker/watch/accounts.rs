//! Usage of jobs a producer tagged with an account: each attempt's figures
//! summed here per hour and account, and added to Redis with every
//! heartbeat (every 2 s) and at a graceful stop. A runner killed with
//! SIGKILL loses at most its last 2 s of sums; a flush that fails is kept
//! and tried again with the next heartbeat.

use std::sync::Mutex;

use super::{Attempt, Ending, Watcher};
use crate::redis::{AccountUsage, HourlyUsage, Queue, Usage, hour_of};
use crate::wasm::Finish;

/// Sums not yet in Redis.
#[derive(Debug, Default)]
pub(crate) struct Accounts(Mutex<HourlyUsage>);

impl Accounts {
    /// An attempt of a job tagged `account` that ended at `at_ms` used `usage`.
    pub fn add(&self, account: &str, at_ms: u64, usage: &Usage) {
        let mut sums = self.0.lock().expect("accounts lock");
        sums.entry((hour_of(at_ms), account.to_owned()))
            .or_default()
            .add(&AccountUsage {
                attempts: 1,
                cpu_us: usage.cpu_us,
                wall_us: usage.wall_us,
                bytes_out: usage.bytes_out,
                bytes_in: usage.bytes_in,
            });
    }

    /// Add what has been summed to Redis; on failure keep it for next time.
    pub async fn flush(&self, queue: &Queue) {
        let sums = std::mem::take(&mut *self.0.lock().expect("accounts lock"));
        if sums.is_empty() {
            return;
        }
        if let Err(e) = queue.runners().add_usage(&sums).await {
            tracing::debug!("account usage not written yet: {e}");
            let mut kept = self.0.lock().expect("accounts lock");
            for (key, usage) in sums {
                kept.entry(key).or_default().add(&usage);
            }
        }
    }
}

/// Each attempt of a tagged job that ran (or tried to) counts, at its end.
impl Watcher for Accounts {
    fn ended(&self, a: &Attempt<'_>, e: &Ending<'_>) {
        if let Some(account) = a.account
            && !matches!(e.finish, Finish::NotStarted(_))
        {
            self.add(account, e.at_ms, e.usage);
        }
    }
}
