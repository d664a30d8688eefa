//! A scratch project (a `handlers/` folder and a `queues.toml` in a temp
//! directory), and what it deploys.

use hourglass::Config;
use hourglass::redis::{Endpoint, Queue, Servers};
use std::path::{Path, PathBuf};

use test_support::RedisServer;

/// A project folder: queues.toml plus the handler components it names.
pub struct Project {
    pub dir: tempfile::TempDir,
    /// The server it owns, if it started one.
    _redis: Option<RedisServer>,
    /// The URL queues.toml names (or the cluster's seeds).
    pub endpoint: Endpoint,
    /// More lines for `[redis]` (TLS files).
    redis_lines: String,
}

impl Project {
    /// `topics` is the `[[topic]]` part (and any `[defaults]`); `[redis]` and
    /// `[runner]` are filled in, `runner` adds lines to `[runner]`.
    pub fn new(runner: &str, topics: &str) -> Project {
        let redis = RedisServer::start();
        let url = redis.url();
        Project::build(Some(redis), url, String::new(), runner, topics)
    }

    /// A project using a server the test owns (to stop and restart it).
    pub fn with_redis(url: String, runner: &str, topics: &str) -> Project {
        Project::build(None, url, String::new(), runner, topics)
    }

    /// A project whose `[redis]` has `url` (as written, `${VAR}` and all) and `lines`.
    pub fn with_redis_lines(url: &str, lines: &str, runner: &str, topics: &str) -> Project {
        Project::build(None, url.to_owned(), lines.to_owned(), runner, topics)
    }

    /// A project on a Redis Cluster with these seed nodes.
    pub fn on_cluster(urls: Vec<String>, runner: &str, topics: &str) -> Project {
        Project::on_cluster_lines(urls, "", runner, topics)
    }

    /// A project on a Redis Cluster with more `[redis]` lines.
    pub fn on_cluster_lines(urls: Vec<String>, lines: &str, runner: &str, topics: &str) -> Project {
        let endpoint = Endpoint::cluster(urls);
        Project::assemble(None, endpoint, lines.to_owned(), runner, topics)
    }

    /// A project on the primary these sentinels name (`mymaster`), with
    /// the primary's password if it has one and more `[redis]` lines.
    pub fn on_sentinel(
        nodes: Vec<String>,
        password: Option<&str>,
        lines: &str,
        runner: &str,
        topics: &str,
    ) -> Project {
        let endpoint = Endpoint::sentinel(hourglass::redis::Sentinel {
            master: test_support::sentinel::MASTER.into(),
            nodes,
            username: None,
            password: password.map(str::to_owned),
            db: 0,
        });
        Project::assemble(None, endpoint, lines.to_owned(), runner, topics)
    }

    fn build(
        redis: Option<RedisServer>,
        url: String,
        redis_lines: String,
        runner: &str,
        topics: &str,
    ) -> Project {
        Project::assemble(redis, Endpoint::url(&url), redis_lines, runner, topics)
    }

    fn assemble(
        redis: Option<RedisServer>,
        endpoint: Endpoint,
        redis_lines: String,
        runner: &str,
        topics: &str,
    ) -> Project {
        let dir = tempfile::tempdir().unwrap();
        let handlers = dir.path().join("handlers");
        std::fs::create_dir_all(&handlers).unwrap();
        for (name, path) in test_support::components::ALL {
            std::fs::copy(path, handlers.join(format!("{name}.wasm"))).unwrap();
        }
        let project = Project {
            dir,
            _redis: redis,
            endpoint,
            redis_lines,
        };
        project.write_config(runner, topics);
        project
    }

    /// Replace queues.toml (as a deploy would: a temporary file renamed over it).
    pub fn write_config(&self, runner: &str, topics: &str) {
        let target = match &self.endpoint.servers {
            Servers::Cluster(urls) => format!("cluster = {urls:?}"),
            Servers::One(url) => format!("url = {url:?}"),
            Servers::Sentinel(s) => format!(
                "sentinel = {{ master = {:?}, nodes = {:?}{} }}",
                s.master,
                s.nodes,
                s.password
                    .as_ref()
                    .map(|p| format!(", password = {p:?}"))
                    .unwrap_or_default()
            ),
        };
        // one compile cache for the run's projects unless the test names its
        // own, on the line that was blank (the topics' line numbers stay)
        let cache = if runner.contains("compile_cache") {
            String::new()
        } else {
            format!("compile_cache = {:?}", shared_compile_cache())
        };
        let text = format!(
            "[redis]\n{target}\nnamespace = \"test\"\n{}\n[runner]\nhandlers_dir = \"handlers\"\n{runner}\n{cache}\n{topics}\n",
            self.redis_lines
        );
        deploy(&self.config_path(), text.as_bytes());
    }

    /// A handler file in the project's handlers folder.
    pub fn handler(&self, name: &str) -> PathBuf {
        self.dir.path().join("handlers").join(name)
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("queues.toml")
    }

    pub fn config(&self) -> Config {
        Config::load(&self.config_path()).expect("test config is valid")
    }

    pub async fn queue(&self) -> Queue {
        Queue::open(&self.endpoint, "test").await.unwrap()
    }
}

/// Write `bytes` to `path` the safe way: a temporary file renamed over it.
/// The compile cache the projects of one build of the tests share, so a
/// component is compiled once per run rather than once per runner start (a
/// Python component takes cranelift tens of seconds in a debug build). Keyed
/// by the test binary's build time: a rebuilt (perhaps re-patched) wasmtime
/// never reads an older build's code; older builds' folders are removed.
/// The tests of the cache itself name their own folder.
pub fn shared_compile_cache() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        let built = std::fs::metadata(&exe)
            .and_then(|m| m.modified())
            .expect("the test binary's build time");
        let stamp = built
            .duration_since(std::time::UNIX_EPOCH)
            .expect("a build time after 1970")
            .as_nanos()
            .to_string();
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("compile-cache");
        for old in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            if old.file_name().to_str() != Some(stamp.as_str()) {
                let _ = std::fs::remove_dir_all(old.path());
            }
        }
        root.join(stamp)
    })
}

pub fn deploy(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp-deploy");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// `bytes` (a component) with a custom section appended: the same handler
/// under another content hash, as a rebuild with a change would be.
pub fn variant(bytes: &[u8], tag: &str) -> Vec<u8> {
    let name = b"hourglass-test";
    let body: Vec<u8> = [&[name.len() as u8][..], name, tag.as_bytes()].concat();
    assert!(body.len() < 128, "one-byte section size");
    [bytes, &[0, body.len() as u8], &body].concat()
}

/// The content hash the runner reports for a component file.
pub fn hash_of(path: &str) -> String {
    hourglass::wasm::content_hash(&std::fs::read(path).unwrap())
}
