//! The upgrade from the previous release (the newest row of
//! `docs/src/releases.md` with a commit), built from git like `layout`'s
//! old builds: two runners of that release fill a namespace with every
//! kind of state through its own CLI (delayed, pinned, retrying, dead,
//! kept results, suspended durable jobs, a flow waiting on a paused topic,
//! an open batch, tenant keys one of them paused, a canary mid-window, a
//! schedule's cursor, long jobs running); two runners of this build join
//! under load (a mixed fleet, with deadlines, priorities and follow-ups
//! with options, all known to the release); the old ones are stopped, one
//! with SIGTERM (its long jobs handed back) and one with SIGKILL; this
//! build's CLI then resumes, signals, seals and retries. Every job ends as
//! it would have: each ran once, but for the handed-back and the killed
//! runner's jobs in flight (at most twice), the retried ones (as many times
//! as they retried) and the dead letter retried on purpose. And a
//! namespace of layout 2 (the last layout-2 build's CLI) migrated by this
//! build's `hourglass migrate` and run by its runner.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::redis::{NewJob, Queue};
use test_support::{HttpServer, Reply};

use crate::layout::{LAYOUT_2_COMMIT, old_binary};
use crate::util::{Project, RedisServer, RunnerProcess, eventually, hash_of, hourglass, variant};

/// The debug lines that name each attempt's start.
const LOG: &str = "info,hourglass=debug,wasmtime=warn,cranelift=warn";

