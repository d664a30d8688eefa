//! A handler that traps, overruns or over-allocates fails its attempt with a
//! reason, and never holds up other jobs.

use std::time::Duration;

use hourglass::events::EventKind;

use crate::util::{Project, Running, enqueue, eventually};

const TOPICS: &str = r#"
[defaults]
backoff = { base = "20ms", jitter = 0.0 }

[[topic]]
name = "panic"
handler = "panic.wasm"
max_attempts = 2

[[topic]]
name = "slow"
handler = "slow.wasm"
timeout = "300ms"
max_attempts = 1
concurrency = 1

[[topic]]
name = "membomb"
handler = "membomb.wasm"
memory = "16MiB"
max_attempts = 1

[[topic]]
name = "echo"
handler = "echo.wasm"
"#;

const WAIT: Duration = Duration::from_secs(20);

fn dead_reason(events: &[hourglass::events::Event], id: &str) -> String {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::Dead { reason } if e.id == id => Some(reason.clone()),
            _ => None,
        })
        .expect("dead event")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_is_a_failed_attempt_retried_then_dead_lettered() {
    let project = Project::new("concurrency = 2", TOPICS);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let id = enqueue(&queue, "panic", "x", 0, 0).await;
    let events = runner.until_settled("panic", &id, WAIT).await;
    let retried = events.iter().find_map(|e| match &e.kind {
        EventKind::Retried { reason, .. } if e.id == id && e.attempt == 1 => Some(reason.clone()),
        _ => None,
    });
    let retried = retried.expect("the first trap is retried");
    assert!(
        retried.contains("trapped") && retried.contains("handler panicked on job"),
        "{retried}"
    );
    let reason = dead_reason(&events, &id);
    assert!(
        reason.contains("attempts exhausted (2/2)") && reason.contains("attempt 2"),
        "{reason}"
    );
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overrunning_handler_is_stopped_and_other_jobs_keep_flowing() {
    // two slots: one is taken by the endless handler until it is stopped
    let project = Project::new("concurrency = 2", TOPICS);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let slow = enqueue(&queue, "slow", "{}", 0, 0).await;
    let mut echoes = Vec::new();
    for i in 0..40 {
        echoes.push(enqueue(&queue, "echo", &format!("{i}"), 0, 0).await);
    }
    let events = runner
        .until(WAIT, |seen| {
            seen.iter().any(|e| {
                e.id == slow && e.topic == "slow" && matches!(e.kind, EventKind::Dead { .. })
            }) && echoes.iter().all(|id| {
                seen.iter()
                    .any(|e| e.topic == "echo" && &e.id == id && e.kind == EventKind::Acked)
            })
        })
        .await;
    let reason = dead_reason(&events, &slow);
    assert!(reason.contains("time limit of 300ms exceeded"), "{reason}");
    // the echo jobs did not wait for the slow one to be stopped
    let slow_dead_at = events
        .iter()
        .position(|e| e.id == slow && matches!(e.kind, EventKind::Dead { .. }))
        .unwrap();
    let echoes_before = events[..slow_dead_at]
        .iter()
        .filter(|e| e.topic == "echo" && e.kind == EventKind::Acked)
        .count();
    assert!(
        echoes_before > 0,
        "no echo job ran while the slow one held a slot"
    );
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_bomb_is_stopped_at_the_limit() {
    let project = Project::new("concurrency = 2", TOPICS);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let id = enqueue(&queue, "membomb", "x", 0, 0).await;
    let events = runner.until_settled("membomb", &id, WAIT).await;
    let reason = dead_reason(&events, &id);
    assert!(
        reason.contains("memory limit of 16 MiB exceeded"),
        "{reason}"
    );
    // its cost says what it asked for, not the little it held before
    let view = queue
        .inspect(&queue.keys("membomb"), &id, hourglass::clock::now_ms())
        .await
        .unwrap()
        .expect("the dead letter");
    let hourglass::redis::JobState::Dead(info) = &view.state else {
        panic!("dead: {view:?}")
    };
    let peak = info
        .costs
        .last()
        .expect("its attempt's cost")
        .usage
        .memory_peak;
    assert!(
        peak > 16 << 20,
        "the recorded peak {peak} B is what the attempt asked for, past the 16 MiB limit"
    );
    // the runner is unharmed: the next job runs
    let next = enqueue(&queue, "echo", "after", 0, 0).await;
    runner.until_settled("echo", &next, WAIT).await;
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_instance_pool_releases_the_attempt_instead_of_failing_it() {
    use hourglass::config::{Grants, HttpGrant, HttpLimits};
    use hourglass::wasm::{Finish, HttpPolicy, JobInput, Runtime, Sandbox};
    use test_support::{HttpServer, Reply};
    // the first attempt holds the only slot while it waits on a request that
    // is never answered: the server seeing the request is the signal
    let server = HttpServer::start(vec![Reply::Hang]);
    let runtime = std::sync::Arc::new(Runtime::new(1, None).unwrap());
    let probe = runtime
        .load(std::path::Path::new(test_support::components::PROBE))
        .unwrap();
    let grants = std::sync::Arc::new(Grants {
        http: vec![HttpGrant::parse(&server.url()).unwrap()],
        ..Grants::default()
    });
    let sandbox = Sandbox {
        logs: 0,
        result_max: 64 << 10,
        reuse: None,
        journal: Default::default(),
        // long enough that the first attempt still holds the slot when the
        // second asks, however slowly a loaded machine reaches its request
        timeout: Duration::from_secs(90),
        cpu: None,
        memory: 16 << 20,
        grants: grants.clone(),
        may_enqueue: Vec::new().into(),
        max_payload: 1 << 20,
        http: std::sync::Arc::new(HttpPolicy::new(grants, HttpLimits::default())),
    };
    let input = |id: &str| JobInput {
        parent_result: None,
        trace: None,
        pass_through: None,
        journal: None,
        upstream: Default::default(),
        topic: "probe".into(),
        id: id.into(),
        attempt: 1,
        payload: format!(r#"{{"fetch":"{}"}}"#, server.url()).into_bytes(),
        max_attempts: 1,
        enqueued_at_ms: 0,
        due_at_ms: 0,
    };
    let first = {
        let (runtime, probe, sandbox) = (runtime.clone(), probe.clone(), sandbox.clone());
        let input = input("a");
        tokio::spawn(async move { runtime.run(&probe, input, &sandbox).await })
    };
    eventually(
        Duration::from_secs(20),
        "the first attempt started",
        || async {
            match server.received().len() {
                0 => Err("no request".to_owned()),
                _ => Ok(()),
            }
        },
    )
    .await;
    let second = runtime.run(&probe, input("b"), &sandbox).await.finish;
    assert!(
        matches!(second, Finish::NotStarted(_)),
        "a full pool must not fail the job: {second:?}"
    );
    drop(server); // the hanging request ends: the first attempt finishes (a retry)
    let first = first.await.unwrap().finish;
    assert!(matches!(first, Finish::Retry { .. }), "{first:?}");
}
