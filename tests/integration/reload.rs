//! Live reload: handlers replaced, broken, deleted and restored under a
//! running runner; queues.toml changed live; the compile cache.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use hourglass::Notice;
use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use hourglass::redis::JobState;
use hourglass::wasm::Runtime;
use test_support::components::{ECHO, FLAKY, ORDER_CANCEL, PROBE};

use crate::util::{Project, Running, backlog, deploy, enqueue, hash_of, start_order};

/// Acked by echo, flaky, order_cancel and probe alike.
const ANY: &str = r#"{"fail_first":0,"order_id":1,"customer":"ada","amount_cents":5}"#;
const WAIT: Duration = Duration::from_secs(20);

const SWAP: &str = r#"
[[topic]]
name = "swap"
handler = "swap.wasm"

[[topic]]
name = "echo"
handler = "echo.wasm"
"#;

fn loaded(path: &Path, hash: String) -> impl Fn(&Notice) -> bool {
    let path = path.to_owned();
    move |n| matches!(n, Notice::Loaded { path: p, hash: h } if *p == path && *h == hash)
}

fn rejected(path: &Path) -> impl Fn(&Notice) -> bool {
    let path = path.to_owned();
    move |n| matches!(n, Notice::Rejected { path: p, .. } if *p == path)
}

