//! `hourglass` as a child process: the CLI (`hourglass`, `hourglass_within`), a
//! runner (`RunnerProcess`), `MONITOR` (`Monitor`) and the API (`Api`).

use hourglass::clock::now_ms;
use hourglass::redis::Queue;
use std::path::{Path, PathBuf};

use super::project::*;
use super::running::*;
use std::time::Duration;

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
