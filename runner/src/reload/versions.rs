//! Kept handler versions: every topic's newest `keep_versions` components,
//! stored by content hash in a folder private to the runner (never in
//! `handlers_dir`), so a version stays loadable after its file was replaced:
//! the stable version while a canary is rolled out, a pinned version, a job
//! pinned to one, dead letters replayed on one. Kept across restarts.
//!
//! Layout: `<dir>/<version>.wasm` (the component as it was loaded) and
//! `<dir>/topics/<topic>.json` (that topic's kept versions, newest first,
//! with when each was first seen). A version file is deleted when no topic
//! keeps it any more (the rollout task prunes what the topic's catalogue in
//! Redis no longer keeps: [`Versions::prune`]). Handlers compiled from here
//! are remembered in memory while something routes to them
//! ([`Versions::retain`]).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::wasm::{LoadedHandler, Runtime};

/// One kept version of a topic.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Kept {
    /// The content hash.
    pub version: String,
    /// When this runner (or one before it on this folder) first loaded it (ms).
    pub first_seen_ms: u64,
}

/// The kept versions of every topic, and the handlers loaded from them.
pub struct Versions {
    /// `None` when the folder cannot be used: versions are then kept in
    /// memory only, for as long as this process runs.
    dir: Option<PathBuf>,
    keep: usize,
    runtime: Arc<Runtime>,
    state: Mutex<State>,
    /// One compile at a time: attempts asking for the same version at once
    /// (a replay of many dead letters) wait for the first one's.
    loading: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    /// Topic → its kept versions, newest first.
    topics: HashMap<String, Vec<Kept>>,
    /// Version → its compiled handler and when it was last asked for, while loaded.
    loaded: HashMap<String, (LoadedHandler, Instant)>,
    /// Version → its bytes, when there is no folder to keep them in.
    bytes: HashMap<String, Arc<[u8]>>,
}

