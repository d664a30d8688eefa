//! The [`Loader`]: which version of every handler file is loaded, and
//! bringing them (and the configuration) up to date on a rescan.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::{Notice, Reload, Snapshot, Versions};
use crate::config::Config;
use crate::wasm::{LoadError, LoadedHandler, Runtime, content_hash};

/// Identifies a file version cheaply, before reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    meta.is_file().then(|| Stamp {
        len: meta.len(),
        modified: meta.modified().ok(),
    })
}

/// One handler file as last seen.
struct Known {
    /// The file on disk.
    stamp: Stamp,
    hash: String,
    /// The version serving: the file on disk, or (if that was rejected) the
    /// last one that loaded; `None` if none ever did.
    handler: Option<LoadedHandler>,
    /// Why the file on disk was rejected, if it was.
    rejected: Option<String>,
}

/// What a look at one handler file found.
enum Refresh {
    /// The file on disk serves.
    Serving,
    /// The file is not there.
    Missing,
    /// The file cannot serve; `serving` is the older version still in use.
    Rejected {
        error: String,
        /// Not reported before.
        fresh: bool,
        serving: Option<LoadedHandler>,
    },
}

/// Loads handler files and keeps track of what is loaded.
pub struct Loader {
    runtime: Arc<Runtime>,
    /// Every version that loads is kept here too.
    versions: Arc<Versions>,
    files: HashMap<PathBuf, Known>,
    /// The configuration file's stamp when last read.
    config_stamp: Option<Stamp>,
    /// Handler paths found missing at the last rescan (warned about once).
    missing: BTreeSet<PathBuf>,
    /// `.wasm` files no topic uses, as last seen (said once).
    unused: BTreeSet<PathBuf>,
    /// What happened since the last rescan returned.
    notices: Vec<Notice>,
}

impl Loader {
    /// A loader compiling with `runtime`, keeping what loads in `versions`.
    pub fn new(runtime: Arc<Runtime>, versions: Arc<Versions>) -> Loader {
        Loader {
            runtime,
            versions,
            files: HashMap::new(),
            config_stamp: None,
            missing: BTreeSet::new(),
            unused: BTreeSet::new(),
            notices: Vec::new(),
        }
    }

    /// Load every handler `config` names; any that cannot load is an error.
    pub async fn initial(&mut self, config: Config) -> anyhow::Result<Snapshot> {
        self.config_stamp = stamp(&config.path);
        let started = std::time::Instant::now();
        let before = self.runtime.cache_stats();
        for topic in &config.topics {
            match self.refresh_file(&topic.handler).await {
                Refresh::Serving => {}
                Refresh::Missing => anyhow::bail!(
                    "the handler of topic {:?}, {}, does not exist",
                    topic.name,
                    topic.handler.display()
                ),
                Refresh::Rejected { error, .. } => {
                    anyhow::bail!("loading the handler of topic {:?}: {error}", topic.name)
                }
            }
        }
        for topic in &config.topics {
            if let Some(Some(handler)) = self.files.get(&topic.handler).map(|k| &k.handler)
                && let Err(why) = handler
                    .fits_memory(topic.memory)
                    .and_then(|()| handler.fits_batches(topic.batch.is_some()))
            {
                anyhow::bail!("topic {:?}: {why}", topic.name);
            }
        }
        let cached = match (before, self.runtime.cache_stats()) {
            (Some((h0, _)), Some((h1, _))) => format!(", {} from the compile cache", h1 - h0),
            _ => String::new(),
        };
        tracing::info!(
            handlers = self.files.len(),
            "handlers loaded in {} ms{cached}",
            started.elapsed().as_millis()
        );
        let used = config.topics.iter().map(|t| t.handler.clone()).collect();
        self.note_unused(&config, &used);
        self.notices.clear();
        Ok(self.snapshot(Arc::new(config)))
    }

