//! Handlers that take jobs in batches (`batch = { max, wait }`, the WIT's
//! `handle-batch`): one call per `max` jobs, each job's outcome applied on its
//! own, a trap failing every job of its call as one attempt, `wait`
//! gathering jobs due apart, a component without the export refused, bad
//! settings refused, and the same on a Redis Cluster.

use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::events::{Event, EventKind};
use hourglass::redis::{NewJob, Queue};
use test_support::RedisCluster;

use crate::util::{Api, Project, Running, hourglass, metric, of, retry_reasons};

const WAIT: Duration = Duration::from_secs(60);

fn topics(batch: &str) -> String {
    format!(
        r#"
[http]
listen = "127.0.0.1:0"

[defaults]
backoff = {{ base = "50ms", jitter = 0.0 }}

[[topic]]
name = "rows"
handler = "batcher.wasm"
max_attempts = 2
batch = {batch}
"#
    )
}

fn job(id: &str, payload: &str, due_at_ms: u64) -> NewJob {
    NewJob {
        id: Some(id.into()),
        payload: payload.as_bytes().to_vec(),
        due_at_ms,
        ..Default::default()
    }
}

async fn put(queue: &Queue, jobs: &[NewJob]) {
    queue
        .enqueue(&queue.keys("rows"), jobs, now_ms())
        .await
        .unwrap();
}

fn ended(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Acked | EventKind::Dead { .. }))
        .count()
}

