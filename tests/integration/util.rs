//! Shared test helpers. A missing redis-server is a failure, never a skip.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::events::{Event, EventKind};
use hourglass::redis::{Endpoint, Enqueued, NewJob, Queue, Servers};
use hourglass::{Config, Notice, Runner};
use tokio::sync::{broadcast, oneshot};

pub use test_support::RedisServer;

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

/// A runner serving in the background until [`Running::stop`] or drop.
pub struct Running {
    pub events: broadcast::Receiver<Event>,
    pub notices: broadcast::Receiver<Notice>,
    /// The handlers' outbound HTTP requests per (topic, status).
    pub outbound: std::sync::Arc<hourglass::wasm::OutboundCounts>,
    /// Handler instances alive.
    pub instances: hourglass::wasm::InUse,
    /// Where the API, dashboard and metrics answer, if queues.toml has `[http]`
    /// (`listen = "127.0.0.1:0"` takes a free port).
    pub http: Option<std::net::SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    _http_stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Running {
    pub async fn start(config: Config) -> Running {
        init_logs();
        let config_http = config.http.as_ref().map(|h| h.listen);
        let runner = Runner::start(config).await.expect("runner starts");
        let events = runner.subscribe();
        let notices = runner.subscribe_reloads();
        let outbound = runner.outbound_counts();
        let instances = runner.instances_in_use();
        let (stop, stopped) = oneshot::channel::<()>();
        // the server stops when its sender drops (with the Running)
        let (http, http_stop) = match config_http {
            Some(addr) => {
                let listener = hourglass::http::bind(addr).await.unwrap();
                let addr = listener.local_addr().unwrap();
                let (stop, stopped) = oneshot::channel::<()>();
                tokio::spawn(hourglass::http::serve(listener, runner.ops(), async {
                    let _ = stopped.await;
                }));
                (Some(addr), Some(stop))
            }
            None => (None, None),
        };
        let task = tokio::spawn(runner.run(async {
            let _ = stopped.await;
        }));
        Running {
            events,
            notices,
            outbound,
            instances,
            http,
            _http_stop: http_stop,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Shut down gracefully and wait for it.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap().unwrap();
    }

    /// Collect events until `done` says the collection is complete.
    pub async fn until(
        &mut self,
        within: Duration,
        mut done: impl FnMut(&[Event]) -> bool,
    ) -> Vec<Event> {
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + within;
        while !done(&seen) {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Ok(event)) => seen.push(event),
                Ok(Err(broadcast::error::RecvError::Lagged(n))) => {
                    panic!("test fell {n} events behind")
                }
                Ok(Err(e)) => panic!("event stream ended: {e}"),
                Err(_) => panic!("timed out after {within:?}; events so far: {seen:#?}"),
            }
        }
        seen
    }