    /// Rescan: re-read the configuration if its file changed, bring every
    /// handler up to date. `None` when nothing happened.
    pub async fn rescan(&mut self, current: &Snapshot) -> Option<Reload> {
        let mut config = current.config.clone();
        let path = current.config.path.clone();
        let now = stamp(&path);
        if now != self.config_stamp {
            self.config_stamp = now;
            if let Some(new) = self.reload_config(&current.config).await {
                config = new;
            }
        }
        let paths: BTreeSet<PathBuf> = config.topics.iter().map(|t| t.handler.clone()).collect();
        for path in &paths {
            let refresh = self.refresh_file(path).await;
            if matches!(refresh, Refresh::Missing) {
                if self.missing.insert(path.clone()) {
                    self.files.remove(path);
                    self.notices.push(Notice::Missing { path: path.clone() });
                    tracing::warn!(
                        handler = %path.display(),
                        topics = %topics_of(&config, path),
                        "handler file is gone: its topics stop claiming (their jobs stay in Redis) until it returns"
                    );
                }
                continue;
            }
            if self.missing.remove(path) {
                tracing::info!(handler = %path.display(), "handler file is back");
            }
            if let Refresh::Rejected {
                error,
                fresh: true,
                serving,
            } = refresh
            {
                let topics = topics_of(&config, path);
                self.notices.push(Notice::Rejected {
                    path: path.clone(),
                    error: error.clone(),
                });
                // one line; the detail (wasmtime's can span lines) in a field
                let detail = error.split_whitespace().collect::<Vec<_>>().join(" ");
                let hint = if error.contains("is not a valid WebAssembly component") {
                    " (if it was being written in place: write a temporary file and rename it over the old one)"
                } else {
                    ""
                };
                match serving {
                    Some(old) => tracing::error!(
                        handler = %path.display(),
                        %topics,
                        error = %detail,
                        "handler file rejected; version {} keeps serving{hint}",
                        old.hash()
                    ),
                    None => tracing::error!(
                        handler = %path.display(),
                        %topics,
                        error = %detail,
                        "handler file rejected; its topics claim nothing{hint}"
                    ),
                }
            }
        }
        self.files.retain(|path, _| paths.contains(path));
        self.note_unused(&config, &paths);
        let next = self.snapshot(config);
        let changed = !Arc::ptr_eq(&next.config, &current.config)
            || next.handlers.len() != current.handlers.len()
            || next.handlers.iter().any(|(topic, h)| {
                current
                    .handlers
                    .get(topic)
                    .is_none_or(|old| old.hash() != h.hash())
            });
        let notices = std::mem::take(&mut self.notices);
        (changed || !notices.is_empty()).then(|| Reload {
            snapshot: changed.then_some(next),
            notices,
        })
    }

    /// Read and validate the changed configuration; `None` (logged) if it is
    /// rejected and the running one stays.
    async fn reload_config(&mut self, running: &Config) -> Option<Arc<Config>> {
        let path = running.path.clone();
        let parsed = tokio::task::spawn_blocking(move || Config::load(&path)).await;
        let mut new = match parsed {
            Ok(Ok(config)) => config,
            Ok(Err(e)) => {
                tracing::error!("{e}; rejected, the running configuration stays");
                self.notices.push(Notice::ConfigRejected {
                    error: e.to_string(),
                });
                return None;
            }
            Err(e) => {
                tracing::error!("reading the configuration failed: {e}");
                return None;
            }
        };
        // a topic the new file adds (or points at another file) must load now
        for topic in &new.topics {
            let same = running
                .topic(&topic.name)
                .is_some_and(|old| old.handler == topic.handler);
            if same {
                continue;
            }
            let why = match self.refresh_file(&topic.handler).await {
                Refresh::Serving => continue,
                Refresh::Missing => format!("{} does not exist", topic.handler.display()),
                Refresh::Rejected { error, .. } => error,
            };
            let error = format!("{}: topic {:?}: {why}", new.path.display(), topic.name);
            tracing::error!("{error}; rejected, the running configuration stays");
            self.notices.push(Notice::ConfigRejected { error });
            return None;
        }
        let restart = running.keep_restart_only(&mut new);
        if !restart.is_empty() {
            tracing::warn!(
                "{}: {} changed; that takes effect at the next restart (the running values stay)",
                new.path.display(),
                restart.join(", ")
            );
        }
        tracing::info!(
            "{}: reloaded ({})",
            new.path.display(),
            describe_changes(running, &new)
        );
        self.notices.push(Notice::ConfigApplied);
        Some(Arc::new(new))
    }

