//! Effects journals (`journal = "effects"`): a plain handler (no SDK steps)
//! retried or killed between two calls to a real local HTTP server sends
//! each call once; clock reads and random bytes come back the same on a
//! retry; a divergence fails the job (or, with `on_divergence = "live"`,
//! goes live); a body over the cap stops the journal; `hourglass journal`
//! and `inspect` list the calls; Python and JavaScript handlers; Redis
//! Cluster.

use std::time::Duration;

use hourglass::events::EventKind;
use hourglass::redis::{Queue, Standing};
use test_support::{HttpServer, Reply};

use crate::util::{
    Api, Project, RUNNER_LOG, RunnerProcess, Running, TOKEN, enqueue, eventually, hourglass,
    retry_reasons, settled,
};

/// `topics` with the API on a free port.
fn with_api(topics: String) -> String {
    format!("{topics}\n[http]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n")
}

/// The runner's /metrics.
async fn metrics(running: &Running) -> String {
    let api = Api(running.http.expect("[http]").to_string());
    let answer = api.get("/metrics").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.body
}

/// A topic `t` of `handler` journaling effects, granted `server`, results kept.
fn topic(server: &HttpServer, handler: &str, extra: &str) -> String {
    format!(
        "[[topic]]\nname = \"t\"\nhandler = \"{handler}\"\nmax_attempts = 5\ntimeout = \"5s\"\n\
         backoff = {{ base = \"50ms\", max = \"50ms\", jitter = 0.0 }}\n\
         grants = {{ http = [\"{}\"] }}\nresults = {{ keep = \"1h\" }}\n{extra}\n",
        server.url()
    )
}

/// How many requests the server got for each path, in the order named.
fn hits<const N: usize>(server: &HttpServer, paths: [&str; N]) -> [usize; N] {
    let received = server.received();
    paths.map(|p| received.iter().filter(|r| r.path.starts_with(p)).count())
}