/// The previous release: (version, commit) of the newest row of the table in
/// `docs/src/releases.md` that has a commit (the row of a release being cut
/// has none until the commit after it).
fn previous_release() -> (String, &'static str) {
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
fn run(binary: &Path, config: &Path, args: &[&str]) -> Output {
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
fn starts(logs: &[String]) -> Vec<(String, u32, String, usize)> {
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
fn touched(data: &Path) -> BTreeMap<String, Vec<u32>> {
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

fn topics(data: &Path, shop: &str, hold: &str) -> String {
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

const TOUCH: &str = r#"{"touch":"/data"}"#;

/// `n` jobs `<prefix><i>` of `payload` due at `due`, options from `with`.
fn jobs(
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
async fn until_quiet(queue: &Queue, within: Duration, topics: &[&str], parked: &[(&str, u64)]) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_release_upgrades_on_live_state_and_runs_beside_this_build() {
    let (release, commit) = previous_release();
    let old = tokio::task::spawn_blocking(move || old_binary(commit))
        .await
        .unwrap();

    migrate_a_layout_2_namespace().await;

    let data = tempfile::tempdir().unwrap();
    let shop = HttpServer::start(vec![Reply::status(200, "ch_1")]);
    // the long jobs' server: the first six requests never answer, then 200
    let mut script = vec![Reply::Hang; 6];
    script.push(Reply::status(200, "done"));
    let hold = HttpServer::start(script);
    let redis = RedisServer::start();
    let runner_lines = "concurrency = 8\nshutdown_grace = \"1s\"\nlease_margin = \"1s\"";
    let project = Project::with_redis(
        redis.url(),
        runner_lines,
        &topics(data.path(), &shop.url(), &hold.url()),
    );
    std::fs::copy(
        project.handler("probe.wasm"),
        project.handler("canary.wasm"),
    )
    .unwrap();
    let probe = hash_of(&project.handler("probe.wasm").display().to_string());
    // the old release: its own compile cache (its wasmtime may differ), and
    // runner A's API, in files of their own beside this build's queues.toml
    let base = std::fs::read_to_string(project.config_path()).unwrap();
    let old_config = |name: &str, http: bool| -> PathBuf {
        let text: String = base
            .lines()
            .map(|l| match l.starts_with("compile_cache = ") {
                true => "compile_cache = \".hourglass/old-cache\"\n".to_owned(),
                false => format!("{l}\n"),
            })
            .collect();
        let text = match http {
            true => format!(
                "{text}\n[http]\nlisten = \"127.0.0.1:{}\"\n",
                test_support::free_port()
            ),
            false => text,
        };
        let path = project.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let (old_a, old_b) = (
        old_config("old-a.toml", true),
        old_config("old-b.toml", false),
    );
    let queue = project.queue().await;

    // 1. the release alone: two runners, state of every kind from its CLI
    let mut a = RunnerProcess::launch_config(&old, &project, &old_a, LOG, &[]);
    let mut b = RunnerProcess::launch_config(&old, &project, &old_b, LOG, &[]);
    for r in [&mut a, &mut b] {
        r.logged("hourglass running", Duration::from_secs(180))
            .await;
    }
    let cli = |args: &[&str]| run(&old, &old_a, args);
    let version_out = cli(&["--version"]);
    let old_version = String::from_utf8_lossy(&version_out.stdout).into_owned();
    assert!(old_version.contains(&release), "{old_version}");
    for i in 0..20 {
        let payload = format!(r#"{{"touch":"/data","result":{{"i":{i}}}}}"#);
        cli(&[
            "enqueue",
            "work",
            &payload,
            "--id",
            &format!("delayed-{i}"),
            "--delay",
            "25s",
        ]);
    }
    for i in 0..10 {
        cli(&[
            "enqueue",
            "work",
            TOUCH,
            "--id",
            &format!("pinned-{i}"),
            "--delay",
            "25s",
            "--version",
            &probe,
        ]);
        cli(&[
            "enqueue",
            "work",
            r#"{"result":{"kept":true}}"#,
            "--id",
            &format!("result-{i}"),
        ]);
        cli(&[
            "enqueue",
            "retrying",
            r#"{"fail_first":1}"#,
            "--id",
            &format!("retry-{i}"),
        ]);
    }
    for i in 0..5 {
        cli(&[
            "enqueue",
            "work",
            r#"{"then":"fail"}"#,
            "--id",
            &format!("dead-{i}"),
        ]);
    }
    let order = |n: u32, extra: &str| format!(r#"{{"order":{n},"shop":"{}"{extra}}}"#, shop.url());
    cli(&[
        "enqueue",
        "durable",
        &order(1, r#","sleep_ms":20000"#),
        "--id",
        "sleeper",
    ]);
    cli(&[
        "enqueue",
        "durable",
        &order(2, r#","approval_ms":600000"#),
        "--id",
        "approval",
    ]);
    // a flow waiting on a paused topic, and an open batch (their jobs' files
    // go in folders named after them)
    cli(&["pause", "held"]);
    for folder in ["flow-1", "batch-1"] {
        std::fs::create_dir(data.path().join(folder)).unwrap();
    }
    let flow = project.dir.path().join("flow.json");
    std::fs::write(&flow, serde_json::json!({"id": "flow-1", "jobs": [
        {"name": "first", "topic": "held", "payload": {"touch": "/data", "result": {"first": true}}},
        {"name": "then", "topic": "work", "payload": {"touch": "/data", "echo_deps": true}, "after": ["first"]}]}).to_string()).unwrap();
    cli(&["flow", "enqueue", flow.to_str().unwrap()]);
    let batch = project.dir.path().join("batch.json");
    std::fs::write(
        &batch,
        serde_json::json!({"id": "batch-1", "open": true,
        "jobs": [{"name": "one", "topic": "work", "payload": {"touch": "/data"}}],
        "on_complete": {"topic": "work", "payload": {"touch": "/data", "echo_deps": true}}})
        .to_string(),
    )
    .unwrap();
    cli(&["flow", "enqueue", batch.to_str().unwrap()]);
    // tenant keys, one paused
    cli(&["key", "pause", "fair", "globex"]);
    for i in 0..8 {
        cli(&[
            "enqueue",
            "fair",
            TOUCH,
            "--id",
            &format!("acme-{i}"),
            "--key",
            "acme",
        ]);
        cli(&[
            "enqueue",
            "fair",
            TOUCH,
            "--id",
            &format!("globex-{i}"),
            "--key",
            "globex",
        ]);
    }
    // the canary: a new file under the rollout policy, jobs flowing
    let canary_jobs = tokio::spawn({
        let queue = queue.clone();
        async move {
            let mut n = 0;
            let end = tokio::time::Instant::now() + Duration::from_secs(130);
            while tokio::time::Instant::now() < end {
                let batch = jobs(&format!("canary-{n}-"), 2, TOUCH, now_ms(), |_, _| {});
                queue
                    .enqueue(&queue.keys("canary"), &batch, now_ms())
                    .await
                    .unwrap();
                n += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            n * 2
        }
    });
    let keys = queue.keys("canary");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let bytes = std::fs::read(project.handler("probe.wasm")).unwrap();
    crate::util::deploy(&project.handler("canary.wasm"), &variant(&bytes, "canary"));
    let canary = hash_of(&project.handler("canary.wasm").display().to_string());
    eventually(
        Duration::from_secs(60),
        "the release starts a canary",
        || async {
            match queue.rollouts().get(&keys).await.unwrap().canary {
                Some(c) if c.version == canary => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    // what the release leaves: dead letters, retries waiting, kept results,
    // a sleeper and a waiter, the schedule's cursor
    eventually(
        Duration::from_secs(60),
        "the release's first attempts ended",
        || {
            let logs = [a.log(), b.log()];
            let queue = queue.clone();
            async move {
                let dead = queue
                    .stats(&queue.keys("work"), now_ms())
                    .await
                    .unwrap()
                    .dead;
                let durable = queue
                    .stats(&queue.keys("durable"), now_ms())
                    .await
                    .unwrap()
                    .suspended;
                let failed = queue
                    .stats(&queue.keys("retrying"), now_ms())
                    .await
                    .unwrap()
                    .scheduled;
                let retried = starts(&logs)
                    .iter()
                    .filter(|s| s.0.starts_with("retry-"))
                    .count();
                match (dead, durable, failed, retried) {
                    (5, 2, 10, 10) => Ok(()),
                    seen => Err(format!(
                        "dead, suspended, retries waiting, retry attempts: {seen:?}"
                    )),
                }
            }
        },
    )
    .await;
    let ticks_before = starts(&[a.log(), b.log()])
        .iter()
        .filter(|s| s.0.starts_with("tick@"))
        .count();
    assert!(ticks_before >= 2, "the schedule fired under the release");

    // long jobs the release's runners hold when they stop (their requests hang)
    let long = queue.keys("long");
    let fetch = serde_json::json!({ "fetch": hold.url() }).to_string();
    queue
        .enqueue(
            &long,
            &jobs("long-", 6, &fetch, now_ms(), |_, _| {}),
            now_ms(),
        )
        .await
        .unwrap();
    eventually(
        Duration::from_secs(30),
        "the release holds the long jobs",
        || async {
            match queue.stats(&long, now_ms()).await.unwrap().running {
                6 => Ok(()),
                n => Err(format!("{n} running")),
            }
        },
    )
    .await;

    // 2. a mixed fleet: two runners of this build join, under load
    let mut n1 = RunnerProcess::launch(&project, LOG);
    let mut n2 = RunnerProcess::launch(&project, LOG);
    for r in [&mut n1, &mut n2] {
        r.logged("hourglass running", Duration::from_secs(180))
            .await;
    }
    let work = queue.keys("work");
    let mixed = tokio::spawn({
        let queue = queue.clone();
        async move {
            let mut sent = Vec::new();
            for round in 0..40 {
                let now = now_ms();
                // priorities, a deadline already past (expired whoever claims
                // it), and follow-ups with a priority and a key (outbox entry 7)
                let batch = jobs(&format!("mixed-{round}-"), 10, TOUCH, now, |i, job| {
                    job.priority = (i % 3) as u8;
                    if i == 9 {
                        job.due_at_ms = now - 1_000;
                        job.expires_at_ms = Some(now - 500);
                    }
                    if i == 8 {
                        job.payload = serde_json::json!({"touch": "/data", "follow_ups": [
                            {"topic": "work", "payload": TOUCH, "id": format!("follow-{round}"), "priority": 2, "expires_in_ms": 600_000}]})
                        .to_string()
                        .into_bytes();
                    }
                });
                sent.extend(batch.iter().map(|j| j.id.clone().unwrap()));
                queue
                    .enqueue(&queue.keys("work"), &batch, now)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            sent
        }
    });
    eventually(
        Duration::from_secs(60),
        "both builds run jobs side by side",
        || {
            let (old_logs, new_logs) = ([a.log(), b.log()], [n1.log(), n2.log()]);
            async move {
                let old = starts(&old_logs)
                    .iter()
                    .filter(|s| s.0.starts_with("mixed-"))
                    .count();
                let new = starts(&new_logs)
                    .iter()
                    .filter(|s| s.0.starts_with("mixed-"))
                    .count();
                match (old, new) {
                    (o, n) if o >= 10 && n >= 10 => Ok(()),
                    seen => Err(format!(
                        "mixed jobs started by the release, by this build: {seen:?}"
                    )),
                }
            }
        },
    )
    .await;
    let sent = mixed.await.unwrap();

    // 3. the release stops: A with SIGTERM (it hands back what it holds), B killed
    let stopped_at = now_ms();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(a.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let b_log = b.kill();
    let status = a.exit(Duration::from_secs(30)).await;
    assert!(
        status.success(),
        "the release's runner stops cleanly on SIGTERM: {status}"
    );
    // the killed runner held at most its concurrency of jobs (8)
    let in_flight_at_kill = 8;

    // 4. this build alone: everything the release left runs, nothing else waits
    // but the parked: the waiter, the flow on the paused topic, the open batch, globex
    let topics = ["work", "retrying", "held", "durable", "fair", "long"];
    until_quiet(
        &queue,
        Duration::from_secs(120),
        &topics,
        &[("durable", 1), ("held", 1), ("fair", 8)],
    )
    .await;
    let canary_sent = canary_jobs.await.unwrap();
    let new = |args: &[&str]| hourglass(&project, args);
    for args in [
        &["signal", "durable", "approval", "approved", "\"ops\""][..],
        &["resume", "held"],
        &["key", "resume", "fair", "globex"],
    ] {
        let out = new(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let more = project.dir.path().join("more.json");
    std::fs::write(&more, serde_json::json!({"jobs": [{"name": "two", "topic": "work", "payload": {"touch": "/data"}}]}).to_string()).unwrap();
    for args in [
        &["flow", "add", "batch-1", more.to_str().unwrap()][..],
        &["flow", "seal", "batch-1"],
        &["dead", "retry", "work", "dead-0"],
    ] {
        let out = new(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    until_quiet(
        &queue,
        Duration::from_secs(120),
        &[&topics[..], &["canary"]].concat(),
        &[],
    )
    .await;
    eventually(
        Duration::from_secs(90),
        "the canary's window ends under this build",
        || async {
            match queue.rollouts().get(&keys).await.unwrap().last {
                Some(v) if v.result == "promoted" => Ok(v),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let rollout = queue.rollouts().get(&keys).await.unwrap();
    let verdict = rollout.last.clone().unwrap();
    assert_eq!(
        (verdict.version.as_str(), rollout.stable.as_deref()),
        (canary.as_str(), Some(canary.as_str()))
    );
    assert!(
        verdict.at_ms > stopped_at,
        "promoted after the release stopped: {verdict:?}"
    );
    // the schedule goes on
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 5. the count
    let logs = [
        std::fs::read_to_string(project.dir.path().join("runner.log")).unwrap(),
        b_log,
        n1.log(),
        n2.log(),
    ];
    let all = starts(&logs);
    let runs = touched(data.path());
    let once = |id: &str| -> Result<(), String> {
        match runs.get(id).map(Vec::as_slice) {
            Some([_]) => Ok(()),
            other => Err(format!("{id}: {other:?}")),
        }
    };
    let mut wrong: Vec<String> = Vec::new();
    for i in 0..20 {
        wrong.extend(once(&format!("delayed-{i}")).err());
    }
    for i in 0..10 {
        wrong.extend(once(&format!("pinned-{i}")).err());
        let versions: BTreeSet<&str> = all
            .iter()
            .filter(|s| s.0 == format!("pinned-{i}"))
            .map(|s| s.2.as_str())
            .collect();
        assert_eq!(
            versions,
            BTreeSet::from([probe.as_str()]),
            "pinned-{i} ran on its version"
        );
        let retries: Vec<u32> = all
            .iter()
            .filter(|s| s.0 == format!("retry-{i}"))
            .map(|s| s.1)
            .collect();
        assert_eq!(
            retries,
            [1, 2],
            "retry-{i}: attempt 1 failed under the release, 2 acked"
        );
        // a result the release kept, read by this build
        let waited = new(&["wait", "work", &format!("result-{i}")]);
        assert!(
            waited.status.success() && String::from_utf8_lossy(&waited.stdout).contains("kept"),
            "result-{i}: {}{}",
            String::from_utf8_lossy(&waited.stdout),
            String::from_utf8_lossy(&waited.stderr)
        );
    }
    for i in 0..8 {
        wrong.extend(once(&format!("acme-{i}")).err());
        wrong.extend(once(&format!("globex-{i}")).err());
    }
    let globex_by_old = all
        .iter()
        .filter(|s| s.0.starts_with("globex-") && s.3 < 2)
        .count();
    assert_eq!(
        globex_by_old, 0,
        "the paused key's jobs ran only after this build resumed it"
    );
    for id in [
        "flow-1/first",
        "flow-1/then",
        "batch-1/one",
        "batch-1/two",
        "batch-1/on_complete",
    ] {
        wrong.extend(once(id).err());
    }
    // the dead letters stay dead; the one retried ran once more and died again
    let dead = queue.dead().list(&work, 0, 100).await.unwrap();
    let dead_ids: BTreeSet<String> = dead.iter().map(|d| d.0.clone()).collect();
    let mut wanted: BTreeSet<String> = (0..5).map(|i| format!("dead-{i}")).collect();
    let expired: Vec<&String> = sent.iter().filter(|id| id.ends_with("-9")).collect();
    wanted.extend(expired.iter().map(|id| (*id).clone()));
    assert_eq!(
        dead_ids, wanted,
        "dead letters: the release's five and the expired"
    );
    for (id, info) in &dead {
        if id.starts_with("mixed-") {
            assert!(info.reason.contains("expired"), "{id}: {info:?}");
            assert!(!all.iter().any(|s| &s.0 == id), "{id} expired unrun");
        }
    }
    assert_eq!(
        all.iter().filter(|s| s.0 == "dead-0").count(),
        2,
        "dead-0 retried once by this build"
    );
    // the durable jobs: every step once, the sleeper woken by this build
    let received = shop.received();
    for step in ["charge", "reserve", "email"] {
        for order in [1, 2] {
            let n = received
                .iter()
                .filter(|r| r.path == format!("/{step}?order={order}"))
                .count();
            assert_eq!(n, 1, "{step} of order {order}");
        }
    }
    assert_eq!(
        received
            .iter()
            .filter(|r| r.path.starts_with("/approved?"))
            .count(),
        1
    );
    // the mixed fleet's jobs: once, but for the killed runner's in flight
    let mut twice = Vec::new();
    for id in sent.iter().filter(|id| !id.ends_with("-9")) {
        match runs.get(id).map(Vec::len) {
            Some(1) => {}
            Some(2) => twice.push(id.clone()),
            other => wrong.push(format!("{id}: {other:?}")),
        }
    }
    for id in (0..40).map(|r| format!("follow-{r}")) {
        wrong.extend(once(&id).err());
    }
    // the long jobs: cut at the release's stop, asked again and ended by this build
    assert_eq!(
        hold.received().len(),
        12,
        "each long job's request: once hung, once answered"
    );
    // the canary topic's jobs: each once, none dead
    let canary_runs = runs.keys().filter(|id| id.starts_with("canary-")).count();
    assert_eq!(canary_runs, canary_sent, "every canary job ran");
    assert!(
        runs.iter()
            .filter(|(id, _)| id.starts_with("canary-"))
            .all(|(_, a)| a.len() <= 2)
    );
    assert_eq!(queue.stats(&keys, now_ms()).await.unwrap().dead, 0);
    // the schedule: every fire time once, none skipped across the upgrade
    let mut fires: Vec<u64> = all
        .iter()
        .filter_map(|s| s.0.strip_prefix("tick@").map(|ms| ms.parse().unwrap()))
        .collect();
    let count = fires.len();
    fires.sort_unstable();
    fires.dedup();
    // a fire time is enqueued once; it runs again only if the killed runner held it
    twice.extend((0..count - fires.len()).map(|_| "a fire time".to_owned()));
    let gaps: Vec<u64> = fires
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|d| *d != 1000)
        .collect();
    assert!(gaps.is_empty(), "fire times skipped: gaps {gaps:?}");
    assert!(
        wrong.is_empty(),
        "jobs that did not run exactly once: {wrong:?}"
    );
    assert!(
        twice.len() <= in_flight_at_kill,
        "{} mixed jobs ran twice, but the killed runner had {in_flight_at_kill} in flight: {twice:?}",
        twice.len()
    );
    let by_new = all.iter().filter(|s| s.3 >= 2).count();
    let handed_back = (0..6)
        .filter(|i| {
            let id = format!("long-{i}");
            all.iter().any(|s| s.0 == id && s.3 < 2) && all.iter().any(|s| s.0 == id && s.3 >= 2)
        })
        .count();
    assert_eq!(
        handed_back, 6,
        "the release held every long job and this build ended it"
    );
    println!(
        "upgrade from {release} ({}): {} attempts started ({} by the release's two runners, {by_new} by \
         this build's two), {} executions touched; mixed fleet: {} jobs, {} ran twice (the killed runner \
         had {in_flight_at_kill} in flight), {} expired unrun; {} fire times in a row; canary promoted \
         after the upgrade with {canary_sent} jobs; {handed_back} long jobs handed back or killed and ended by this build",
        &commit[..12],
        all.len(),
        all.len() - by_new,
        runs.values().map(Vec::len).sum::<usize>(),
        sent.len(),
        twice.len(),
        expired.len(),
        fires.len(),
    );
    n1.kill();
    n2.kill();
}

/// A namespace written by the last layout-2 build's CLI (delayed and due
/// jobs), migrated online by this build's `hourglass migrate`, then run by
/// this build's runner: each job once.
async fn migrate_a_layout_2_namespace() {
    let old = tokio::task::spawn_blocking(|| old_binary(LAYOUT_2_COMMIT))
        .await
        .unwrap();
    let data = tempfile::tempdir().unwrap();
    let topics = format!(
        "[[topic]]\nname = \"work\"\nhandler = \"probe.wasm\"\ngrants = {{ dirs = [{{ host = \"{}\", guest = \"/data\", write = true }}] }}\n",
        data.path().display()
    );
    let project = Project::new(
        "concurrency = 4\ncompile_cache = \".hourglass/old-cache\"",
        &topics,
    );
    let config = project.config_path();
    for i in 0..20 {
        let delay = if i % 2 == 0 { "0s" } else { "2s" };
        run(
            &old,
            &config,
            &[
                "enqueue",
                "work",
                TOUCH,
                "--id",
                &format!("old-{i}"),
                "--delay",
                delay,
            ],
        );
    }
    let refused = hourglass(&project, &["stats"]);
    assert!(
        !refused.status.success(),
        "this build refuses layout 2 until migrated"
    );
    let migrated = hourglass(&project, &["migrate"]);
    assert!(
        migrated.status.success()
            && String::from_utf8_lossy(&migrated.stdout).contains("layout 2 -> 3"),
        "{}{}",
        String::from_utf8_lossy(&migrated.stdout),
        String::from_utf8_lossy(&migrated.stderr)
    );
    let runner = RunnerProcess::start(&project);
    let queue = project.queue().await;
    eventually(Duration::from_secs(60), "the migrated jobs ran", || async {
        match queue.stats(&queue.keys("work"), now_ms()).await.unwrap() {
            s if s.scheduled + s.ready + s.running == 0 && s.dead == 0 => Ok(()),
            s => Err(format!("{s:?}")),
        }
    })
    .await;
    let runs = touched(data.path());
    assert_eq!(runs.len(), 20, "{runs:?}");
    assert!(runs.values().all(|a| a == &[1]), "{runs:?}");
    println!("layout 2 migrated by this build: 20 jobs of the old CLI, each run once");
    runner.kill();
}
