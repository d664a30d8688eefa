//! Expiry: a job not started by its deadline is not run. Dead-lettered with
//! reason "expired" or dropped (`on_expire`), counted in stats and
//! `/metrics`; a retry due after the deadline is not made; a deadline passes
//! for a job held back by its paused tenant key too; the topic default
//! `expire_after`; the CLI's and API's options and their bad values.

use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::events::{Event, EventKind};
use hourglass::redis::{Enqueued, JobEnd, NewJob, Queue, Standing};

use crate::util::{Api, Project, Running, hourglass, of, starts};

const WAIT: Duration = Duration::from_secs(30);

const TOPICS: &str = r#"
[defaults]
backoff = { base = "400ms", factor = 2.0, jitter = 0.0 }

[[topic]]
name = "codes"
handler = "echo.wasm"
results = { keep = "1h" }

[[topic]]
name = "flaky"
handler = "flaky.wasm"
max_attempts = 10

[[topic]]
name = "pings"
handler = "echo.wasm"
expire_after = "300ms"
on_expire = "drop"
results = { keep = "1h" }

[[topic]]
name = "tenants"
handler = "echo.wasm"
fairness = { by = "key" }
"#;

/// Enqueue one job to `topic`; its id.
async fn put(queue: &Queue, topic: &str, job: NewJob) -> String {
    match &queue
        .enqueue(&queue.keys(topic), &[job], now_ms())
        .await
        .unwrap()[..]
    {
        [Enqueued::New(id)] => id.clone(),
        other => panic!("enqueue answered {other:?}"),
    }
}

/// The kept end of a job that ended.
async fn end_of(queue: &Queue, topic: &str, id: &str) -> JobEnd {
    match queue.standing(&queue.keys(topic), id).await.unwrap() {
        Standing::Ended(end) => end,
        other => panic!("{topic}/{id} has not ended: {other:?}"),
    }
}

fn job(id: &str, payload: &str, deadline: Option<u64>) -> NewJob {
    NewJob {
        id: Some(id.into()),
        payload: payload.as_bytes().to_vec(),
        due_at_ms: now_ms(),
        expires_at_ms: deadline,
        ..Default::default()
    }
}

/// The job's expiry event: its reason, and whether it was dropped.
fn expired(events: &[Event], topic: &str, id: &str) -> Option<(String, bool)> {
    of(events, topic, id).into_iter().find_map(|k| match k {
        EventKind::Expired { reason, dropped } => Some((reason.clone(), *dropped)),
        _ => None,
    })
}