/// `hourglass_batch_calls_total` and `_batch_jobs_total` of topic `rows`.
async fn counted(api: &Api) -> (u64, u64) {
    let text = api.get("/metrics").await.body;
    let read = |name: &str| metric(&text, name, &["topic=\"rows\""]) as u64;
    (
        read("hourglass_batch_calls_total"),
        read("hourglass_batch_jobs_total"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_jobs_take_a_call_per_max_and_end_each_on_its_own() {
    let project = Project::new("concurrency = 2", &topics(r#"{ max = 50, wait = "20ms" }"#));
    let queue = project.queue().await;
    let now = now_ms();
    let jobs: Vec<NewJob> = (0..1_000)
        .map(|i| {
            let plan = if i == 3 || i == 7 {
                r#"{"fail_first": 1}"#
            } else {
                "{}"
            };
            job(&format!("r{i}"), plan, now)
        })
        .collect();
    put(&queue, &jobs).await;
    let mut runner = Running::start(project.config()).await;
    let api = Api(runner.http.unwrap().to_string());
    let events = runner.until(WAIT, |seen| ended(seen) >= 1_000).await;
    let (calls, handed) = counted(&api).await;
    runner.stop().await;
    // 1,000 first attempts in calls of 50, and the two retries
    assert_eq!(handed, 1_002, "jobs handed to handle-batch");
    assert!(
        (21..=26).contains(&calls),
        "about 1000/50 calls, and one or two for the retries: {calls}"
    );
    for i in 0..1_000 {
        let id = format!("r{i}");
        let retries = retry_reasons(&events, "rows", &id);
        if i == 3 || i == 7 {
            assert_eq!(retries, [format!("job {id} failing on attempt 1")]);
        } else {
            assert!(retries.is_empty(), "{id}: {retries:?}");
        }
        assert!(
            of(&events, "rows", &id).contains(&&EventKind::Acked),
            "{id} acked"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trap_fails_every_job_of_its_call_as_one_attempt() {
    let project = Project::new("concurrency = 1", &topics(r#"{ max = 10 }"#));
    let queue = project.queue().await;
    let now = now_ms();
    let mut jobs: Vec<NewJob> = (0..4).map(|i| job(&format!("t{i}"), "{}", now)).collect();
    jobs.push(job("trap", r#"{"trap": true}"#, now));
    jobs.push(job("gone", r#"{"fail": "no such row"}"#, now));
    put(&queue, &jobs).await;
    let mut runner = Running::start(project.config()).await;
    let events = runner.until(WAIT, |seen| ended(seen) >= 6).await;
    runner.stop().await;
    // one call: the trap failed all six; the next calls run them again
    for id in ["t0", "t1", "t2", "t3", "trap", "gone"] {
        let reasons = retry_reasons(&events, "rows", id);
        assert!(
            reasons.len() == 1 && reasons[0].contains("asked for a trap"),
            "{id}: {reasons:?}"
        );
    }
    // the second call traps again: the trap and whoever shares its call
    // are dead after their two attempts; the reason is the trap
    let dead = |id: &str| {
        of(&events, "rows", id).into_iter().find_map(|k| match k {
            EventKind::Dead { reason } => Some(reason.clone()),
            _ => None,
        })
    };
    assert!(dead("trap").unwrap().contains("asked for a trap"));
    let info = queue.dead().info(&queue.keys("rows"), "trap").await;
    assert_eq!(info.unwrap().unwrap().attempts, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_gathers_jobs_due_apart_into_one_call_and_none_starts_early() {
    let project = Project::new(
        "concurrency = 2",
        &topics(r#"{ max = 100, wait = "400ms" }"#),
    );
    let queue = project.queue().await;
    let mut runner = Running::start(project.config()).await;
    let api = Api(runner.http.unwrap().to_string());
    let now = now_ms();
    let jobs: Vec<NewJob> = (0..5)
        .map(|i| job(&format!("w{i}"), "{}", now + 100 + 50 * i))
        .collect();
    put(&queue, &jobs).await;
    let events = runner.until(WAIT, |seen| ended(seen) >= 5).await;
    let (calls, handed) = counted(&api).await;
    runner.stop().await;
    assert_eq!((calls, handed), (1, 5), "one call for the five");
    for e in &events {
        if let EventKind::Started {
            due_at_ms,
            started_at_ms,
            ..
        } = e.kind
        {
            assert!(started_at_ms >= due_at_ms, "{} started early", e.id);
        }
    }
    let first = events
        .iter()
        .find_map(|e| match e.kind {
            EventKind::Started {
                due_at_ms,
                started_at_ms,
                ..
            } if e.id == "w0" => Some(started_at_ms - due_at_ms),
            _ => None,
        })
        .unwrap();
    assert!(first >= 300, "the first waited for the others: {first} ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_without_handle_batch_and_bad_settings_are_refused() {
    let project = Project::new(
        "",
        &topics("{ max = 10 }").replace("batcher.wasm", "echo.wasm"),
    );
    let out = hourglass(&project, &["check"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("does not export `handle-batch`") && err.contains("batch_handler!"),
        "{err}"
    );
    let refused = hourglass::Runner::start(project.config()).await;
    let err = format!("{:#}", refused.err().expect("refused"));
    assert!(err.contains("does not export `handle-batch`"), "{err}");
    for (batch, says) in [
        ("{ max = 0 }", "batch"),
        ("{ max = 20000 }", "at most 10000"),
        (r#"{ max = 5, wait = "2m" }"#, "at most 60s"),
        (r#"{ max = 5, linger = "1s" }"#, "linger"),
    ] {
        project.write_config("", &topics(batch));
        let out = hourglass(&project, &["check"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{batch}");
        assert!(err.contains(says), "{batch}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_work_on_a_cluster() {
    let cluster = RedisCluster::start();
    let project = Project::on_cluster(
        cluster.urls(),
        "concurrency = 2",
        &topics(r#"{ max = 20, wait = "10ms" }"#),
    );
    let queue = project.queue().await;
    let now = now_ms();
    let jobs: Vec<NewJob> = (0..200)
        .map(|i| {
            let plan = if i == 5 { r#"{"fail_first": 1}"# } else { "{}" };
            job(&format!("c{i}"), plan, now)
        })
        .collect();
    put(&queue, &jobs).await;
    let mut runner = Running::start(project.config()).await;
    let api = Api(runner.http.unwrap().to_string());
    let events = runner.until(WAIT, |seen| ended(seen) >= 200).await;
    let (calls, handed) = counted(&api).await;
    runner.stop().await;
    assert_eq!(handed, 201);
    assert!((11..=14).contains(&calls), "{calls}");
    assert_eq!(retry_reasons(&events, "rows", "c5").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_javascript_batch_handlers_end_each_job_on_their_own() {
    let mut text = String::from(
        "[http]\nlisten = \"127.0.0.1:0\"\n\n[defaults]\nbackoff = { base = \"50ms\", jitter = 0.0 }\n",
    );
    for topic in ["py", "js"] {
        text.push_str(&format!(
            "\n[[topic]]\nname = \"{topic}\"\nhandler = \"{topic}_batch.wasm\"\nbatch = {{ max = 10, wait = \"20ms\" }}\n"
        ));
    }
    let project = Project::new("concurrency = 2", &text);
    crate::util::add_handler(
        &project,
        "py_batch.wasm",
        test_support::components::PY_BATCH,
    );
    crate::util::add_handler(
        &project,
        "js_batch.wasm",
        test_support::components::JS_BATCH,
    );
    let queue = project.queue().await;
    let now = now_ms();
    for topic in ["py", "js"] {
        let jobs: Vec<NewJob> = (0..30)
            .map(|i| {
                let plan = match i {
                    3 | 7 => r#"{"fail_first": 1}"#,
                    9 => r#"{"fail": "no such row"}"#,
                    _ => "{}",
                };
                job(&format!("{topic}{i}"), plan, now)
            })
            .collect();
        queue.enqueue(&queue.keys(topic), &jobs, now).await.unwrap();
    }
    let mut runner = Running::start(project.config()).await;
    let api = Api(runner.http.unwrap().to_string());
    let events = runner
        .until(Duration::from_secs(120), |seen| ended(seen) >= 60)
        .await;
    let metrics = api.get("/metrics").await.body;
    runner.stop().await;
    for topic in ["py", "js"] {
        let label = format!("topic=\"{topic}\"");
        let calls = metric(&metrics, "hourglass_batch_calls_total", &[&label]) as u64;
        assert!(
            (3..=8).contains(&calls),
            "{topic}: {calls} calls for 32 jobs"
        );
        for i in 0..30 {
            let id = format!("{topic}{i}");
            let retries = retry_reasons(&events, topic, &id);
            match i {
                3 | 7 => assert_eq!(retries, [format!("job {id} failing on attempt 1")]),
                _ => assert!(retries.is_empty(), "{id}: {retries:?}"),
            }
            let kinds = of(&events, topic, &id);
            match i {
                9 => assert!(
                    kinds.iter().any(|k| matches!(k, EventKind::Dead { reason } if reason.contains("no such row"))),
                    "{id}: {kinds:?}"
                ),
                _ => assert!(kinds.contains(&&EventKind::Acked), "{id}: {kinds:?}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_key_each_call_takes_the_jobs_of_one_tenant_key() {
    let mut text = topics(r#"{ max = 10, wait = "20ms", key = true }"#);
    text.push_str("fairness = { by = \"key\" }\n");
    let project = Project::new("concurrency = 2", &text);
    let queue = project.queue().await;
    let now = now_ms();
    // three keys' jobs interleaved: a claim brings them mixed
    let jobs: Vec<NewJob> = (0..60)
        .map(|i| {
            let key = ["a", "b", "c"][i % 3];
            NewJob {
                key: Some(key.into()),
                ..job(&format!("k{i}"), &format!(r#"{{"key": "{key}"}}"#), now)
            }
        })
        .collect();
    put(&queue, &jobs).await;
    let mut runner = Running::start(project.config()).await;
    let api = Api(runner.http.unwrap().to_string());
    let events = runner.until(WAIT, |seen| ended(seen) >= 60).await;
    let (calls, handed) = counted(&api).await;
    runner.stop().await;
    let dead: Vec<&Event> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Dead { .. }))
        .collect();
    assert!(dead.is_empty(), "no call mixed keys: {dead:?}");
    assert_eq!(handed, 60);
    assert!(calls >= 6, "at least 20 jobs a key in calls of 10: {calls}");
    // without key = true the same jobs share calls across keys (the test can fail)
    let project = Project::new(
        "concurrency = 2",
        &format!(
            "{}fairness = {{ by = \"key\" }}\n",
            topics(r#"{ max = 10, wait = "20ms" }"#)
        ),
    );
    let queue = project.queue().await;
    put(&queue, &jobs).await;
    let mut runner = Running::start(project.config()).await;
    let events = runner.until(WAIT, |seen| ended(seen) >= 60).await;
    runner.stop().await;
    assert!(
        events.iter().any(
            |e| matches!(&e.kind, EventKind::Dead { reason } if reason.contains("mixed keys"))
        ),
        "without key = true, keys share calls"
    );
    // and key = true without fairness is refused
    project.write_config("", &topics(r#"{ max = 10, key = true }"#));
    let out = hourglass(&project, &["check"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`key = true` needs fairness"), "{err}");
}
