//! Flows stopped part way: a cancel, `fail_fast`, and a dead dependency
//! retried so the flow resumes.

use crate::util::{Project, Running, end_of, hourglass, result_json, starts};
use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use hourglass::redis::EndState;
use hourglass::redis::flow::{FlowSpec, Policy};
use serde_json::json;
use std::time::Duration;

use super::*;

/// Whether any of `ids` started (in any topic).
fn any_started(events: &[hourglass::events::Event], ids: &[&str]) -> Vec<String> {
    events
        .iter()
        .filter(|e| ids.contains(&e.id.as_str()) && matches!(e.kind, EventKind::Started { .. }))
        .map(|e| e.id.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_flow_mid_way_cancels_every_job_not_started() {
    let project = Project::new("concurrency = 1", &crate::util::probe_topics(&["t"]));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let slow = json!({"sleep_ms": 1500});
    create(
        &queue,
        "mid",
        vec![
            job("a", "t", slow.clone(), &[]),
            job("b", "t", slow, &[]),
            job("c", "t", json!({}), &[("a", Policy::Require)]),
            job(
                "d",
                "t",
                json!({}),
                &[("c", Policy::Ignore), ("b", Policy::Ignore)],
            ),
        ],
    )
    .await;
    // one root runs (concurrency 1), the other waits in its topic
    let first = runner
        .until(WAIT, |seen| {
            !any_started(seen, &["mid/a", "mid/b"]).is_empty()
        })
        .await;
    let out = hourglass(&project, &["flow", "cancel", "mid"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("cancelled flow mid (2 jobs cancelled in their topics"),
        "{stdout}"
    );
    let later = runner.after_drained(&queue, &["t"], WAIT).await;
    // let a late start show itself: the sleeping attempt ends meanwhile
    tokio::time::sleep(Duration::from_secs(2)).await;
    let events = [first, later].concat();
    assert_eq!(
        any_started(&events, &["mid/a", "mid/b", "mid/c", "mid/d"]).len(),
        1,
        "{events:#?}"
    );
    let flow = queue.flows().show("mid").await.unwrap().unwrap();
    assert!(
        flow.cancelled_ms.is_some() && flow.done_ms.is_some(),
        "{flow:?}"
    );
    for j in &flow.jobs {
        assert_eq!(j.ended.as_deref(), Some("cancelled"), "{flow:?}");
    }
    let shown = hourglass(&project, &["flow", "show", "mid"]);
    assert!(String::from_utf8_lossy(&shown.stdout).contains("4 cancelled"));
    assert_eq!(
        hourglass(&project, &["flow", "cancel", "nope"])
            .status
            .code(),
        Some(3)
    );
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_fast_cancels_the_rest_when_one_job_dies() {
    let project = Project::new("concurrency = 2", &crate::util::probe_topics(&["t"]));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let plan = FlowSpec {
        id: Some("ff".into()),
        jobs: vec![
            job("x", "t", json!({"sleep_ms": 300, "then": "fail"}), &[]),
            job("s", "t", json!({"sleep_ms": 3000}), &[]),
            job(
                "w",
                "t",
                json!({}),
                &[("s", Policy::Ignore), ("x", Policy::Ignore)],
            ),
        ],
        fail_fast: true,
    }
    .plan(|| unreachable!())
    .unwrap();
    queue.flows().create(&plan, now_ms()).await.unwrap();
    let first = runner.until_settled("t", "ff/x", WAIT).await;
    let later = runner.after_drained(&queue, &["t"], WAIT).await;
    let events = [first, later].concat();
    assert!(
        any_started(&events, &["ff/w"]).is_empty(),
        "w ran: {events:#?}"
    );
    let flow = crate::util::flow_done(&queue, "ff").await;
    let states: Vec<_> = flow.jobs.iter().map(|j| j.ended.as_deref()).collect();
    assert_eq!(
        states,
        [Some("dead"), Some("cancelled"), Some("cancelled")],
        "{flow:?}"
    );
    runner.stop().await;
}

/// fail_fast: the end that dead-letters `x` also releases `q`, which waits
/// for nothing else (`ignore`); the cancel that end raises comes first, so
/// `q` never starts (it used to start ~5 ms later, then its ack was
/// discarded as cancelled while it ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_fast_never_starts_a_job_the_dead_job_released() {
    let project = Project::new("concurrency = 2", &crate::util::probe_topics(&["t"]));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let plan = FlowSpec {
        id: Some("ffq".into()),
        jobs: vec![
            job("x", "t", json!({"then": "fail"}), &[]),
            job("q", "t", json!({}), &[("x", Policy::Ignore)]),
        ],
        fail_fast: true,
    }
    .plan(|| unreachable!())
    .unwrap();
    queue.flows().create(&plan, now_ms()).await.unwrap();
    let first = runner.until_settled("t", "ffq/x", WAIT).await;
    let flow = crate::util::flow_done(&queue, "ffq").await;
    let later = runner.after_drained(&queue, &["t"], WAIT).await;
    let events = [first, later].concat();
    assert!(
        any_started(&events, &["ffq/q"]).is_empty(),
        "q started: {events:#?}"
    );
    let states: Vec<_> = flow.jobs.iter().map(|j| j.ended.as_deref()).collect();
    assert_eq!(states, [Some("dead"), Some("cancelled")], "{flow:?}");
    assert_eq!(
        flow.jobs[1].reason.as_deref(),
        Some("flow ffq was cancelled"),
        "{flow:?}"
    );
    runner.stop().await;
}

/// A dependency dead-lettered, its dependents dead-lettered unrun because
/// of it (and theirs in turn); the dependency retried from the dead-letter
/// set acks: the flow goes on, each blocked job running once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_a_dead_dependency_resumes_the_flow() {
    let data = tempfile::tempdir().unwrap();
    let mut toml = crate::util::probe_topics(&["t"]);
    toml = toml.replace(
        "handler = \"probe.wasm\"\n",
        &format!(
            "handler = \"probe.wasm\"\ngrants = {{ dirs = [{{ host = \"{}\", guest = \"/data\" }}] }}\n",
            data.path().display()
        ),
    );
    let project = Project::new("concurrency = 2", &toml);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    create(
        &queue,
        "resume",
        vec![
            // fails while /data/ok is missing
            job("x", "t", json!({"read": "/data/ok", "result": "x ok"}), &[]),
            job(
                "p",
                "t",
                json!({"echo_deps": true}),
                &[("x", Policy::Require)],
            ),
            job(
                "k",
                "t",
                json!({"result": "k ran"}),
                &[("p", Policy::Require)],
            ),
        ],
    )
    .await;
    let first = runner.until_settled("t", "resume/k", WAIT).await;
    assert_eq!(end_of(&queue, "t", "resume/p").await.state, EndState::Dead);
    assert_eq!(end_of(&queue, "t", "resume/k").await.state, EndState::Dead);
    std::fs::write(data.path().join("ok"), "yes").unwrap();
    let keys = queue.keys("t");
    let retried = queue
        .dead()
        .retry(&keys, &["resume/x".to_owned()], now_ms())
        .await
        .unwrap();
    assert_eq!(retried, ["resume/x"]);
    let second = runner.until_settled("t", "resume/k", WAIT).await;
    let later = runner.after_drained(&queue, &["t"], WAIT).await;
    let events = [first, second, later].concat();
    assert_eq!(starts(&events, "t", "resume/p"), 1, "{events:#?}");
    assert_eq!(starts(&events, "t", "resume/k"), 1, "{events:#?}");
    let p = end_of(&queue, "t", "resume/p").await;
    assert_eq!(p.state, EndState::Acked, "{p:?}");
    assert_eq!(result_json(&p)["deps"][0]["result"], "x ok");
    assert_eq!(result_json(&end_of(&queue, "t", "resume/k").await), "k ran");
    let flow = crate::util::flow_done(&queue, "resume").await;
    assert!(
        flow.jobs
            .iter()
            .all(|j| j.ended.as_deref() == Some("acked")),
        "{flow:?}"
    );
    runner.stop().await;
}