fn ended(events: &[Event], topic: &str, id: &str) -> bool {
    of(events, topic, id).iter().any(|k| {
        matches!(
            k,
            EventKind::Acked | EventKind::Dead { .. } | EventKind::Expired { .. }
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_not_started_by_its_deadline_is_dead_lettered_unrun() {
    let project = Project::new("concurrency = 2", TOPICS);
    let queue = project.queue().await;
    let keys = queue.keys("codes");
    let now = now_ms();
    put(&queue, "codes", job("late", "{}", Some(now + 300))).await;
    put(&queue, "codes", job("fine", "{}", Some(now + 600_000))).await;
    // nobody runs them until the first deadline has passed
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut runner = Running::start(project.config()).await;
    let events = runner
        .until(WAIT, |seen| {
            ended(seen, "codes", "late") && ended(seen, "codes", "fine")
        })
        .await;
    let (reason, dropped) = expired(&events, "codes", "late").expect("late expired");
    assert!(!dropped, "on_expire defaults to dead");
    assert!(reason.starts_with("expired: "), "{reason}");
    assert_eq!(
        starts(&events, "codes", "late"),
        0,
        "an expired job never runs"
    );
    assert_eq!(starts(&events, "codes", "fine"), 1);
    assert!(of(&events, "codes", "fine").contains(&&EventKind::Acked));
    // a dead letter like any other, and counted
    let info = queue.dead().info(&keys, "late").await.unwrap();
    let info = info.expect("late is a dead letter");
    assert!(info.reason.starts_with("expired: "), "{}", info.reason);
    assert_eq!(info.attempts, 0, "no attempt ran");
    let stats = queue.stats(&keys, now_ms()).await.unwrap();
    assert_eq!((stats.expired, stats.dead), (1, 1), "{stats:?}");
    // its view still says by when it had to start
    let view = hourglass(&project, &["inspect", "codes", "late", "--json"]);
    let view: serde_json::Value = serde_json::from_slice(&view.stdout).unwrap();
    assert_eq!(view["state"], "dead", "{view:#}");
    assert_eq!(view["expires_at_ms"], now + 300, "{view:#}");
    // its end says so to waiters
    let end = end_of(&queue, "codes", "late").await;
    assert_eq!(end.state.as_str(), "dead");
    assert!(end.reason.unwrap().starts_with("expired"));
    // nothing of the deadlines is left once their jobs ended
    let mut conn = redis::Client::open(project.endpoint.urls()[0].as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let left: u64 = redis::cmd("EXISTS")
        .arg(&keys.expire)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, 0, "the deadlines of ended jobs are forgotten");
    // so a dead letter retried runs
    let again = queue.dead().retry(&keys, &["late".into()], now_ms()).await;
    assert_eq!(again.unwrap(), ["late"]);
    let events = runner
        .until(WAIT, |seen| ended(seen, "codes", "late"))
        .await;
    assert!(of(&events, "codes", "late").contains(&&EventKind::Acked));
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_due_after_the_deadline_is_not_made() {
    let project = Project::new("concurrency = 2", TOPICS);
    let queue = project.queue().await;
    let mut runner = Running::start(project.config()).await;
    // backoff 400 ms then 800 ms: the second attempt starts at ~0.4 s, the
    // third would at ~1.2 s, after the deadline at 1 s
    let deadline = now_ms() + 1_000;
    put(
        &queue,
        "flaky",
        job("f", r#"{"fail_first": 5}"#, Some(deadline)),
    )
    .await;
    let events = runner.until(WAIT, |seen| ended(seen, "flaky", "f")).await;
    runner.stop().await;
    assert_eq!(starts(&events, "flaky", "f"), 2, "{events:#?}");
    let (reason, _) = expired(&events, "flaky", "f").expect("expired at its failure");
    assert!(
        reason.contains("next attempt would start after its deadline")
            && reason.contains("flaking on attempt 2"),
        "{reason}"
    );
    let info = queue.dead().info(&queue.keys("flaky"), "f").await;
    assert_eq!(info.unwrap().unwrap().attempts, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_topic_default_expires_and_drops_what_waited_too_long() {
    let project = Project::new("concurrency = 2", TOPICS);
    let queue = project.queue().await;
    let keys = queue.keys("pings");
    put(&queue, "pings", job("old", "{}", None)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut runner = Running::start(project.config()).await;
    // one enqueued while the runner runs starts within its 300 ms
    put(&queue, "pings", job("new", "{}", None)).await;
    let events = runner
        .until(WAIT, |seen| {
            ended(seen, "pings", "old") && ended(seen, "pings", "new")
        })
        .await;
    runner.stop().await;
    let (reason, dropped) = expired(&events, "pings", "old").expect("old expired");
    assert!(dropped, "on_expire = \"drop\"");
    assert!(reason.starts_with("expired: "), "{reason}");
    assert_eq!(starts(&events, "pings", "old"), 0);
    assert!(of(&events, "pings", "new").contains(&&EventKind::Acked));
    // dropped: no dead letter, no job; the end and the count remain
    assert_eq!(queue.dead().info(&keys, "old").await.unwrap(), None);
    assert!(
        queue
            .inspect(&keys, "old", now_ms())
            .await
            .unwrap()
            .is_none()
    );
    let end = end_of(&queue, "pings", "old").await;
    assert_eq!(end.state.as_str(), "expired");
    let stats = queue.stats(&keys, now_ms()).await.unwrap();
    assert_eq!((stats.expired, stats.dead), (1, 0), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_passes_for_a_job_its_paused_key_holds_back() {
    let project = Project::new("concurrency = 2", TOPICS);
    let queue = project.queue().await;
    let keys = queue.keys("tenants");
    let mut runner = Running::start(project.config()).await;
    queue.tenants().pause(&keys, "acme", true).await.unwrap();
    let keyed = |id: &str, deadline| NewJob {
        key: Some("acme".into()),
        ..job(id, "{}", deadline)
    };
    put(&queue, "tenants", keyed("a1", Some(now_ms() + 300))).await;
    put(&queue, "tenants", keyed("a2", None)).await;
    let events = runner
        .until(WAIT, |seen| ended(seen, "tenants", "a1"))
        .await;
    assert!(expired(&events, "tenants", "a1").is_some());
    // the key is still paused: its other job waits on
    let stats = queue.stats(&keys, now_ms()).await.unwrap();
    assert_eq!((stats.ready, stats.expired), (1, 1), "{stats:?}");
    queue.tenants().pause(&keys, "acme", false).await.unwrap();
    let events = runner
        .until(WAIT, |seen| ended(seen, "tenants", "a2"))
        .await;
    assert!(of(&events, "tenants", "a2").contains(&&EventKind::Acked));
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_and_the_api_take_a_deadline_and_refuse_bad_ones() {
    let project = Project::new(
        "concurrency = 2",
        &format!("[http]\nlisten = \"127.0.0.1:0\"\n{TOPICS}"),
    );
    let queue = project.queue().await;
    let keys = queue.keys("codes");
    let out = hourglass(
        &project,
        &[
            "enqueue",
            "codes",
            "{}",
            "--id",
            "c1",
            "--expires-in",
            "200ms",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let deadline = queue.inspect(&keys, "c1", now_ms()).await.unwrap().unwrap();
    assert!(deadline.expires_at_ms.is_some(), "{deadline:?}");
    for (args, says) in [
        (&["--expires-in", "soon"][..], "--expires-in"),
        (
            &["--expires-at", "2001-01-01T00:00:00Z"],
            "--expires-at: is not after now: the job would expire before it could start",
        ),
        (
            &["--expires-in", "0s"],
            "--expires-in: must be longer than 0",
        ),
        (
            &["--expires-in", "1s", "--delay", "5s"],
            "before the job is due",
        ),
        (&["--priority", "10"], "out of range"),
        (&["--priority", "-1"], "out of range"),
        // a word, not clap's "invalid digit found in string"
        (
            &["--priority", "high"],
            "\"high\" is not a priority: a number from 0 (the highest, the default) to 9",
        ),
    ] {
        let mut all = vec!["enqueue", "codes", "{}"];
        all.extend_from_slice(args);
        let out = hourglass(&project, &all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut runner = Running::start(project.config()).await;
    let api = Api(runner.http.unwrap().to_string());
    let a = api
        .post(
            "/api/topics/codes/jobs",
            r#"{"id": "c2", "payload": "{}", "expires_in": "10m", "priority": 3}"#,
        )
        .await;
    assert_eq!(a.status, 201, "{}", a.body);
    for (body, field) in [
        (r#"{"payload": "{}", "expires_in": "x"}"#, "expires_in"),
        (
            r#"{"payload": "{}", "expires_at": "2001-01-01T00:00:00Z"}"#,
            "expires_at",
        ),
        (
            r#"{"payload": "{}", "expires_in": "1s", "expires_at": "2099-01-01T00:00:00Z"}"#,
            "expires_in",
        ),
        (r#"{"payload": "{}", "priority": 12}"#, "priority"),
    ] {
        let a = api.post("/api/topics/codes/jobs", body).await;
        assert_eq!(a.status, 400, "{body}: {}", a.body);
        assert!(a.body.contains(field), "{body}: {}", a.body);
    }
    let events = runner
        .until(WAIT, |seen| {
            ended(seen, "codes", "c1") && ended(seen, "codes", "c2")
        })
        .await;
    assert!(expired(&events, "codes", "c1").is_some());
    assert!(of(&events, "codes", "c2").contains(&&EventKind::Acked));
    let metrics = api.get("/metrics").await.body;
    assert!(
        metrics.lines().any(|l| l.contains("outcome=\"expired\"")
            && l.contains("topic=\"codes\"")
            && l.ends_with(" 1")),
        "{metrics}"
    );
    let stats = hourglass(&project, &["stats"]);
    let text = String::from_utf8_lossy(&stats.stdout);
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with("codes "))
        .unwrap()
        .split_whitespace()
        .collect();
    let column = header.iter().position(|h| *h == "EXPIRED").unwrap();
    assert_eq!(row[column], "1", "{text}");
    runner.stop().await;
}