    /// Wait for the first reload notice that `wanted` accepts; the runner
    /// serves what it reports by then.
    pub async fn notice(&mut self, within: Duration, wanted: impl Fn(&Notice) -> bool) -> Notice {
        let deadline = tokio::time::Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            match tokio::time::timeout_at(deadline, self.notices.recv()).await {
                Ok(Ok(n)) if wanted(&n) => return n,
                Ok(Ok(n)) => seen.push(n),
                Ok(Err(e)) => panic!("notice stream: {e}"),
                Err(_) => panic!("no such notice within {within:?}; saw {seen:#?}"),
            }
        }
    }

    /// Wait until each (topic, id) of `jobs` has acked or been dead-lettered.
    pub async fn until_all_settled(
        &mut self,
        jobs: &[(&str, &str)],
        within: Duration,
    ) -> Vec<Event> {
        self.until(within, |seen| {
            jobs.iter().all(|(t, id)| {
                seen.iter()
                    .any(|e| e.topic == *t && e.id == *id && is_final(&e.kind))
            })
        })
        .await
    }

    /// Wait until `topics` have nothing scheduled, ready or running in Redis,
    /// then take every event sent until then: with these, a late duplicate
    /// run cannot be missed.
    pub async fn after_drained(
        &mut self,
        queue: &Queue,
        topics: &[&str],
        within: Duration,
    ) -> Vec<Event> {
        let deadline = tokio::time::Instant::now() + within;
        for topic in topics {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            eventually(left, &format!("{topic} drained"), || async {
                match queue.stats(&queue.keys(topic), now_ms()).await.unwrap() {
                    s if s.ready + s.scheduled + s.running == 0 => Ok(()),
                    s => Err(format!("{s:?}")),
                }
            })
            .await;
        }
        // Redis has every attempt's end; its event follows the commit at once
        let mut events = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            events.push(event);
        }
        while let Some(open) = unfinished(&events) {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Ok(event)) => events.push(event),
                Ok(Err(e)) => panic!("event stream: {e}"),
                Err(_) => panic!("{open} started and never ended; events: {events:#?}"),
            }
        }
        events
    }

    /// Events until `id` in `topic` is acked or dead.
    pub async fn until_settled(&mut self, topic: &str, id: &str, within: Duration) -> Vec<Event> {
        self.until(within, |seen| {
            seen.iter()
                .any(|e| e.topic == topic && e.id == id && is_final(&e.kind))
        })
        .await
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// A job with an attempt started and not yet ended in `events`, if any.
fn unfinished(events: &[Event]) -> Option<String> {
    let mut open = std::collections::HashMap::<(&str, &str), i64>::new();
    for e in events {
        let delta = match e.kind {
            EventKind::Started { .. } => 1,
            // the attempt's end comes after it, as the state change
            EventKind::Ran { .. } => 0,
            _ => -1,
        };
        *open.entry((&e.topic, &e.id)).or_default() += delta;
    }
    open.into_iter()
        .find(|(_, n)| *n > 0)
        .map(|((topic, id), _)| format!("{topic}/{id}"))
}

pub fn is_final(kind: &EventKind) -> bool {
    matches!(kind, EventKind::Acked | EventKind::Dead { .. })
}

/// Enqueue one job due `delay_ms` from now; its id.
pub async fn enqueue(
    queue: &Queue,
    topic: &str,
    payload: &str,
    delay_ms: u64,
    max_attempts: u32,
) -> String {
    let now = now_ms();
    let job = NewJob {
        id: None,
        payload: payload.as_bytes().to_vec(),
        due_at_ms: now + delay_ms,
        max_attempts,
        ..Default::default()
    };
    match &queue
        .enqueue(&queue.keys(topic), &[job], now)
        .await
        .unwrap()[..]
    {
        [Enqueued::New(id)] => id.clone(),
        other => panic!("unexpected enqueue answer {other:?}"),
    }
}

/// The last thing that happened to a job: `Ok(())` acked, `Err(reason)` dead.
pub fn settled(events: &[Event], topic: &str, id: &str) -> Result<(), String> {
    match of(events, topic, id).last() {
        Some(EventKind::Acked) => Ok(()),
        Some(EventKind::Dead { reason }) => Err(reason.clone()),
        other => panic!("{topic}/{id} did not settle: {other:?}"),
    }
}

/// The reasons of a job's retries, in order.
pub fn retry_reasons(events: &[Event], topic: &str, id: &str) -> Vec<String> {
    of(events, topic, id)
        .into_iter()
        .filter_map(|k| match k {
            EventKind::Retried { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

/// The events of one job, in order.
pub fn of<'a>(events: &'a [Event], topic: &str, id: &str) -> Vec<&'a EventKind> {
    events
        .iter()
        .filter(|e| e.topic == topic && e.id == id)
        .map(|e| &e.kind)
        .collect()
}

/// How many attempts of `topic`/`id` started.
pub fn starts(events: &[Event], topic: &str, id: &str) -> usize {
    of(events, topic, id)
        .iter()
        .filter(|k| matches!(k, EventKind::Started { .. }))
        .count()
}

pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "info,wasmtime=warn,cranelift=warn",
        ))
        .with_test_writer()
        .try_init();
}

/// The `hourglass` binary built for these tests.
pub fn hourglass_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_hourglass"))
}

/// Run `hourglass ARGS --config <project's queues.toml>`.
pub fn hourglass(project: &Project, args: &[&str]) -> std::process::Output {
    std::process::Command::new(hourglass_bin())
        .args(args)
        .arg("--config")
        .arg(project.config_path())
        .output()
        .unwrap()
}

/// [`hourglass`], given `within` to exit: past that it is killed and the
/// test fails (a call that would hang fails instead of hanging the suite).
pub async fn hourglass_within(
    project: &Project,
    args: &[&str],
    within: Duration,
) -> std::process::Output {
    let output = tokio::process::Command::new(hourglass_bin())
        .args(args)
        .arg("--config")
        .arg(project.config_path())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(within, output).await {
        Ok(out) => out.unwrap(),
        Err(_) => panic!("hourglass {args:?} did not exit within {within:?}"),
    }
}

