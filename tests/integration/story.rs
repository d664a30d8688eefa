//! A job's story, kept: each attempt (when, where, on which version, how it
//! ended, what it used) and what its handler logged, with the job, its dead
//! letter and its kept end; bounded; a lost lease added to the story; a job
//! that acks on a plain topic leaves nothing behind.

use std::time::Duration;

use hourglass::events::EventKind;
use hourglass::redis::{AttemptOutcome, JobState, NewJob};
use serde_json::json;

use crate::util::{Project, Running, enqueue, hourglass};

const WAIT: Duration = Duration::from_secs(60);

const TOPICS: &str = "[[topic]]\nname = \"probe\"\nhandler = \"probe.wasm\"\nmax_attempts = 2\n\
     backoff = { base = \"10ms\", jitter = 0.0 }\n\n\
     [[topic]]\nname = \"kept\"\nhandler = \"probe.wasm\"\nmax_attempts = 2\n\
     backoff = { base = \"10ms\", jitter = 0.0 }\nresults = { keep = \"1h\" }\n\n\
     [[topic]]\nname = \"quiet\"\nhandler = \"probe.wasm\"\nlogs = false\nmax_attempts = 1\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_jobs_story_and_logs_hold_both_attempts_and_go_with_its_dead_letter() {
    let project = Project::new("concurrency = 2", TOPICS);
    let mut running = Running::start(project.config()).await;
    let queue = project.queue().await;
    let plan = json!({ "log": { "lines": 3, "bytes": 40 }, "retry_first": 1, "then": "fail" });
    let id = enqueue(&queue, "probe", &plan.to_string(), 0, 0).await;
    running.until_settled("probe", &id, WAIT).await;
    let keys = queue.keys("probe");
    let view = queue.inspect(&keys, &id, 0).await.unwrap().unwrap();
    assert!(matches!(view.state, JobState::Dead(_)), "{view:?}");
    let story = &view.history;
    assert_eq!(story.len(), 2, "{story:?}");
    let (first, second) = (&story[0], &story[1]);
    assert_eq!((first.attempt, second.attempt), (1, 2));
    assert_eq!(first.outcome, Some(AttemptOutcome::Retry));
    assert_eq!(second.outcome, Some(AttemptOutcome::Dead));
    assert!(
        second.error.as_deref().unwrap().contains("failed:"),
        "{second:?}"
    );
    let version = crate::util::hash_of(project.handler("probe.wasm").to_str().unwrap());
    for a in story {
        assert_eq!(a.handler.as_deref(), Some(version.as_str()));
        assert!(
            a.runner
                .as_deref()
                .is_some_and(|r| r.contains(&std::process::id().to_string()))
        );
        assert!(
            a.due_at_ms <= a.started_at_ms && a.started_at_ms <= a.ended_at_ms,
            "{a:?}"
        );
        assert!(a.usage.wall_us > 0 && a.usage.memory_peak > 0, "{a:?}");
    }
    assert!(second.started_at_ms >= first.ended_at_ms);

    // both attempts' lines, in order, with the job's dead letter
    let logs = queue.logs(&keys, &id).await.unwrap().expect("kept");
    let said: Vec<(u32, &str)> = logs
        .lines
        .iter()
        .filter(|l| l.text.contains(" line "))
        .map(|l| (l.attempt, l.text.split(' ').nth(3).unwrap()))
        .collect();
    assert_eq!(
        said,
        [(1, "0"), (1, "1"), (1, "2"), (2, "0"), (2, "1"), (2, "2")]
    );
    assert!(logs.lines.iter().all(|l| l.stream == "info"), "{logs:?}");
    // the command line says the same
    let out = hourglass(&project, &["logs", "probe", &id]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        text.lines().filter(|l| l.contains(" line ")).count(),
        6,
        "{text}"
    );
    assert!(
        text.contains("#1") && text.contains("#2") && text.contains("info"),
        "{text}"
    );
    let inspect = hourglass(&project, &["inspect", "probe", &id]);
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(
        text.contains("history") && text.contains("retry") && text.contains("dead"),
        "{text}"
    );
    assert!(
        text.contains(&format!("hourglass logs probe {id}")),
        "{text}"
    );

    // purged, the logs go with it
    queue
        .dead()
        .purge(&keys, std::slice::from_ref(&id))
        .await
        .unwrap();
    assert_eq!(queue.logs(&keys, &id).await.unwrap(), None);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_logs_a_mebibyte_keeps_the_newest_64_kib_and_says_what_went() {
    let project = Project::new("concurrency = 2", TOPICS);
    let mut running = Running::start(project.config()).await;
    let queue = project.queue().await;
    // 1,000 lines of 1,000 bytes on stdout, then a failure: a dead letter keeps them
    let plan = json!({ "log": { "lines": 1000, "bytes": 1000, "to": "stdout" }, "then": "fail" });
    let id = enqueue(&queue, "probe", &plan.to_string(), 0, 1).await;
    running.until_settled("probe", &id, WAIT).await;
    let logs = queue
        .logs(&queue.keys("probe"), &id)
        .await
        .unwrap()
        .unwrap();
    assert!(logs.bytes <= 64 << 10, "{} bytes kept", logs.bytes);
    assert!(logs.bytes > 60 << 10, "{} bytes kept", logs.bytes);
    assert_eq!(logs.lines[0].stream, "dropped", "{:?}", logs.lines[0]);
    // what went and what stayed add up to what was written: each line is
    // its time (13 digits), attempt, stream and 1,000 bytes of text
    let written: u64 = 1000 * ("1795922205848 1 stdout ".len() as u64 + 1000 + 1);
    let marker = "0 0 dropped \n".len() + logs.lines[0].text.len();
    let kept = (logs.bytes - marker) as u64;
    assert_eq!(
        logs.dropped_bytes + kept,
        written,
        "{} dropped",
        logs.dropped_bytes
    );
    let last = logs.lines.last().unwrap();
    assert!(last.text.starts_with("attempt 1 line 999 "), "{last:?}");
    assert_eq!(last.stream, "stdout");
    // a topic that keeps none keeps none
    let quiet = enqueue(&queue, "quiet", &plan.to_string(), 0, 1).await;
    running.until_settled("quiet", &quiet, WAIT).await;
    assert_eq!(
        queue.logs(&queue.keys("quiet"), &quiet).await.unwrap(),
        None
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acked_jobs_logs_and_story_go_with_its_kept_end_and_a_plain_ack_leaves_nothing() {
    let project = Project::new("concurrency = 2", TOPICS);
    let mut running = Running::start(project.config()).await;
    let queue = project.queue().await;
    let plan = json!({ "log": { "lines": 2, "bytes": 30 }, "retry_first": 1 });
    let id = enqueue(&queue, "kept", &plan.to_string(), 0, 0).await;
    running.until_settled("kept", &id, WAIT).await;
    let keys = queue.keys("kept");
    let end = crate::util::end_of(&queue, "kept", &id).await;
    let outcomes: Vec<_> = end.history.iter().map(|a| (a.attempt, a.outcome)).collect();
    assert_eq!(
        outcomes,
        [
            (1, Some(AttemptOutcome::Retry)),
            (2, Some(AttemptOutcome::Ack))
        ]
    );
    let logs = queue.logs(&keys, &id).await.unwrap().expect("with its end");
    assert!(logs.ended);
    let attempts: Vec<u32> = logs
        .lines
        .iter()
        .filter(|l| l.text.contains(" line "))
        .map(|l| l.attempt)
        .collect();
    assert_eq!(attempts, [1, 1, 2, 2], "{logs:?}");
    // the live job's entry is gone: the end holds them
    let mut redis = redis::Client::open(project.endpoint.urls()[0].as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let live: bool = redis::cmd("HEXISTS")
        .arg(&keys.logs)
        .arg(&id)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(!live);

    // on a plain topic a job that logs and acks leaves nothing: no story, no logs
    let plain = json!({ "log": { "lines": 5, "bytes": 30 } });
    let job = NewJob {
        id: Some("plain-1".into()),
        payload: plain.to_string().into_bytes(),
        ..Default::default()
    };
    let pk = queue.keys("probe");
    queue
        .enqueue(&pk, &[job], hourglass::clock::now_ms())
        .await
        .unwrap();
    running
        .until(WAIT, |seen| {
            seen.iter()
                .any(|e| e.id == "plain-1" && matches!(e.kind, EventKind::Acked))
        })
        .await;
    for key in [&pk.logs, &pk.error] {
        let exists: bool = redis::cmd("EXISTS")
            .arg(key)
            .query_async(&mut redis)
            .await
            .unwrap();
        assert!(!exists, "{key} holds nothing after a plain ack");
    }
    running.stop().await;
}

/// In Redis alone, with the test's clock: a retry keeps the story and the
/// attempt's lines; a lease that expires adds that attempt to the story
/// (`requeue.lua` keeps what the story held), and the next claim hands it
/// all to the runner.
#[tokio::test]
async fn a_lost_lease_joins_the_story_and_the_next_claim_brings_it_all() {
    use hourglass::redis::{AttemptCost, Failure, Kept, Queue, Retrying};
    let redis = crate::util::RedisServer::start();
    let q = Queue::connect(&redis.url(), "t").await.unwrap();
    let k = q.keys("a");
    let job = NewJob {
        id: Some("x".into()),
        payload: b"p".to_vec(),
        ..Default::default()
    };
    q.enqueue(&k, &[job], 0).await.unwrap();
    let first = q.pipeline().claim(&k, 10, 1_000, 10).await.unwrap();
    assert_eq!(first.jobs[0].attempt, 1);
    let mut tried = AttemptCost::new(1, Some("0123456789abcdef".into()), Default::default());
    tried.ended_as(AttemptOutcome::Retry, Some("once"));
    let mut lines = String::new();
    hourglass::redis::logs::push_line(&mut lines, 11, 1, "warn", "a \"quoted\" line");
    let kept = Kept {
        results: None,
        logs: 1 << 10,
    };
    let failed = Retrying {
        id: "x".into(),
        attempt: 1,
        next_due_ms: 20,
        failure: Failure {
            error: "once, \"attempts\":[ in the error".into(),
            handler: None,
            at: 12,
            attempts: vec![tried.clone()],
        },
        logs: lines.clone(),
    };
    assert!(
        q.pipeline()
            .retry(&k, &[failed], kept)
            .await
            .unwrap()
            .is_empty()
    );
    // the second attempt's runner dies: its lease (until 1,000) expires
    let second = q.pipeline().claim(&k, 30, 1_000, 10).await.unwrap();
    assert_eq!(second.jobs[0].attempt, 2);
    assert_eq!(
        q.pipeline().requeue_expired(&k, 1_031, 10).await.unwrap(),
        1
    );
    let third = q.pipeline().claim(&k, 1_040, 1_000, 10).await.unwrap();
    let story = &third.jobs[0].last_failure.as_ref().unwrap().attempts;
    assert_eq!(story.len(), 2, "{story:?}");
    assert_eq!(story[0], tried);
    assert_eq!(story[1].attempt, 2);
    assert_eq!(story[1].outcome, Some(AttemptOutcome::LeaseExpired));
    assert_eq!(story[1].ended_at_ms, 1_031);
    assert!(
        third.jobs[0]
            .last_failure
            .as_ref()
            .unwrap()
            .error
            .starts_with("lease expired")
    );
    // and the lines the first attempt logged are there, the marker-free text as given
    let logs = q.logs(&k, "x").await.unwrap().unwrap();
    assert_eq!(logs.lines.len(), 1);
    assert_eq!(logs.lines[0].text, "a \"quoted\" line");
    // past the bound the oldest go first, and the first line says how much went
    let mut many = String::new();
    for i in 0..40 {
        hourglass::redis::logs::push_line(
            &mut many,
            1_050,
            3,
            "info",
            &format!("{i:02} {}", "y".repeat(40)),
        );
    }
    let again = Retrying {
        id: "x".into(),
        attempt: 3,
        next_due_ms: 1_100,
        failure: Failure {
            error: "twice".into(),
            handler: None,
            at: 1_060,
            attempts: Vec::new(),
        },
        logs: many.clone(),
    };
    q.pipeline().retry(&k, &[again], kept).await.unwrap();
    let logs = q.logs(&k, "x").await.unwrap().unwrap();
    assert!(logs.bytes <= 1 << 10, "{}", logs.bytes);
    assert_eq!(logs.lines[0].stream, "dropped");
    let total = (lines.len() + many.len()) as u64;
    let marker = "0 0 dropped \n".len() + logs.lines[0].text.len();
    assert_eq!(logs.dropped_bytes + (logs.bytes - marker) as u64, total);
    assert!(logs.lines.last().unwrap().text.starts_with("39 "));
}