impl Versions {
    /// Keep `keep` versions per topic in `dir` (created private); a folder
    /// that cannot be used is logged and versions are kept in memory.
    pub fn open(dir: &Path, keep: u32, runtime: Arc<Runtime>) -> Versions {
        let dir = match crate::private_dir::ensure(dir).and_then(|d| {
            let topics = d.join("topics");
            crate::private_dir::ensure(&topics).map(|_| d)
        }) {
            Ok(dir) => Some(dir),
            Err(e) => {
                tracing::warn!(
                    "kept handler versions: {e}; keeping them in memory only (lost at restart)"
                );
                None
            }
        };
        let mut state = State::default();
        if let Some(dir) = &dir
            && let Ok(entries) = std::fs::read_dir(dir.join("topics"))
        {
            for entry in entries.flatten() {
                let path = entry.path();
                let Some(topic) = path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .filter(|_| path.extension().is_some_and(|x| x == "json"))
                else {
                    continue;
                };
                match std::fs::read(&path)
                    .map_err(|e| e.to_string())
                    .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
                {
                    Ok(kept) => {
                        state.topics.insert(topic.to_owned(), kept);
                    }
                    Err(e) => {
                        tracing::warn!(file = %path.display(), "ignoring a kept-versions list that cannot be read: {e}")
                    }
                }
            }
        }
        Versions {
            dir,
            keep: keep.max(1) as usize,
            runtime,
            state: Mutex::new(state),
            loading: tokio::sync::Mutex::new(()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("versions lock")
    }

    /// Keep the component `bytes` that `handler` was compiled from, and the
    /// handler while something uses it. Blocking (writes the component once):
    /// call it off the executor.
    pub fn store(&self, handler: &LoadedHandler, bytes: &[u8]) {
        let version = handler.hash().to_owned();
        let mut state = self.state();
        state
            .loaded
            .insert(version.clone(), (handler.clone(), Instant::now()));
        match &self.dir {
            Some(dir) => {
                let file = dir.join(format!("{version}.wasm"));
                if !file.is_file()
                    && let Err(e) = write_then_rename(&file, bytes)
                {
                    tracing::warn!(file = %file.display(), "cannot keep handler version {version}: {e}");
                }
            }
            None => {
                state.bytes.insert(version, bytes.into());
            }
        }
    }

    /// `version` (stored before) is what `topic`'s handler file holds now:
    /// the newest of the topic's kept versions. The oldest beyond
    /// `keep_versions` go at the next [`Versions::prune`], which knows which
    /// of them jobs still need.
    pub fn serves(&self, topic: &str, version: &str, now_ms: u64) {
        let mut state = self.state();
        let list = state.topics.entry(topic.to_owned()).or_default();
        if list.first().is_some_and(|k| k.version == version) {
            return;
        }
        let first_seen_ms = list
            .iter()
            .find(|k| k.version == version)
            .map_or(now_ms, |k| k.first_seen_ms);
        list.retain(|k| k.version != version);
        list.insert(
            0,
            Kept {
                version: version.to_owned(),
                first_seen_ms,
            },
        );
        let list = list.clone();
        self.save_list(topic, &list);
    }

    /// Keep of `topic`'s versions the newest `keep_versions` and those its
    /// catalogue in Redis keeps (`catalogue`: a version that serves in a
    /// role, or that live jobs' journals pin them to); forget the rest, and
    /// the files no topic keeps any more.
    pub fn prune(&self, topic: &str, catalogue: &[String]) {
        let mut state = self.state();
        let Some(list) = state.topics.get_mut(topic) else {
            return;
        };
        let before = list.len();
        let mut n = 0;
        list.retain(|k| {
            n += 1;
            n <= self.keep || catalogue.contains(&k.version)
        });
        if list.len() == before {
            return;
        }
        let list = list.clone();
        self.save_list(topic, &list);
        self.forget_unkept(&mut state);
    }

    /// The versions `topic` keeps, newest first.
    pub fn kept(&self, topic: &str) -> Vec<Kept> {
        self.state().topics.get(topic).cloned().unwrap_or_default()
    }

    /// Whether `version` is kept for any topic.
    pub fn is_kept(&self, version: &str) -> bool {
        let state = self.state();
        state
            .topics
            .values()
            .any(|l| l.iter().any(|k| k.version == version))
    }

    /// The handler of `version`, compiling it from the kept file if it is
    /// not loaded; why not, if it is not kept. Compiles off the executor.
    pub async fn load(self: &Arc<Self>, version: &str) -> Result<LoadedHandler, String> {
        let memo = |this: &Versions| {
            let mut state = this.state();
            let (h, used) = state.loaded.get_mut(version)?;
            *used = Instant::now();
            Some(h.clone())
        };
        if let Some(h) = memo(self) {
            return Ok(h);
        }
        let _one = self.loading.lock().await;
        if let Some(h) = memo(self) {
            return Ok(h);
        }
        let this = self.clone();
        let version = version.to_owned();
        tokio::task::spawn_blocking(move || this.load_blocking(&version))
            .await
            .unwrap_or_else(|e| Err(format!("compiling panicked: {e}")))
    }

    fn load_blocking(&self, version: &str) -> Result<LoadedHandler, String> {
        if !self.is_kept(version) {
            return Err(format!("version {version} is not kept by this runner"));
        }
        let bytes: Arc<[u8]> = match &self.dir {
            Some(dir) => {
                let file = dir.join(format!("{version}.wasm"));
                std::fs::read(&file)
                    .map_err(|e| format!("kept version {version} cannot be read: {e}"))?
                    .into()
            }
            None => self
                .state()
                .bytes
                .get(version)
                .cloned()
                .ok_or_else(|| format!("version {version} is not kept by this runner"))?,
        };
        let handler = self
            .runtime
            .load_bytes(&format!("kept version {version}"), &bytes)
            .map_err(|e| e.to_string())?;
        if handler.hash() != version {
            return Err(format!(
                "kept version {version} was changed on disk (its content is {} now)",
                handler.hash()
            ));
        }
        self.state()
            .loaded
            .insert(version.to_owned(), (handler.clone(), Instant::now()));
        Ok(handler)
    }

    /// Keep in memory the handlers of `versions` (what routes use now) and
    /// those asked for in the last minute (jobs pinned to a version, a
    /// replay): the others are compiled again from their files (the compile
    /// cache makes that quick) when next asked for.
    pub fn retain(&self, versions: &HashSet<&str>) {
        self.state().loaded.retain(|v, (_, used)| {
            versions.contains(v.as_str()) || used.elapsed() < Duration::from_secs(60)
        });
    }

    /// Delete the files (or bytes) of versions no topic keeps.
    fn forget_unkept(&self, state: &mut State) {
        let kept: HashSet<String> = state
            .topics
            .values()
            .flatten()
            .map(|k| k.version.clone())
            .collect();
        state.bytes.retain(|v, _| kept.contains(v));
        let Some(dir) = &self.dir else {
            return;
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let stale = path.extension().is_some_and(|x| x == "wasm")
                && path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .is_some_and(|v| !kept.contains(v));
            if stale {
                let _ = std::fs::remove_file(&path);
            }
        }
    }

    fn save_list(&self, topic: &str, list: &[Kept]) {
        let Some(dir) = &self.dir else {
            return;
        };
        let file = dir.join("topics").join(format!("{topic}.json"));
        let json = serde_json::to_vec_pretty(list).expect("kept versions serialize");
        if let Err(e) = write_then_rename(&file, &json) {
            tracing::warn!(file = %file.display(), "cannot save the kept versions of topic {topic:?}: {e}");
        }
    }
}

/// Write `bytes` to a temporary file beside `path`, then rename it over `path`.
fn write_then_rename(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