/// Enqueue `n` jobs due at `due` to each topic, ids `<topic><i>`, in one call per topic.
pub async fn backlog(queue: &Queue, topics: &[&str], n: usize, due: u64) {
    for topic in topics {
        let jobs: Vec<NewJob> = (0..n)
            .map(|i| NewJob {
                id: Some(format!("{topic}{i}")),
                payload: b"{}".to_vec(),
                due_at_ms: due,
                max_attempts: 0,
                ..Default::default()
            })
            .collect();
        queue
            .enqueue(&queue.keys(topic), &jobs, now_ms())
            .await
            .unwrap();
    }
}

/// The topic of every attempt started, in order.
pub fn start_order(events: &[Event]) -> Vec<&str> {
    events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Started { .. }))
        .map(|e| e.topic.as_str())
        .collect()
}

/// `hourglass run` on a project as a child process, its log in a file of the
/// project; killed on drop.
pub struct RunnerProcess {
    child: std::process::Child,
    log: PathBuf,
}

/// The log filter [`RunnerProcess::start`] runs with.
pub const RUNNER_LOG: &str = "info,wasmtime=warn,cranelift=warn";

impl RunnerProcess {
    /// Start it and wait until it says it is running.
    pub fn start(project: &Project) -> RunnerProcess {
        let runner = RunnerProcess::launch(project, RUNNER_LOG);
        // a deadline, not a speed claim: big components compile cold here,
        // on two cores shared with the other tests
        runner.wait_for("hourglass running", Duration::from_secs(180));
        runner
    }

    /// Start it with `RUST_LOG=rust_log` and its log in a file of its own
    /// (`runner.log`, `runner-2.log`, ...); return at once, without waiting
    /// for it to say it is running (Redis may be away on purpose).
    pub fn launch(project: &Project, rust_log: &str) -> RunnerProcess {
        RunnerProcess::launch_binary(hourglass_bin(), project, rust_log)
    }

    /// [`RunnerProcess::launch`] with another build of `hourglass` (an older
    /// one, for a rolling upgrade).
    pub fn launch_binary(binary: &Path, project: &Project, rust_log: &str) -> RunnerProcess {
        RunnerProcess::launch_with(binary, project, rust_log, &[])
    }

    /// [`RunnerProcess::launch_binary`] with more arguments to `run`.
    pub fn launch_with(
        binary: &Path,
        project: &Project,
        rust_log: &str,
        args: &[&str],
    ) -> RunnerProcess {
        RunnerProcess::launch_config(binary, project, &project.config_path(), rust_log, args)
    }

    /// [`RunnerProcess::launch_with`] of another configuration file than the
    /// project's queues.toml (its log in the project's folder all the same).
    pub fn launch_config(
        binary: &Path,
        project: &Project,
        config: &Path,
        rust_log: &str,
        args: &[&str],
    ) -> RunnerProcess {
        let mut log = project.dir.path().join("runner.log");
        let mut n = 1;
        while log.exists() {
            n += 1;
            log = project.dir.path().join(format!("runner-{n}.log"));
        }
        let child = std::process::Command::new(binary)
            .args(["run", "--config"])
            .arg(config)
            .args(args)
            .env("RUST_LOG", rust_log)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        RunnerProcess { child, log }
    }

    /// Its process id (to send it a signal).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Wait, without blocking a runtime thread, until the log holds `text`;
    /// the first line that does. Fails at once if the process exits first.
    pub async fn logged(&mut self, text: &str, within: Duration) -> String {
        eventually(within, &format!("{text:?} logged"), || {
            let exited = self.child.try_wait().unwrap();
            let log = self.log();
            async move {
                if let Some(line) = log.lines().find(|l| l.contains(text)) {
                    return Ok(line.to_owned());
                }
                match exited {
                    Some(status) => panic!("the runner exited ({status}); log:\n{log}"),
                    None => Err(format!("log:\n{log}")),
                }
            }
        })
        .await
    }

