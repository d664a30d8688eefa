//! The settings a live reload cannot change (the connection, the instance
//! pool, the watched folders, the caches): listed once, each with how to
//! tell two configurations apart in it and how to keep the running value.

use super::Config;

impl Config {
    /// The settings that differ in `new` but only take effect at a restart
    /// (the connection, the instance pool, the watched folder, the cache).
    pub fn restart_needed(&self, new: &Config) -> Vec<&'static str> {
        RESTART_ONLY
            .iter()
            .filter(|(_, differs, _)| differs(self, new))
            .map(|(name, _, _)| *name)
            .collect()
    }

    /// Keep this (running) configuration's restart-only settings in `new`, the
    /// configuration a reload applies; the names of those that differed.
    pub fn keep_restart_only(&self, new: &mut Config) -> Vec<&'static str> {
        let mut kept = Vec::new();
        for (name, differs, keep) in RESTART_ONLY {
            if differs(self, new) {
                keep(new, self);
                kept.push(*name);
            }
        }
        kept
    }
}

/// A setting a reload cannot change: its name, whether two configurations
/// differ in it, and how to copy the running value into a new configuration.
type RestartOnly = (
    &'static str,
    fn(&Config, &Config) -> bool,
    fn(&mut Config, &Config),
);

/// Every restart-only setting, listed once.
const RESTART_ONLY: &[RestartOnly] = &[
    (
        "[http] listen",
        |a, b| a.http.as_ref().map(|h| h.listen) != b.http.as_ref().map(|h| h.listen),
        |new, old| match (&mut new.http, &old.http) {
            (Some(n), Some(o)) => n.listen = o.listen,
            // served or not is decided at start: keep the running choice
            (n, o) => *n = o.clone(),
        },
    ),
    (
        "[redis]",
        |a, b| a.redis != b.redis,
        |new, old| new.redis = old.redis.clone(),
    ),
    (
        "[runner] concurrency",
        |a, b| a.runner.concurrency != b.runner.concurrency,
        |new, old| new.runner.concurrency = old.runner.concurrency,
    ),
    (
        "[runner] handlers_dir",
        |a, b| a.runner.handlers_dir != b.runner.handlers_dir,
        |new, old| new.runner.handlers_dir = old.runner.handlers_dir.clone(),
    ),
    (
        "[runner] compile_cache",
        |a, b| a.runner.compile_cache != b.runner.compile_cache,
        |new, old| new.runner.compile_cache = old.runner.compile_cache.clone(),
    ),
    (
        "[runner] max_payload",
        |a, b| a.runner.max_payload != b.runner.max_payload,
        |new, old| new.runner.max_payload = old.runner.max_payload,
    ),
    (
        "[runner] keep_versions",
        |a, b| a.runner.keep_versions != b.runner.keep_versions,
        |new, old| new.runner.keep_versions = old.runner.keep_versions,
    ),
    (
        "[runner] versions_dir",
        |a, b| a.runner.versions_dir != b.runner.versions_dir,
        |new, old| new.runner.versions_dir = old.runner.versions_dir.clone(),
    ),
];