    /// Make sure the newest version of `path` is loaded if it can be.
    async fn refresh_file(&mut self, path: &Path) -> Refresh {
        let Some(now) = stamp(path) else {
            return Refresh::Missing;
        };
        if let Some(known) = self.files.get(path)
            && now == known.stamp
        {
            return match (&known.handler, &known.rejected) {
                (_, Some(error)) => Refresh::Rejected {
                    error: error.clone(),
                    fresh: false,
                    serving: known.handler.clone(),
                },
                (Some(_), None) => Refresh::Serving,
                (None, None) => unreachable!("a known file either loaded or was rejected"),
            };
        }
        let shown = path.display().to_string();
        let bytes = match tokio::fs::read(path).await {
            Ok(bytes) => bytes,
            Err(_) if stamp(path).is_none() => return Refresh::Missing,
            Err(e) => {
                return Refresh::Rejected {
                    error: format!("cannot read {shown}: {e}"),
                    fresh: true,
                    serving: self.files.get(path).and_then(|k| k.handler.clone()),
                };
            }
        };
        let hash = content_hash(&bytes);
        let previous = self.files.get(path).and_then(|k| k.handler.clone());
        if let Some(known) = self.files.get_mut(path)
            && known.hash == hash
        {
            known.stamp = now;
            if known.handler.is_some() && known.rejected.is_none() {
                return Refresh::Serving;
            }
        }
        let runtime = self.runtime.clone();
        let versions = self.versions.clone();
        let compiled = tokio::task::spawn_blocking(move || {
            let handler = runtime.load_bytes(&shown, &bytes)?;
            versions.store(&handler, &bytes);
            Ok(handler)
        })
        .await
        .unwrap_or_else(|e| Err(LoadError::Engine(format!("compiling panicked: {e}"))));
        let (handler, rejected) = match compiled {
            Ok(handler) => {
                match &previous {
                    Some(old) if old.hash() != handler.hash() => tracing::info!(
                        handler = %path.display(),
                        "version {} replaces {} in the file; running jobs finish on the old one (a topic with `rollout` starts it as a canary)",
                        handler.hash(),
                        old.hash()
                    ),
                    Some(_) => {}
                    None => {
                        tracing::info!(handler = %path.display(), "version {} loaded", handler.hash())
                    }
                }
                self.notices.push(Notice::Loaded {
                    path: path.to_owned(),
                    hash: handler.hash().to_owned(),
                });
                (Some(handler), None)
            }
            // the version that served before keeps serving
            Err(e) => (previous, Some(e.to_string())),
        };
        self.files.insert(
            path.to_owned(),
            Known {
                stamp: now,
                hash,
                handler: handler.clone(),
                rejected: rejected.clone(),
            },
        );
        match (handler, rejected) {
            (serving, Some(error)) => Refresh::Rejected {
                error,
                fresh: true,
                serving,
            },
            (Some(_), None) => Refresh::Serving,
            (None, None) => unreachable!("compiling either succeeds or fails"),
        }
    }

    /// Say once of each `.wasm` file in the handlers folder that no topic uses it.
    fn note_unused(&mut self, config: &Config, used: &BTreeSet<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(&config.runner.handlers_dir) else {
            return;
        };
        let present: BTreeSet<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "wasm") && !used.contains(p))
            .collect();
        for path in present.difference(&self.unused) {
            tracing::info!(handler = %path.display(), "no topic in {} uses this file: ignored", config.path.display());
        }
        self.unused = present;
    }

    fn snapshot(&self, config: Arc<Config>) -> Snapshot {
        let now = crate::clock::now_ms();
        let handlers = config
            .topics
            .iter()
            .filter(|t| !self.missing.contains(&t.handler))
            .filter_map(|t| {
                let h = self.files.get(&t.handler)?.handler.clone()?;
                self.versions.serves(&t.name, h.hash(), now);
                Some((t.name.clone(), h))
            })
            .collect();
        Snapshot { config, handlers }
    }
}

fn topics_of(config: &Config, path: &Path) -> String {
    config
        .topics
        .iter()
        .filter(|t| t.handler == path)
        .map(|t| t.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// "added a, b; removed c; changed d" for the log.
fn describe_changes(old: &Config, new: &Config) -> String {
    let names = |c: &Config| {
        c.topics
            .iter()
            .map(|t| t.name.clone())
            .collect::<BTreeSet<_>>()
    };
    let (before, after) = (names(old), names(new));
    let list = |v: Vec<&String>| v.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
    let mut parts = Vec::new();
    let added: Vec<_> = after.difference(&before).collect();
    let removed: Vec<_> = before.difference(&after).collect();
    let changed: Vec<_> = after
        .intersection(&before)
        .filter(|n| old.topic(n) != new.topic(n))
        .collect();
    if !added.is_empty() {
        parts.push(format!("added {}", list(added)));
    }
    if !removed.is_empty() {
        parts.push(format!(
            "removed {} (their jobs stay in Redis)",
            list(removed)
        ));
    }
    if !changed.is_empty() {
        parts.push(format!("changed {}", list(changed)));
    }
    if parts.is_empty() {
        "no topic changed".into()
    } else {
        parts.join("; ")
    }
}