/// Run one job of `topic`; the handler version that ran it.
async fn ran_by(runner: &mut Running, queue: &hourglass::redis::Queue, topic: &str) -> String {
    let id = enqueue(queue, topic, ANY, 0, 1).await;
    let events = runner.until_settled(topic, &id, WAIT).await;
    let mut hash = None;
    for e in events.iter().filter(|e| e.id == id && e.topic == topic) {
        match &e.kind {
            EventKind::Started { handler, .. } => hash = Some(handler.clone()),
            EventKind::Acked | EventKind::Ran { .. } => {}
            other => panic!("job {id} did not ack: {other:?}"),
        }
    }
    hash.expect("the job started")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_replaced_twice_under_load_acks_every_job_once_and_records_the_switch() {
    let project = Project::new("concurrency = 8", SWAP);
    let swap = project.handler("swap.wasm");
    deploy(&swap, &std::fs::read(ECHO).unwrap());
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let versions = [hash_of(ECHO), hash_of(FLAKY), hash_of(ORDER_CANCEL)];

    // a producer enqueues a job every 2 ms for the whole test
    let producer = {
        let queue = queue.clone();
        tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..900 {
                ids.push(enqueue(&queue, "swap", ANY, 0, 1).await);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            ids
        })
    };
    let mut events = Vec::new();
    let acked = |seen: &[hourglass::events::Event], n: usize| {
        seen.iter().filter(|e| e.kind == EventKind::Acked).count() >= n
    };
    events.extend(runner.until(WAIT, |seen| acked(seen, 150)).await);
    deploy(&swap, &std::fs::read(FLAKY).unwrap());
    runner
        .notice(WAIT, loaded(&swap, versions[1].clone()))
        .await;
    events.extend(runner.until(WAIT, |seen| acked(seen, 150)).await);
    deploy(&swap, &std::fs::read(ORDER_CANCEL).unwrap());
    runner
        .notice(WAIT, loaded(&swap, versions[2].clone()))
        .await;
    let ids = producer.await.unwrap();
    let so_far = events.iter().filter(|e| e.kind == EventKind::Acked).count();
    events.extend(
        runner
            .until(WAIT, |seen| acked(seen, ids.len() - so_far))
            .await,
    );

    let mut acks: HashMap<&str, usize> = HashMap::new();
    let mut started = Vec::new();
    for e in &events {
        match &e.kind {
            EventKind::Acked => *acks.entry(e.id.as_str()).or_default() += 1,
            EventKind::Started { handler, .. } => started.push(handler.as_str()),
            EventKind::Ran { .. } => {}
            other => panic!("job {} did not simply ack: {other:?}", e.id),
        }
    }
    assert_eq!(acks.len(), ids.len(), "every job acked");
    assert!(acks.values().all(|n| *n == 1), "no job acked twice");
    for v in &versions {
        assert!(
            started.iter().any(|h| h == v),
            "version {v} ran no job; versions seen: {:?}",
            started.iter().collect::<std::collections::BTreeSet<_>>()
        );
    }
    assert_eq!(started.first(), Some(&versions[0].as_str()));
    assert_eq!(started.last(), Some(&versions[2].as_str()));
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_incompatible_and_half_written_files_are_rejected_while_the_old_version_serves() {
    let project = Project::new("concurrency = 4", SWAP);
    let swap = project.handler("swap.wasm");
    deploy(&swap, &std::fs::read(ECHO).unwrap());
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let echo = hash_of(ECHO);

    deploy(&swap, b"this is not webassembly");
    match runner.notice(WAIT, rejected(&swap)).await {
        Notice::Rejected { error, .. } => {
            assert!(
                error.contains("not a valid WebAssembly component"),
                "{error}"
            )
        }
        _ => unreachable!(),
    }
    assert_eq!(ran_by(&mut runner, &queue, "swap").await, echo);

    // a valid component that does not implement the handler world
    deploy(&swap, b"\0asm\x0d\x00\x01\x00");
    match runner.notice(WAIT, rejected(&swap)).await {
        Notice::Rejected { error, .. } => assert!(
            error.contains("does not implement the hourglass handler contract"),
            "{error}"
        ),
        _ => unreachable!(),
    }
    assert_eq!(ran_by(&mut runner, &queue, "swap").await, echo);

    // a copy still in progress, written in place
    let probe = std::fs::read(PROBE).unwrap();
    std::fs::write(&swap, &probe[..probe.len() / 2]).unwrap();
    runner.notice(WAIT, rejected(&swap)).await;
    assert_eq!(ran_by(&mut runner, &queue, "swap").await, echo);

    // the copy completes: the new version serves
    std::fs::write(&swap, &probe).unwrap();
    runner.notice(WAIT, loaded(&swap, hash_of(PROBE))).await;
    assert_eq!(ran_by(&mut runner, &queue, "swap").await, hash_of(PROBE));
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_handler_stops_its_topic_without_losing_jobs_and_a_restored_one_resumes() {
    let project = Project::new("concurrency = 4", SWAP);
    let swap = project.handler("swap.wasm");
    deploy(&swap, &std::fs::read(ECHO).unwrap());
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;

    std::fs::remove_file(&swap).unwrap();
    runner
        .notice(
            WAIT,
            |n| matches!(n, Notice::Missing { path } if *path == swap),
        )
        .await;
    let waiting = enqueue(&queue, "swap", ANY, 0, 1).await;
    // a job enqueued after it to a served topic runs: the runner is claiming
    let other = enqueue(&queue, "echo", ANY, 0, 1).await;
    let events = runner.until_settled("echo", &other, WAIT).await;
    assert!(
        !events.iter().any(|e| e.id == waiting && e.topic == "swap"),
        "the topic without a handler ran a job: {events:?}"
    );
    let view = queue
        .inspect(&queue.keys("swap"), &waiting, now_ms())
        .await
        .unwrap()
        .expect("the job is kept");
    assert!(matches!(view.state, JobState::Ready(_)), "{view:?}");

    deploy(&swap, &std::fs::read(ECHO).unwrap());
    runner.notice(WAIT, loaded(&swap, hash_of(ECHO))).await;
    runner.until_settled("swap", &waiting, WAIT).await;
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_toml_changed_live_bad_is_rejected_good_applies_new_topic_and_priority() {
    let first = r#"
[[topic]]
name = "a"
handler = "echo.wasm"
priority = 10
"#;
    let project = Project::new("concurrency = 1", first);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;

    // a typo: rejected with its line, the running configuration stays
    project.write_config("concurrency = 1", &format!("{first}priorty = 5\n"));
    match runner
        .notice(WAIT, |n| matches!(n, Notice::ConfigRejected { .. }))
        .await
    {
        Notice::ConfigRejected { error } => assert!(
            error.contains("queues.toml:14:1:") && error.contains("priorty"),
            "{error}"
        ),
        _ => unreachable!(),
    }
    let id = enqueue(&queue, "a", ANY, 0, 0).await;
    runner.until_settled("a", &id, WAIT).await;

    // a new topic b above a, whose priority drops
    project.write_config(
        "concurrency = 1",
        r#"
[[topic]]
name = "a"
handler = "echo.wasm"
priority = 1

[[topic]]
name = "b"
handler = "echo.wasm"
priority = 10
"#,
    );
    runner.notice(WAIT, |n| *n == Notice::ConfigApplied).await;
    // both backlogged at the same instant: b drains first
    backlog(&queue, &["a", "b"], 20, now_ms() + 300).await;
    let events = runner
        .until(WAIT, |seen| {
            seen.iter().filter(|e| e.kind == EventKind::Acked).count() == 40
        })
        .await;
    let order = start_order(&events);
    assert_eq!(
        order,
        [vec!["b"; 20], vec!["a"; 20]].concat(),
        "b (priority 10) must drain before a (now priority 1)"
    );
    runner.stop().await;
}

#[test]
fn a_compiled_handler_is_loaded_from_the_cache_on_the_next_start() {
    let cache = tempfile::tempdir().unwrap();
    let dir = cache.path().join("compiled");
    let first = Runtime::new(1, Some(&dir)).unwrap();
    first.load(Path::new(ECHO)).unwrap();
    assert_eq!(first.cache_stats(), Some((0, 1)), "a cold cache compiles");
    drop(first);
    let second = Runtime::new(1, Some(&dir)).unwrap();
    let handler = second.load(Path::new(ECHO)).unwrap();
    assert_eq!(second.cache_stats(), Some((1, 0)), "a warm cache does not");
    assert_eq!(handler.hash(), hash_of(ECHO));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_reloaded_under_load_loses_and_repeats_no_job() {
    let topics = |concurrency: u32, timeout: &str| {
        format!(
            "[[topic]]\nname = \"echo\"\nhandler = \"probe.wasm\"\nconcurrency = {concurrency}\ntimeout = \"{timeout}\"\n"
        )
    };
    let project = Project::new("concurrency = 16", &topics(2, "5s"));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let n = 2000;
    // each job takes about 2 ms: at 2 at a time, seconds of work
    let jobs: Vec<hourglass::redis::NewJob> = (0..n)
        .map(|i| hourglass::redis::NewJob {
            id: Some(format!("j{i}")),
            payload: br#"{"spin_ms":2}"#.to_vec(),
            due_at_ms: 0,
            max_attempts: 0,
            ..Default::default()
        })
        .collect();
    queue
        .enqueue(&queue.keys("echo"), &jobs, now_ms())
        .await
        .unwrap();
    let mut events = runner
        .until(WAIT, |seen| {
            seen.iter().filter(|e| e.kind == EventKind::Acked).count() >= 200
        })
        .await;
    // mid-stream: more concurrency, another time limit
    project.write_config("concurrency = 16", &topics(8, "3s"));
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio::time::timeout_at(deadline, runner.notices.recv()).await {
            Ok(Ok(Notice::ConfigApplied)) => break,
            Ok(Ok(_)) => {}
            other => panic!("no reload: {other:?}"),
        }
    }
    let s = queue.stats(&queue.keys("echo"), now_ms()).await.unwrap();
    assert!(
        s.ready + s.running > 0,
        "the reload landed after the work was done: not under load"
    );
    events.extend(
        runner
            .until(WAIT, |seen| {
                seen.iter().filter(|e| e.kind == EventKind::Acked).count() + 200 >= n
            })
            .await,
    );
    // Redis empty, then every event sent until then is in
    events.extend(runner.after_drained(&queue, &["echo"], WAIT).await);
    let mut acks: HashMap<&str, usize> = HashMap::new();
    for e in events.iter().filter(|e| e.kind == EventKind::Acked) {
        *acks.entry(e.id.as_str()).or_default() += 1;
    }
    assert_eq!(acks.len(), n, "every job acked");
    assert!(acks.values().all(|&c| c == 1), "a job acked twice");
    let started = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Started { .. }))
        .count();
    assert_eq!(started, n, "a job ran twice");
    runner.stop().await;
}
