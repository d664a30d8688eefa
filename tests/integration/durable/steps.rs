//! Durable steps: recorded once before a failing step, replayed after a
//! SIGKILL, clear errors for an oversize step or a repeated name, in Python and
//! JavaScript.

use crate::util::{Project, RUNNER_LOG, RunnerProcess, Running, enqueue, eventually, settled};
use hourglass::events::EventKind;
use std::time::Duration;
use test_support::{HttpServer, Reply};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_recorded_before_a_failing_step_run_once() {
    let (shop, _project, queue, mut running) = serving("concurrency = 2", "", "").await;
    let id = enqueue(
        &queue,
        "checkout",
        &order(&shop, r#", "email_fails": 2"#),
        0,
        0,
    )
    .await;
    let events = running
        .until_settled("checkout", &id, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "checkout", &id), Ok(()));
    assert_eq!(
        calls(&shop),
        [1, 1, 3, 0, 0],
        "charge and reserve ran once, the email three times"
    );
    let acked = events
        .iter()
        .find(|e| e.id == id && e.kind == EventKind::Acked)
        .unwrap();
    assert_eq!(acked.attempt, 3);
    assert!(
        !journal_exists(&queue, &id).await,
        "an acked job's journal is deleted with it"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_during_a_step_replays_the_steps_before_it() {
    // the email hangs until the runner is killed; after that the shop answers
    let ok = Reply::status(200, "ch_1");
    let shop = HttpServer::start(vec![ok.clone(), ok.clone(), Reply::Hang, ok]);
    let project = Project::new(
        "concurrency = 2\nlease_margin = \"500ms\"",
        &topics(&shop, ""),
    );
    let queue = project.queue().await;
    let first = RunnerProcess::launch(&project, RUNNER_LOG);
    let id = enqueue(&queue, "checkout", &order(&shop, ""), 0, 0).await;
    eventually(Duration::from_secs(60), "the email step began", || async {
        match calls(&shop) {
            [1, 1, 1, 0, 0] => Ok(()),
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
    first.kill(); // SIGKILL, inside step 3
    let mut second = Running::start(project.config()).await;
    let events = second
        .until_settled("checkout", &id, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "checkout", &id), Ok(()));
    assert_eq!(
        calls(&shop),
        [1, 1, 2, 0, 0],
        "charge and reserve ran once; the email, whose runner died mid-call, twice"
    );
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_step_and_a_repeated_name_are_clear_errors() {
    let topics = "[[topic]]\nname = \"probe\"\nhandler = \"probe.wasm\"\nmax_attempts = 2\n\
                  backoff = { base = \"50ms\", max = \"50ms\", jitter = 0.0 }\n";
    let project = Project::new("concurrency = 2", topics);
    let queue = project.queue().await;
    let mut running = Running::start(project.config()).await;
    let big = enqueue(
        &queue,
        "probe",
        r#"{"steps":[{"name":"big","bytes":300000}]}"#,
        0,
        0,
    )
    .await;
    let twice = enqueue(
        &queue,
        "probe",
        r#"{"steps":[{"name":"a","bytes":1},{"name":"a","bytes":1}]}"#,
        0,
        0,
    )
    .await;
    let events = running
        .until(Duration::from_secs(60), |seen| {
            [&big, &twice].iter().all(|id| {
                seen.iter()
                    .any(|e| &&e.id == id && crate::util::is_final(&e.kind))
            })
        })
        .await;
    let reason = settled(&events, "probe", &big).unwrap_err();
    assert!(
        reason.contains("result of 300000 bytes is over the limit of 262144 bytes"),
        "{reason}"
    );
    let reason = settled(&events, "probe", &twice).unwrap_err();
    assert!(
        reason.contains("step name \"a\" is used twice in one attempt"),
        "{reason}"
    );
    assert!(
        reason.starts_with("failed:"),
        "a repeated name fails for good: {reason}"
    );
    running.stop().await;
}

/// The same steps in Python and JavaScript: a runner killed during the
/// email step, then the email failing twice more: the charge and the
/// reservation each ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_javascript_steps_survive_a_sigkill_and_failures() {
    use test_support::components::{JS_SDK_PROBE, PY_PROBE};
    for (topic, file, component) in [
        ("py", "py_probe.wasm", PY_PROBE),
        ("js", "js_sdk_probe.wasm", JS_SDK_PROBE),
    ] {
        let ok = Reply::status(200, "ch_1");
        let shop = HttpServer::start(vec![ok.clone(), ok.clone(), Reply::Hang, ok]);
        let topics = format!(
            "[[topic]]\nname = \"{topic}\"\nhandler = \"{file}\"\nmax_attempts = 5\n\
             timeout = \"5s\"\nbackoff = {{ base = \"50ms\", max = \"50ms\", jitter = 0.0 }}\n\
             grants = {{ http = [\"{}\"] }}\n",
            shop.url()
        );
        let project = Project::new("concurrency = 2\nlease_margin = \"500ms\"", &topics);
        crate::util::add_handler(&project, file, component);
        let queue = project.queue().await;
        let first = RunnerProcess::launch(&project, RUNNER_LOG);
        let payload = format!(
            r#"{{"saga": {{"shop": "{}", "email_fails": 3}}}}"#,
            shop.url()
        );
        let id = enqueue(&queue, topic, &payload, 0, 0).await;
        eventually(Duration::from_secs(120), "the email step began", || async {
            match calls(&shop) {
                [1, 1, 1, 0, 0] => Ok(()),
                seen => Err(format!("{seen:?}")),
            }
        })
        .await;
        first.kill();
        let mut second = Running::start(project.config()).await;
        let events = second
            .until_settled(topic, &id, Duration::from_secs(120))
            .await;
        assert_eq!(settled(&events, topic, &id), Ok(()), "{topic}");
        assert_eq!(
            calls(&shop),
            [1, 1, 4, 0, 0],
            "{topic}: charge and reserve once; the email killed once, failed twice, sent"
        );
        let acked = events
            .iter()
            .find(|e| e.id == id && e.kind == EventKind::Acked);
        assert_eq!(acked.map(|e| e.attempt), Some(4), "{topic}");
        second.stop().await;
    }
}
