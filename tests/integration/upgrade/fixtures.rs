//! The release, its runs, and the topics and jobs the upgrade test uses.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::redis::{NewJob, Queue};

use crate::util::eventually;

/// The debug lines that name each attempt's start.
pub(super) const LOG: &str = "info,hourglass=debug,wasmtime=warn,cranelift=warn";

/// The previous release: (version, commit) of the newest row of the table in
/// `docs/src/releases.md` that has a commit (the row of a release being cut
/// has none until the commit after it).
pub(super) fn previous_release() -> (String, &'static str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/releases.md");
    let text = std::fs::read_to_string(&path).unwrap();
    for line in text.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if let [_, version, _, commit, ..] = cells[..]
            && commit.len() == 40
            && commit.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return (
                version.to_owned(),
                Box::leak(commit.to_owned().into_boxed_str()),
            );
        }
    }
    panic!("{} records no release with a commit", path.display());
}

/// `binary` (an old build or this one) run as a command with `config`.
pub(super) fn run(binary: &Path, config: &Path, args: &[&str]) -> Output {
    let out = std::process::Command::new(binary)
        .args(args)
        .arg("--config")
        .arg(config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} {args:?}: {}{}",
        binary.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Every attempt's start in these logs: (job id, attempt, handler version, log index).
pub(super) fn starts(logs: &[String]) -> Vec<(String, u32, String, usize)> {
    let field = |line: &str, name: &str| -> Option<String> {
        let at = line.find(&format!(" {name}="))? + name.len() + 2;
        Some(line[at..].split(' ').next()?.trim_matches('"').to_owned())
    };
    let mut out = Vec::new();
    for (i, log) in logs.iter().enumerate() {
        for line in log.lines().filter(|l| l.contains(" started ")) {
            if let (Some(id), Some(attempt), Some(version)) = (
                field(line, "job_id"),
                field(line, "attempt"),
                field(line, "handler"),
            ) {
                out.push((id, attempt.parse().unwrap(), version, i));
            }
        }
    }
    out
}

/// Executions per job id from the probe's files (`<id>.<attempt>`; a flow
/// job's id is `<flow>/<name>`, its files in the flow's folder).
pub(super) fn touched(data: &Path) -> BTreeMap<String, Vec<u32>> {
    let mut runs: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for entry in std::fs::read_dir(data).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        let names: Vec<String> = match entry.path().is_dir() {
            true => std::fs::read_dir(entry.path())
                .unwrap()
                .map(|f| format!("{name}/{}", f.unwrap().file_name().into_string().unwrap()))
                .collect(),
            false => vec![name],
        };
        for name in names {
            let (id, attempt) = name.rsplit_once('.').unwrap();
            runs.entry(id.to_owned())
                .or_default()
                .push(attempt.parse().unwrap());
        }
    }
    runs
}

pub(super) fn topics(data: &Path, shop: &str, hold: &str) -> String {
    let touch = format!(
        "grants = {{ dirs = [{{ host = \"{}\", guest = \"/data\", write = true }}] }}",
        data.display()
    );
    format!(
        r#"
[[topic]]
name = "work"
handler = "probe.wasm"
may_enqueue = ["work"]
results = {{ keep = "1h" }}
timeout = "10s"
{touch}

[[topic]]
name = "retrying"
handler = "flaky.wasm"
backoff = {{ base = "20s", factor = 1.0, max = "20s", jitter = 0.0 }}

[[topic]]
name = "held"
handler = "probe.wasm"
{touch}

[[topic]]
name = "durable"
handler = "checkout.wasm"
timeout = "5s"
grants = {{ http = ["{shop}"] }}

[[topic]]
name = "fair"
handler = "probe.wasm"
fairness = {{ by = "key" }}
key_concurrency = 1
{touch}

[[topic]]
name = "canary"
handler = "canary.wasm"
rollout = {{ canary = "50%", for = "100s", min_attempts = 5, max_failure_rate = 0.5 }}
{touch}

[[topic]]
name = "long"
handler = "probe.wasm"
timeout = "60s"
grants = {{ http = ["{hold}"] }}

[[topic]]
name = "ticks"
handler = "probe.wasm"
{touch}

[[schedule]]
name = "tick"
topic = "ticks"
every = "1s"
missed = "all"
payload = '{{"touch":"/data"}}'
"#
    )
}

pub(super) const TOUCH: &str = r#"{"touch":"/data"}"#;

/// `n` jobs `<prefix><i>` of `payload` due at `due`, options from `with`.
pub(super) fn jobs(
    prefix: &str,
    n: usize,
    payload: &str,
    due: u64,
    with: impl Fn(usize, &mut NewJob),
) -> Vec<NewJob> {
    (0..n)
        .map(|i| {
            let mut job = NewJob {
                id: Some(format!("{prefix}{i}")),
                payload: payload.as_bytes().to_vec(),
                due_at_ms: due,
                ..Default::default()
            };
            with(i, &mut job);
            job
        })
        .collect()
}

/// Wait until every topic has nothing left to run but what `parked` allows.
pub(super) async fn until_quiet(
    queue: &Queue,
    within: Duration,
    topics: &[&str],
    parked: &[(&str, u64)],
) {
    eventually(within, "every topic ran what it could", || async {
        for topic in topics {
            let s = queue.stats(&queue.keys(topic), now_ms()).await.unwrap();
            let allowed = parked.iter().find(|(t, _)| t == topic).map_or(0, |p| p.1);
            if s.scheduled + s.ready + s.running > allowed {
                return Err(format!("{topic}: {s:?}"));
            }
        }
        Ok(())
    })
    .await
}