    /// Fail if the process has exited.
    pub fn assert_alive(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("the runner exited ({status}); log:\n{}", self.log());
        }
    }

    /// Wait for it to exit on its own (after a signal); its status.
    pub async fn exit(mut self, within: Duration) -> std::process::ExitStatus {
        let log = self.log.clone();
        eventually(within, "the runner exited", || {
            let status = self.child.try_wait().unwrap();
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            async move { status.ok_or(format!("still running; log:\n{log}")) }
        })
        .await
    }

    /// The log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait until the log holds `text`; the first line that does.
    pub fn wait_for(&self, text: &str, within: Duration) -> String {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(line) = self.log().lines().find(|l| l.contains(text)) {
                return line.to_owned();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{text:?} never logged:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kill it (SIGKILL); the whole log.
    pub fn kill(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.log()
    }
}

impl Drop for RunnerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Put `component` into the project's handlers folder as `name` (a hard link
/// when it can: Python components are 19 MB).
pub fn add_handler(project: &Project, name: &str, component: &str) {
    let target = project.handler(name);
    if std::fs::hard_link(component, &target).is_err() {
        std::fs::copy(component, &target).unwrap();
    }
}

/// Poll `check` every 20 ms until it answers `Ok`, for at most `within`;
/// past that, fail naming `what` and the last `Err` it gave (what it saw).
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match check().await {
            Ok(value) => return value,
            Err(seen) if tokio::time::Instant::now() >= deadline => {
                panic!("{what}: not within {within:?}; last seen: {seen}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// The flow `id` once it is done (every job ended), waited for: a job's end
/// reaches its flow through the outbox's delivery right after its ack, not
/// in the ack's step, so on a loaded machine a moment after the ack event.
pub async fn flow_done(
    queue: &hourglass::redis::Queue,
    id: &str,
) -> hourglass::redis::flow::FlowView {
    eventually(
        Duration::from_secs(20),
        &format!("flow {id} done"),
        || async {
            match queue.flows().show(id).await.unwrap() {
                Some(flow) if flow.done_ms.is_some() => Ok(flow),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

/// Every command a Redis server runs, in the order it runs them (`MONITOR`),
/// from the moment [`Monitor::start`] returns: the signal for a call that
/// leaves nothing behind to read, such as a runner's rollout report that
/// changes nothing or a waiter's read of where its job stands. MONITOR slows
/// the server: drop it once the call is seen.
pub struct Monitor {
    lines: std::pin::Pin<Box<dyn futures::Stream<Item = String> + Send>>,
}

impl Monitor {
    /// Monitor the server at `url`: every command it runs after this returns
    /// is seen (a command seen ran after it; one that ran before is not seen).
    pub async fn start(url: &str) -> Monitor {
        let client = redis::Client::open(url).unwrap();
        // answered once the server has taken the connection as a monitor
        let monitor = client.get_async_monitor().await.expect("MONITOR");
        Monitor {
            lines: Box::pin(monitor.into_on_message::<String>()),
        }
    }

    /// Wait for a command whose arguments `wanted` accepts, for at most
    /// `within` (past that, fail naming `what`); its arguments. For a script
    /// they are `EVALSHA`, its hash, the number of keys, the keys, then its
    /// arguments; a command a script runs comes on a line of its own after.
    pub async fn call(
        &mut self,
        within: Duration,
        what: &str,
        mut wanted: impl FnMut(&[String]) -> bool,
    ) -> Vec<String> {
        use futures::StreamExt;
        let deadline = tokio::time::Instant::now() + within;
        let mut seen = 0;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.next()).await {
                Ok(Some(line)) => {
                    seen += 1;
                    let args = monitor_args(&line);
                    if wanted(&args) {
                        return args;
                    }
                }
                Ok(None) => panic!("{what}: the MONITOR connection closed"),
                Err(_) => panic!("{what}: not within {within:?} ({seen} other commands seen)"),
            }
        }
    }
}

/// The arguments of one MONITOR line (`1700000000.123456 [0 127.0.0.1:5555]
/// "EVALSHA" "..."`), unquoted as Redis quotes them (`\"`, `\\`, `\n`,
/// `\xhh`, ...).
fn monitor_args(line: &str) -> Vec<String> {
    let rest = line.split_once("] ").map_or("", |(_, rest)| rest);
    let mut bytes = rest.bytes();
    let mut args = Vec::new();
    while let Some(b) = bytes.next() {
        if b != b'"' {
            continue;
        }
        let mut arg = Vec::new();
        while let Some(c) = bytes.next() {
            match c {
                b'"' => break,
                b'\\' => match bytes.next() {
                    Some(b'n') => arg.push(b'\n'),
                    Some(b'r') => arg.push(b'\r'),
                    Some(b't') => arg.push(b'\t'),
                    Some(b'a') => arg.push(7),
                    Some(b'b') => arg.push(8),
                    Some(b'x') => {
                        let hex: Vec<u8> = bytes.by_ref().take(2).collect();
                        let byte = std::str::from_utf8(&hex)
                            .ok()
                            .and_then(|h| u8::from_str_radix(h, 16).ok());
                        arg.push(byte.unwrap_or(b'?'));
                    }
                    Some(other) => arg.push(other),
                    None => break,
                },
                c => arg.push(c),
            }
        }
        args.push(String::from_utf8_lossy(&arg).into_owned());
    }
    args
}

/// The API token the HTTP tests' queues.toml files set.
pub const TOKEN: &str = "test-token-0123456789abcdef";

/// A client for one runner's HTTP API, sending [`TOKEN`].
pub struct Api(pub String);

/// The value of the first sample of `name` in a `/metrics` text whose line
/// holds every one of `labels` (such as `topic="t"`); 0 when none does.
pub fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && labels.iter().all(|x| l.contains(x)))
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0.0, |n| n.parse().unwrap())
}

impl Api {
    pub async fn get(&self, path: &str) -> test_support::http_client::Answer {
        test_support::http_client::call(&self.0, "GET", path, Some(TOKEN), None).await
    }
    pub async fn post(&self, path: &str, body: &str) -> test_support::http_client::Answer {
        test_support::http_client::call(&self.0, "POST", path, Some(TOKEN), Some(body)).await
    }
    pub async fn delete(&self, path: &str) -> test_support::http_client::Answer {
        test_support::http_client::call(&self.0, "DELETE", path, Some(TOKEN), None).await
    }
    /// Poll `path` until `wanted` holds for its JSON (a 200 answer).
    pub async fn until(
        &self,
        path: &str,
        wanted: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        eventually(Duration::from_secs(60), path, || async {
            let answer = self.get(path).await;
            let v = answer.json();
            match answer.status == 200 && wanted(&v) {
                true => Ok(v),
                false => Err(format!("{} {v:#}", answer.status)),
            }
        })
        .await
    }
}

/// Wait until `runner` (still alive) holds a lease on a job of `topic`.
pub async fn until_running(
    runner: &mut RunnerProcess,
    queue: &Queue,
    topic: &str,
    within: Duration,
) {
    let keys = queue.keys(topic);
    eventually(within, "the runner claimed the job", || {
        runner.assert_alive();
        async {
            match queue.stats(&keys, now_ms()).await.unwrap() {
                s if s.running > 0 => Ok(()),
                s => Err(format!("{s:?}")),
            }
        }
    })
    .await;
}

/// A sandbox for running the probe through `Runtime::run` directly: no
/// grants, 64 MiB, 30 s.
pub fn probe_sandbox() -> hourglass::wasm::Sandbox {
    use hourglass::config::{Grants, HttpLimits};
    let grants = std::sync::Arc::new(Grants::default());
    hourglass::wasm::Sandbox {
        result_max: 64 << 10,
        reuse: None,
        journal: Default::default(),
        logs: 64 << 10,
        timeout: Duration::from_secs(30),
        cpu: None,
        memory: 64 << 20,
        grants: grants.clone(),
        may_enqueue: Vec::new().into(),
        max_payload: 1 << 20,
        http: std::sync::Arc::new(hourglass::wasm::HttpPolicy::new(
            grants,
            HttpLimits::default(),
        )),
    }
}

/// A first attempt of a job of topic `probe` carrying `payload`.
pub fn probe_input(payload: &str) -> hourglass::wasm::JobInput {
    hourglass::wasm::JobInput {
        parent_result: None,
        trace: None,
        pass_through: None,
        journal: None,
        upstream: Default::default(),
        topic: "probe".into(),
        id: "probe-1".into(),
        attempt: 1,
        payload: payload.as_bytes().to_vec(),
        max_attempts: 1,
        enqueued_at_ms: 0,
        due_at_ms: 0,
    }
}

/// A thread spinning on CPU `cpu` until dropped: load on purpose.
pub struct Spinner(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Spinner {
    /// Spin all the time.
    pub fn on(cpu: usize) -> Spinner {
        Spinner::bursts(cpu, Duration::MAX, Duration::ZERO)
    }

    /// Spin for `on`, sleep for `off`, again and again: each wake-up takes
    /// the CPU from what runs there (the scheduler favours a thread that
    /// slept), so work on that CPU is interrupted every `on + off`.
    pub fn bursts(cpu: usize, on: Duration, off: Duration) -> Spinner {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, (tx, rx)) = (stop.clone(), std::sync::mpsc::channel());
        std::thread::spawn(move || {
            let tid = nix::unistd::gettid().as_raw().to_string();
            crate::util::taskset(&["-p", "-c", &cpu.to_string(), &tid]);
            tx.send(()).unwrap();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let start = std::time::Instant::now();
                while start.elapsed() < on && !flag.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
                if !off.is_zero() {
                    std::thread::sleep(off);
                }
            }
        });
        rx.recv().expect("the spinner is pinned");
        Spinner(stop)
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Run `taskset ARGS` (util-linux: set a thread's or a process's CPUs) and
/// insist it worked.
pub fn taskset(args: &[&str]) {
    let out = std::process::Command::new("taskset")
        .args(args)
        .output()
        .expect("taskset (util-linux) runs");
    assert!(out.status.success(), "taskset {args:?}: {out:?}");
}

/// Create flow `id`: `children` jobs `c<i>` in topic `child` (payload
/// `child(i)`), then `p` in topic `parent` (payload `parent`) requiring them all.
pub async fn fan_in(
    queue: &Queue,
    id: &str,
    children: usize,
    child: impl Fn(usize) -> serde_json::Value,
    parent: serde_json::Value,
) {
    use hourglass::redis::flow::{Dep, FlowJob, FlowSpec, Policy};
    let mut jobs: Vec<FlowJob> = (0..children)
        .map(|i| FlowJob {
            name: format!("c{i}"),
            topic: "child".into(),
            payload: child(i).to_string().into_bytes(),
            ..Default::default()
        })
        .collect();
    jobs.push(FlowJob {
        name: "p".into(),
        topic: "parent".into(),
        payload: parent.to_string().into_bytes(),
        after: (0..children)
            .map(|i| Dep {
                name: format!("c{i}"),
                policy: Policy::Require,
            })
            .collect(),
        max_attempts: 0,
    });
    let spec = FlowSpec {
        id: Some(id.into()),
        jobs,
        fail_fast: false,
    };
    let plan = spec.plan(|| unreachable!()).unwrap();
    queue.flows().create(&plan, now_ms()).await.unwrap();
}

/// Wait until at least `n` jobs of flow `id` have ended (a Redis error
/// counts as not yet).
pub async fn until_flow_ended(queue: &Queue, id: &str, n: usize, within: Duration) {
    eventually(within, &format!("{n} jobs of flow {id} ended"), || async {
        match queue.flows().show(id).await {
            Ok(Some(flow)) => match flow.jobs.iter().filter(|j| j.ended.is_some()).count() {
                ended if ended >= n => Ok(()),
                ended => Err(format!("{ended} ended")),
            },
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// The `echo_deps` result of a [`fan_in`] parent: every child acked, `c<i>`
/// with result `i`, in order.
pub fn assert_fan_in_result(end: &hourglass::redis::JobEnd, children: usize) {
    let result = end.result.as_deref().unwrap_or_else(|| panic!("{end:?}"));
    let result: serde_json::Value = serde_json::from_slice(result).unwrap();
    let deps = result["deps"].as_array().unwrap();
    assert_eq!(deps.len(), children);
    for (i, d) in deps.iter().enumerate() {
        assert_eq!(
            (&d["ended"], &d["result"]),
            (&serde_json::json!("acked"), &serde_json::json!(i)),
            "{d}"
        );
    }
}

/// A project with the topics of `toml` and two more, `py` and `js`, run by
/// the Python and JavaScript probes (their results kept an hour).
pub fn with_python_and_javascript(mut toml: String) -> Project {
    use test_support::components::{JS_SDK_PROBE, PY_PROBE};
    for (name, wasm) in [("py", "py.wasm"), ("js", "js.wasm")] {
        toml.push_str(&format!(
            "[[topic]]\nname = \"{name}\"\nhandler = \"{wasm}\"\nresults = {{ keep = \"1h\" }}\n\n"
        ));
    }
    let project = Project::new("concurrency = 4", &toml);
    add_handler(&project, "py.wasm", PY_PROBE);
    add_handler(&project, "js.wasm", JS_SDK_PROBE);
    project
}

/// Topics `names` run by the probe, keeping results an hour (up to 1 MiB),
/// one attempt each by default.
pub fn probe_topics(names: &[&str]) -> String {
    let mut out = String::from("[defaults]\nmax_attempts = 1\n\n");
    for name in names {
        out.push_str(&format!(
            "[[topic]]\nname = \"{name}\"\nhandler = \"probe.wasm\"\nresults = {{ keep = \"1h\", max = \"1MiB\" }}\n\n"
        ));
    }
    out
}

/// The kept end of `topic`/`id` (it must have ended).
pub async fn end_of(queue: &Queue, topic: &str, id: &str) -> hourglass::redis::JobEnd {
    match queue.standing(&queue.keys(topic), id).await.unwrap() {
        hourglass::redis::Standing::Ended(end) => end,
        other => panic!("{topic}/{id} has not ended: {other:?}"),
    }
}

/// An end's result, as JSON.
pub fn result_json(end: &hourglass::redis::JobEnd) -> serde_json::Value {
    let result = end.result.as_deref();
    serde_json::from_slice(result.unwrap_or_else(|| panic!("no result: {end:?}"))).unwrap()
}

/// `hourglass serve` in the test's process: the API, console and metrics of
/// `project`'s `[http]` over its Redis, with no runner claiming jobs.
pub struct Served {
    /// Where it answers.
    pub addr: String,
    _stop: oneshot::Sender<()>,
}

impl Served {
    pub async fn start(project: &Project) -> Served {
        let config = project.config();
        let listen = config.http.as_ref().expect("[http] is configured").listen;
        let ops = hourglass::http::Ops::without_jobs(project.queue().await, config).unwrap();
        let listener = hourglass::http::bind(listen).await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(hourglass::http::serve(listener, ops, async {
            let _ = stopped.await;
        }));
        Served { addr, _stop: stop }
    }
}

/// Dead-letter `n` jobs of `topic` straight through the pipeline (no
/// handler runs): ids `<prefix><i:06>`, reason `failed: boom <i % 7>`, in
/// batches of 1,000, each batch dying at one millisecond (`at_ms` + its
/// number): newest first, the last batch, and within one, ids descending.
pub async fn dead_letters(queue: &Queue, topic: &str, prefix: &str, n: usize, at_ms: u64) {
    use hourglass::redis::{Burial, DeadInfo};
    let keys = queue.keys(topic);
    let retention = hourglass::config::DeadLetter {
        keep: u64::MAX / 2,
        max_age: Duration::from_secs(365 * 86_400),
    };
    for (batch, start) in (0..n).step_by(1000).enumerate() {
        let end = (start + 1000).min(n);
        let jobs: Vec<NewJob> = (start..end)
            .map(|i| NewJob {
                id: Some(format!("{prefix}{i:06}")),
                payload: b"{}".to_vec(),
                due_at_ms: 0,
                ..Default::default()
            })
            .collect();
        queue.enqueue(&keys, &jobs, at_ms).await.unwrap();
        let died = at_ms + batch as u64;
        let claimed = queue
            .pipeline()
            .claim(&keys, died, died + 600_000, 1000)
            .await
            .unwrap();
        let burials: Vec<Burial> = claimed
            .jobs
            .into_iter()
            .map(|job| {
                let i: usize = job.id[prefix.len()..].parse().unwrap();
                Burial {
                    id: job.id,
                    attempt: job.attempt,
                    info: DeadInfo {
                        reason: format!("failed: boom {}", i % 7),
                        attempts: 1,
                        failed_at_ms: died,
                        handler: Some("0123456789abcdef".into()),
                        costs: Vec::new(),
                        expires_at_ms: None,
                    },
                    end: None,
                    notice: None,
                    expired: None,
                    logs: String::new(),
                }
            })
            .collect();
        let refused = queue
            .pipeline()
            .bury(&keys, &burials, retention, died, Default::default())
            .await
            .unwrap();
        assert!(refused.is_empty(), "{refused:?}");
    }
}
