//! The effects journal replays: each call sent once across retries and a
//! SIGKILL, clocks and random the same, in Python and JavaScript, on a Cluster,
//! with durable steps, a follow-up's id kept.

use crate::util::{
    Project, RUNNER_LOG, RunnerProcess, Running, enqueue, eventually, retry_reasons, settled,
};
use hourglass::events::EventKind;
use hourglass::redis::{Queue, Standing};
use std::time::Duration;
use test_support::{HttpServer, Reply};

use super::*;

async fn result_of(queue: &Queue, id: &str) -> serde_json::Value {
    match queue.standing(&queue.keys("t"), id).await.unwrap() {
        Standing::Ended(end) => serde_json::from_slice(&end.result.expect("a result")).unwrap(),
        other => panic!("t/{id} has not ended: {other:?}"),
    }
}

/// A job charging and reserving, then failing on attempts 1 and 2.
fn twice_failing(server: &HttpServer) -> String {
    format!(
        r#"{{"calls": [{}], "retry_first": 2}}"#,
        calls(server, &["/charge", "/reserve"])
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_handler_retried_sends_each_call_once() {
    let ok = Reply::status(200, "ok");
    let down = Reply::status(503, "down");
    let server = HttpServer::start(vec![ok.clone()]);
    // charge, reserve, then notify fails twice before it answers
    let flaky = HttpServer::start(vec![ok.clone(), ok.clone(), down.clone(), down, ok]);
    let topics = topic(&server, "probe.wasm", "journal = \"effects\"").replace(
        &format!("http = [\"{}\"]", server.url()),
        &format!("http = [\"{}\", \"{}\"]", server.url(), flaky.url()),
    );
    let project = Project::new("", &with_api(topics));
    let queue = project.queue().await;
    let mut running = Running::start(project.config()).await;
    // the handler fails after its calls on attempts 1 and 2
    let (first, events) = run(&queue, &mut running, &twice_failing(&server)).await;
    assert_eq!(settled(&events, "t", &first), Ok(()));
    assert_eq!(acked_on(&events, &first), Some(3));
    assert_eq!(
        hits(&server, ["/charge", "/reserve"]),
        [1, 1],
        "each call sent once"
    );
    // a call whose answer failed is the one made again, until it succeeds
    let second = enqueue(
        &queue,
        "t",
        &format!(
            r#"{{"calls": [{}]}}"#,
            calls(&flaky, &["/charge2", "/reserve2", "/notify2"])
        ),
        0,
        0,
    )
    .await;
    let events = running
        .until_settled("t", &second, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "t", &second), Ok(()));
    assert_eq!(acked_on(&events, &second), Some(3));
    assert_eq!(
        hits(&flaky, ["/charge2", "/reserve2", "/notify2"]),
        [1, 1, 3],
        "charge and reserve once; the failing notify made again each attempt"
    );
    let keys = queue.keys("t");
    assert!(
        queue.journal(&keys, &second).await.unwrap().0.is_none(),
        "deleted with the ack"
    );
    let metrics = metrics(&running).await;
    for line in [
        r#"hourglass_effects_total{topic="t",kind="http",how="replayed"} 8"#,
        r#"hourglass_effects_total{topic="t",kind="http",how="recorded"} 7"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_journal_every_retry_sends_every_call_again() {
    // the same first job on a topic that does not journal: the test above can fail
    let server = HttpServer::start(vec![Reply::status(200, "ok")]);
    let project = Project::new("", &topic(&server, "probe.wasm", ""));
    let queue = project.queue().await;
    let mut running = Running::start(project.config()).await;
    let (id, events) = run(&queue, &mut running, &twice_failing(&server)).await;
    assert_eq!(settled(&events, "t", &id), Ok(()));
    assert_eq!(hits(&server, ["/charge", "/reserve"]), [3, 3]);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_between_two_calls_sends_the_first_once() {
    let ok = Reply::status(200, "ok");
    // the reservation hangs until the runner is killed
    let server = HttpServer::start(vec![ok.clone(), Reply::Hang, ok]);
    let project = Project::new(
        "concurrency = 2\nlease_margin = \"500ms\"",
        &topic(&server, "probe.wasm", "journal = \"effects\""),
    );
    let queue = project.queue().await;
    let first = RunnerProcess::launch(&project, RUNNER_LOG);
    let payload = format!(
        r#"{{"calls": [{}]}}"#,
        calls(&server, &["/charge", "/reserve"])
    );
    let id = enqueue(&queue, "t", &payload, 0, 0).await;
    eventually(
        Duration::from_secs(60),
        "the reservation was sent",
        || async {
            match hits(&server, ["/charge", "/reserve"]) {
                [1, 1] => Ok(()),
                seen => Err(format!("{seen:?}")),
            }
        },
    )
    .await;
    first.kill(); // SIGKILL between the charge's answer and the reservation's
    let mut second = Running::start(project.config()).await;
    let events = second
        .until_settled("t", &id, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "t", &id), Ok(()));
    assert_eq!(
        hits(&server, ["/charge", "/reserve"]),
        [1, 2],
        "the charge replayed; the reservation, whose answer was lost with the runner, sent again"
    );
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clock_and_random_reads_come_back_the_same_on_a_retry() {
    let server = HttpServer::start(vec![Reply::status(200, "ok")]);
    for (journal, same) in [("journal = \"effects\"", true), ("", false)] {
        let project = Project::new("", &topic(&server, "probe.wasm", journal));
        let queue = project.queue().await;
        let mut running = Running::start(project.config()).await;
        let id = enqueue(&queue, "t", r#"{"stamp": true, "retry_first": 1}"#, 0, 0).await;
        let events = running
            .until_settled("t", &id, Duration::from_secs(60))
            .await;
        assert_eq!(settled(&events, "t", &id), Ok(()));
        let reasons = retry_reasons(&events, "t", &id);
        let first = reasons[0]
            .split("stamp ")
            .nth(1)
            .expect("a stamp")
            .to_owned();
        let last = result_of(&queue, &id).await["stamp"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(first == last, same, "{journal:?}: {first} then {last}");
        running.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_javascript_handlers_replay_calls_clocks_and_random() {
    use test_support::components::{JS_SDK_PROBE, PY_PROBE};
    for (file, component) in [
        ("py_probe.wasm", PY_PROBE),
        ("js_sdk_probe.wasm", JS_SDK_PROBE),
    ] {
        let server = HttpServer::start(vec![Reply::status(200, "ok")]);
        let project = Project::new("", &topic(&server, file, "journal = \"effects\""));
        crate::util::add_handler(&project, file, component);
        let queue = project.queue().await;
        let mut running = Running::start(project.config()).await;
        let payload = format!(
            r#"{{"plain": {{"shop": "{}", "fail_first": 2}}}}"#,
            server.url()
        );
        let id = enqueue(&queue, "t", &payload, 0, 0).await;
        let events = running
            .until_settled("t", &id, Duration::from_secs(120))
            .await;
        assert_eq!(settled(&events, "t", &id), Ok(()), "{file}");
        assert_eq!(acked_on(&events, &id), Some(3), "{file}");
        assert_eq!(hits(&server, ["/charge", "/reserve"]), [1, 1], "{file}");
        let reasons = retry_reasons(&events, "t", &id);
        let stamps: Vec<&str> = reasons
            .iter()
            .filter_map(|r| r.split("stamp ").nth(1))
            .collect();
        let last = result_of(&queue, &id).await["stamp"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            stamps,
            vec![last.as_str(); 2],
            "{file}: the clock and random bytes replayed"
        );
        running.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_replay_on_redis_cluster() {
    let cluster = test_support::cluster::RedisCluster::start();
    let server = HttpServer::start(vec![Reply::status(200, "ok")]);
    let project = Project::on_cluster(
        cluster.urls(),
        "",
        &topic(&server, "probe.wasm", "journal = \"effects\""),
    );
    let queue = project.queue().await;
    let mut running = Running::start(project.config()).await;
    let payload = format!(
        r#"{{"calls": [{}], "stamp": true, "retry_first": 2}}"#,
        calls(&server, &["/charge", "/reserve"])
    );
    let (id, events) = run(&queue, &mut running, &payload).await;
    assert_eq!(settled(&events, "t", &id), Ok(()));
    assert_eq!(hits(&server, ["/charge", "/reserve"]), [1, 1]);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_steps_and_sleeps_compose_with_the_effects_journal() {
    // the checkout saga: charge and reserve are steps; the email step's call
    // succeeds, then the step fails on attempts 1 and 2 (so it is never
    // recorded before attempt 3): its call inside is replayed from the effects
    // journal, and a durable sleep between the steps still holds no attempt
    let shop = HttpServer::start(vec![Reply::status(200, "ch_1")]);
    let topics =
        topic(&shop, "checkout.wasm", "journal = \"effects\"").replace("\"t\"", "\"checkout\"");
    let project = Project::new("", &topics);
    let queue = project.queue().await;
    let mut running = Running::start(project.config()).await;
    let payload = format!(
        r#"{{"order": 1042, "shop": "{}", "email_fails": 2, "sleep_ms": 300}}"#,
        shop.url()
    );
    let id = enqueue(&queue, "checkout", &payload, 0, 0).await;
    let events = running
        .until_settled("checkout", &id, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "checkout", &id), Ok(()));
    assert_eq!(acked_on(&events, &id), Some(3));
    assert!(
        events
            .iter()
            .any(|e| e.id == id && matches!(e.kind, EventKind::Suspended { .. })),
        "the durable sleep suspended the job"
    );
    assert_eq!(
        hits(&shop, ["/charge", "/reserve", "/email"]),
        [1, 1, 1],
        "the steps replayed, and the email step's call from the effects journal"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_keeps_the_id_its_first_attempt_was_given() {
    let server = HttpServer::start(vec![Reply::status(200, "ok")]);
    let topics = format!(
        "{}\n[[topic]]\nname = \"next\"\nhandler = \"probe.wasm\"\n",
        topic(
            &server,
            "probe.wasm",
            "journal = \"effects\"\nmay_enqueue = [\"next\"]"
        )
    );
    let project = Project::new("", &topics);
    let queue = project.queue().await;
    let mut running = Running::start(project.config()).await;
    let payload = r#"{"follow_ups": [{"topic": "next", "payload": "{}"}], "retry_first": 1}"#;
    let (id, events) = run(&queue, &mut running, payload).await;
    assert_eq!(settled(&events, "t", &id), Ok(()));
    let reasons = retry_reasons(&events, "t", &id);
    let first = reasons[0]
        .split("follow-ups ")
        .nth(1)
        .expect("an id")
        .to_owned();
    // the follow-up enqueued at the ack carries the id attempt 1 was handed
    let next = running
        .until_settled("next", &first, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&next, "next", &first), Ok(()));
    running.stop().await;
}