fn calls(server: &HttpServer, paths: &[&str]) -> String {
    let list: Vec<String> = paths
        .iter()
        .map(|p| format!(r#"{{"url": "{}{p}", "body": "{p}"}}"#, server.url()))
        .collect();
    list.join(", ")
}

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

/// Enqueue `payload` to topic `t` and wait for the job to settle.
async fn run(
    queue: &Queue,
    running: &mut Running,
    payload: &str,
) -> (String, Vec<hourglass::events::Event>) {
    let id = enqueue(queue, "t", payload, 0, 0).await;
    let events = running
        .until_settled("t", &id, Duration::from_secs(60))
        .await;
    (id, events)
}

fn acked_on(events: &[hourglass::events::Event], id: &str) -> Option<u32> {
    events
        .iter()
        .find(|e| e.id == id && e.kind == EventKind::Acked)
        .map(|e| e.attempt)
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

/// A job whose call's body is read from a granted file, changed while the
/// first attempt waits for its answer: the retry asks for another request.
async fn diverging(extra: &str) -> (HttpServer, Project, Queue, Running, String) {
    diverging_then(extra, 1).await
}

/// [`diverging`], the job retrying its first `retries` attempts.
async fn diverging_then(
    extra: &str,
    retries: u32,
) -> (HttpServer, Project, Queue, Running, String) {
    let server = HttpServer::start(vec![Reply::Delay(1500, Box::new(Reply::status(200, "ok")))]);
    let data = tempfile::tempdir().unwrap().keep();
    std::fs::write(data.join("amount"), "10").unwrap();
    let grants = format!(
        "grants = {{ http = [\"{}\"], dirs = [{{ host = \"{}\", guest = \"/data\" }}] }}",
        server.url(),
        data.display()
    );
    let topics = topic(
        &server,
        "probe.wasm",
        &format!("journal = \"effects\"\n{extra}"),
    )
    .replace(
        &format!("grants = {{ http = [\"{}\"] }}", server.url()),
        &grants,
    );
    let project = Project::new("", &with_api(topics));
    let queue = project.queue().await;
    let running = Running::start(project.config()).await;
    let payload = format!(
        r#"{{"calls": [{{"url": "{}/charge", "body_file": "/data/amount"}}], "retry_first": {retries}}}"#,
        server.url()
    );
    let id = enqueue(&queue, "t", &payload, 0, 0).await;
    eventually(Duration::from_secs(30), "the charge was sent", || async {
        match hits(&server, ["/charge"]) {
            [1] => Ok(()),
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
    std::fs::write(data.join("amount"), "200").unwrap();
    (server, project, queue, running, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_divergence_dead_letters_the_job_with_where_and_what() {
    let (server, project, _queue, mut running, id) = diverging("").await;
    let events = running
        .until_settled("t", &id, Duration::from_secs(60))
        .await;
    let reason = settled(&events, "t", &id).unwrap_err();
    let url = format!("{}/charge", server.url());
    assert_eq!(
        reason,
        format!(
            "failed: journal divergence at effect 1: recorded POST {url} with a body of 2 bytes, now the same request with a different body of 3 bytes"
        )
    );
    assert_eq!(hits(&server, ["/charge"]), [1], "nothing sent twice");
    // the dead letter keeps its journal: the CLI lists the call
    let out = hourglass(&project, &["journal", "t", &id]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.contains(&format!("POST {url}  200  2 B  attempt 1")),
        "{text}"
    );
    let out = hourglass(&project, &["journal", "t", &id, "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let call = &json["effects"]["calls"][0];
    assert_eq!(
        (call["method"].as_str(), call["status"].as_u64()),
        (Some("POST"), Some(200))
    );
    assert_eq!(
        (call["url"].as_str(), call["attempt"].as_u64()),
        (Some(url.as_str()), Some(1))
    );
    let out = hourglass(&project, &["inspect", "t", &id]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("POST {url}")),
        "{out:?}"
    );
    let api = Api(running.http.unwrap().to_string());
    let view = api.get(&format!("/api/topics/t/jobs/{id}")).await;
    let view: serde_json::Value = serde_json::from_str(&view.body).unwrap();
    assert_eq!(
        view["journal"]["effects"]["calls"][0]["url"],
        url.as_str(),
        "{view:#}"
    );
    // --reset-journal starts it clean: the new amount is charged
    let out = hourglass(&project, &["dead", "retry", "t", &id, "--reset-journal"]);
    assert!(out.status.success(), "{out:?}");
    let events = running
        .until_settled("t", &id, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "t", &id), Ok(()));
    let bodies: Vec<Vec<u8>> = server.received().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.first().map(Vec::as_slice), Some(&b"10"[..]));
    assert!(bodies.iter().skip(1).all(|b| b == b"200"), "{bodies:?}");
    let metrics = metrics(&running).await;
    let line = r#"hourglass_journal_divergences_total{topic="t"} 1"#;
    assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_divergence_live_drops_the_journal_there_and_goes_on() {
    let (server, _project, _queue, mut running, id) = diverging("on_divergence = \"live\"").await;
    let events = running
        .until_settled("t", &id, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "t", &id), Ok(()));
    assert_eq!(acked_on(&events, &id), Some(2));
    let bodies: Vec<Vec<u8>> = server.received().into_iter().map(|r| r.body).collect();
    assert_eq!(
        bodies,
        vec![b"10".to_vec(), b"200".to_vec()],
        "sent live again"
    );
    running.stop().await;
}

/// What went live after a divergence is not recorded: the attempt after
/// it sends the diverging request live again (the journal stopped there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_divergence_live_records_nothing_from_the_divergence_on() {
    let (server, _project, _queue, mut running, id) =
        diverging_then("on_divergence = \"live\"", 2).await;
    let events = running
        .until_settled("t", &id, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "t", &id), Ok(()));
    assert_eq!(acked_on(&events, &id), Some(3));
    let bodies: Vec<Vec<u8>> = server.received().into_iter().map(|r| r.body).collect();
    assert_eq!(
        bodies,
        vec![b"10".to_vec(), b"200".to_vec(), b"200".to_vec()],
        "the diverging request went live on attempt 2 and, unrecorded, again on 3"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_cap_stops_the_journal_and_the_job_runs_live() {
    let big = Reply::Stream {
        bytes: 2 << 20,
        declare_length: true,
    };
    let server = HttpServer::start(vec![
        Reply::status(200, "ok"),
        big,
        Reply::status(200, "ok"),
    ]);
    let project = Project::new(
        "",
        &topic(&server, "probe.wasm", "journal = \"effects\"")
            .replace("max_attempts = 5", "max_attempts = 2"),
    );
    let queue = project.queue().await;
    let mut running = Running::start(project.config()).await;
    let payload = format!(
        r#"{{"calls": [{}, {{"method": "GET", "url": "{}/big"}}, {}], "retry_first": 5}}"#,
        calls(&server, &["/before"]),
        server.url(),
        calls(&server, &["/after"])
    );
    let (id, events) = run(&queue, &mut running, &payload).await;
    assert!(
        settled(&events, "t", &id).is_err(),
        "dead after two attempts"
    );
    assert_eq!(
        hits(&server, ["/before", "/big", "/after"]),
        [1, 2, 2],
        "the call before the big one replayed; from the big one on, live"
    );
    let (journal, _) = queue.journal(&queue.keys("t"), &id).await.unwrap();
    let json = journal.expect("a dead letter keeps its journal").to_json();
    let effects = &json["effects"];
    assert_eq!(
        effects["calls"].as_array().map(Vec::len),
        Some(1),
        "{effects}"
    );
    let stop = effects["stopped"]["reason"].as_str().unwrap_or_default();
    assert_eq!(stop, "the response body of effect 2 is over 1048576 bytes");
    running.stop().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_journal_stops_and_the_job_runs_live_from_there() {
    // 100 KiB answers (under the 1 MiB body cap) in a journal of at most 64 KiB
    let big = Reply::Stream {
        bytes: 100 << 10,
        declare_length: true,
    };
    let server = HttpServer::start(vec![Reply::status(200, "ok"), big]);
    let extra = "journal = \"effects\"\njournal_max = \"64KiB\"";
    let project = Project::new(
        "",
        &topic(&server, "probe.wasm", extra).replace("max_attempts = 5", "max_attempts = 2"),
    );
    let queue = project.queue().await;
    let mut running = Running::start(project.config()).await;
    let payload = format!(
        r#"{{"calls": [{}, {{"method": "GET", "url": "{}/big"}}], "retry_first": 5}}"#,
        calls(&server, &["/before"]),
        server.url()
    );
    let (id, events) = run(&queue, &mut running, &payload).await;
    assert!(
        settled(&events, "t", &id).is_err(),
        "dead after two attempts"
    );
    assert_eq!(hits(&server, ["/before", "/big"]), [1, 2]);
    let (journal, _) = queue.journal(&queue.keys("t"), &id).await.unwrap();
    let json = journal.expect("kept with the dead letter").to_json();
    let reason = json["effects"]["stopped"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        reason, "the job's journal is full (journal_max)",
        "{json:#}"
    );
    running.stop().await;
}
