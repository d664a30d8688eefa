//! Outbound HTTP behind per-topic grants, against a real HTTP server on a
//! loopback port: granted calls go through and their answers reach the
//! handler; anything else is refused before it leaves the process; the
//! limits hold; the webhook handler turns statuses into ack, retry and
//! dead-letter; a JavaScript component importing wasi:http runs; grants
//! change live.

use std::time::Duration;

use hourglass::events::{Event, EventKind};
use test_support::{HttpServer, Reply};

use crate::util::{Project, Running, enqueue, eventually, is_final, of, retry_reasons, settled};

const WAIT: Duration = Duration::from_secs(30);

/// A project with one topic `js` served by the JavaScript probe, with these
/// extra topic lines (grants, limits).
fn js_project(topic_lines: &str) -> Project {
    let project = Project::new(
        "concurrency = 2",
        &format!(
            "[[topic]]\nname = \"js\"\nhandler = \"js_probe.wasm\"\nmax_attempts = 1\ntimeout = \"20s\"\n{topic_lines}\n"
        ),
    );
    std::fs::copy(
        test_support::components::JS_PROBE,
        project.handler("js_probe.wasm"),
    )
    .unwrap();
    project
}

fn fetch(url: &str) -> String {
    format!(r#"{{"fetch":"{url}","then":"fail"}}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_call_gets_its_answer_and_an_ungranted_one_never_leaves_the_process() {
    let server = HttpServer::start(vec![Reply::status(200, "hello from the server")]);
    let url = server.url();
    let project = Project::new(
        "concurrency = 4",
        &format!(
            r#"
[defaults]
max_attempts = 2
backoff = {{ base = "50ms" }}

[[topic]]
name = "granted"
handler = "probe.wasm"
grants = {{ http = ["{url}"] }}

[[topic]]
name = "bare"
handler = "probe.wasm"
"#
        ),
    );
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;

    let denied = enqueue(&queue, "bare", &fetch(&format!("{url}/orders/1")), 0, 0).await;
    let events = runner.until_settled("bare", &denied, WAIT).await;
    let retries = retry_reasons(&events, "bare", &denied);
    assert_eq!(retries.len(), 1, "{events:#?}");
    assert!(retries[0].contains("denied"), "{}", retries[0]);
    let dead = settled(&events, "bare", &denied).unwrap_err();
    assert!(dead.contains("denied"), "{dead}");
    assert!(server.received().is_empty(), "{:?}", server.received());

    let granted = enqueue(&queue, "granted", &fetch(&format!("{url}/orders/1")), 0, 1).await;
    let events = runner.until_settled("granted", &granted, WAIT).await;
    let reason = settled(&events, "granted", &granted).unwrap_err();
    assert!(
        reason.contains("fetched 200 hello from the server"),
        "{reason}"
    );
    let received = server.received();
    assert_eq!(received.len(), 1, "{received:?}");
    assert_eq!(
        (received[0].method.as_str(), received[0].path.as_str()),
        ("GET", "/orders/1")
    );

    let counts = runner.outbound.snapshot();
    assert_eq!(counts.get(&("bare".into(), "denied".into())), Some(&2));
    assert_eq!(counts.get(&("granted".into(), "200".into())), Some(&1));
    runner.stop().await;
}

/// A server that answers a GET at once and closes may be done before the
/// guest, descheduled right after handing the request over, gets back to
/// the request's (empty) body: the SDK finishes an empty body before the
/// request goes, so nothing of it can meet a connection that is gone (it
/// did: "connection reset" with the 200 already there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gets_answered_at_once_all_get_their_answer() {
    let server = HttpServer::start(vec![Reply::status(200, "at once")]);
    let url = server.url();
    let project = Project::new(
        "concurrency = 4",
        &format!(
            r#"
[[topic]]
name = "quick"
handler = "probe.wasm"
max_attempts = 1
grants = {{ http = ["{url}"] }}
"#
        ),
    );
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let mut ids = Vec::new();
    for i in 0..40 {
        ids.push(enqueue(&queue, "quick", &fetch(&format!("{url}/{i}")), 0, 0).await);
    }
    let events = runner
        .until(WAIT, |seen| {
            ids.iter().all(|id| {
                seen.iter()
                    .any(|e| e.topic == "quick" && &e.id == id && is_final(&e.kind))
            })
        })
        .await;
    for id in &ids {
        let reason = settled(&events, "quick", id).unwrap_err();
        assert!(reason.contains("fetched 200 at once"), "{reason}");
    }
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_opens_its_port_only_and_a_wildcard_not_the_bare_name() {
    let open = HttpServer::start(vec![Reply::status(200, "open")]);
    let other = HttpServer::start(vec![Reply::status(200, "other")]);
    let project = Project::new(
        "concurrency = 4",
        &format!(
            r#"
[defaults]
max_attempts = 1

[[topic]]
name = "t"
handler = "probe.wasm"
grants = {{ http = ["{}", "http://*.hooks.localhost:{}"] }}
"#,
            open.url(),
            other.port()
        ),
    );
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;

    let ids = [
        enqueue(&queue, "t", &fetch(&other.url()), 0, 0).await,
        enqueue(
            &queue,
            "t",
            &fetch(&format!("http://hooks.localhost:{}", other.port())),
            0,
            0,
        )
        .await,
        enqueue(&queue, "t", &fetch(&open.url()), 0, 0).await,
    ];
    let events = runner
        .until(WAIT, |seen| {
            ids.iter().all(|id| {
                seen.iter()
                    .any(|e| &e.id == id && matches!(e.kind, EventKind::Dead { .. }))
            })
        })
        .await;
    let other_port = settled(&events, "t", &ids[0]).unwrap_err();
    assert!(other_port.contains("denied"), "{other_port}");
    let bare_name = settled(&events, "t", &ids[1]).unwrap_err();
    assert!(bare_name.contains("denied"), "{bare_name}");
    let granted = settled(&events, "t", &ids[2]).unwrap_err();
    assert!(granted.contains("fetched 200 open"), "{granted}");
    assert!(other.received().is_empty(), "{:?}", other.received());
    assert_eq!(open.received().len(), 1);
    runner.stop().await;
}

fn webhook_topics(url: &str) -> String {
    format!(
        r#"
[[topic]]
name = "webhook"
handler = "webhook.wasm"
max_attempts = 5
backoff = {{ base = "50ms", factor = 1.0, jitter = 0.0 }}
grants = {{ http = ["{url}"] }}
"#
    )
}

fn hook(url: &str) -> String {
    format!(r#"{{"url":"{url}/hooks/order","body":{{"order":1042,"state":"cancelled"}}}}"#)
}

/// One webhook job against a receiver answering `script`: the receiver, the
/// events until the job settled, and the job's id.
async fn deliver(script: Vec<Reply>) -> (HttpServer, Vec<Event>, String) {
    let server = HttpServer::start(script);
    let project = Project::new("concurrency = 4", &webhook_topics(&server.url()));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let id = enqueue(&queue, "webhook", &hook(&server.url()), 0, 0).await;
    let events = runner.until_settled("webhook", &id, WAIT).await;
    runner.stop().await;
    (server, events, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_retries_5xx_and_acks_on_the_attempt_that_gets_a_2xx() {
    let (server, events, id) = deliver(vec![
        Reply::status(503, "busy"),
        Reply::status(503, "busy"),
        Reply::status(200, "thanks"),
    ])
    .await;
    assert_eq!(settled(&events, "webhook", &id), Ok(()));
    let acked = events
        .iter()
        .find(|e| e.id == id && e.kind == EventKind::Acked)
        .unwrap();
    assert_eq!(acked.attempt, 3);
    let retries = retry_reasons(&events, "webhook", &id);
    assert!(retries.iter().all(|r| r.contains("503")), "{retries:?}");
    let received = server.received();
    assert_eq!(received.len(), 3);
    for request in &received {
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/hooks/order");
        assert_eq!(request.header("content-type"), Some("application/json"));
        // a length, not a chunked upload: some servers refuse those (411)
        let length = request.body.len().to_string();
        assert_eq!(request.header("content-length"), Some(length.as_str()));
        assert_eq!(request.header("transfer-encoding"), None);
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body, serde_json::json!({"order":1042,"state":"cancelled"}));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_waits_as_long_as_retry_after_says() {
    let (_server, events, id) = deliver(vec![
        Reply::status(429, "slow down").with_header("retry-after", "2"),
        Reply::status(204, ""),
    ])
    .await;
    assert_eq!(settled(&events, "webhook", &id), Ok(()));
    let starts: Vec<u64> = of(&events, "webhook", &id)
        .into_iter()
        .filter_map(|k| match k {
            EventKind::Started { started_at_ms, .. } => Some(*started_at_ms),
            _ => None,
        })
        .collect();
    assert_eq!(starts.len(), 2, "{events:#?}");
    // the topic's backoff is 50 ms: only Retry-After explains the wait
    assert!(
        starts[1] - starts[0] >= 2000,
        "second attempt {} ms after the first",
        starts[1] - starts[0]
    );
    let next_due = of(&events, "webhook", &id)
        .into_iter()
        .find_map(|k| match k {
            EventKind::Retried { next_due_ms, .. } => Some(*next_due_ms),
            _ => None,
        });
    assert!(next_due.unwrap() >= starts[0] + 2000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_dead_letters_a_4xx_with_its_status_and_body() {
    let (server, events, id) =
        deliver(vec![Reply::status(404, "no such hook: /hooks/order")]).await;
    let reason = settled(&events, "webhook", &id).unwrap_err();
    assert!(
        reason.contains("answered 404: no such hook: /hooks/order"),
        "{reason}"
    );
    assert!(retry_reasons(&events, "webhook", &id).is_empty());
    assert_eq!(server.received().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_is_cut_off_by_the_time_limit_while_other_jobs_flow() {
    let server = HttpServer::start(vec![Reply::Hang]);
    let project = Project::new(
        "concurrency = 4",
        &format!(
            r#"
[[topic]]
name = "stuck"
handler = "probe.wasm"
timeout = "1500ms"
max_attempts = 1
http = {{ first_byte_timeout = "1h" }}
grants = {{ http = ["{}"] }}

[[topic]]
name = "echo"
handler = "echo.wasm"
"#,
            server.url()
        ),
    );
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let stuck = enqueue(&queue, "stuck", &fetch(&server.url()), 0, 0).await;
    // wait until the request is at the server, then send more work
    eventually(WAIT, "the request arrived", || async {
        match server.received().len() {
            0 => Err("no request".to_owned()),
            _ => Ok(()),
        }
    })
    .await;
    let mut echoes = Vec::new();
    for _ in 0..20 {
        echoes.push(enqueue(&queue, "echo", "hi", 0, 0).await);
    }
    let events = runner.until_settled("stuck", &stuck, WAIT).await;
    let reason = settled(&events, "stuck", &stuck).unwrap_err();
    assert!(
        reason.contains("time limit of 1s 500ms exceeded"),
        "{reason}"
    );
    let stuck_done = events
        .iter()
        .position(|e| e.id == stuck && matches!(e.kind, EventKind::Dead { .. }))
        .unwrap();
    for id in &echoes {
        let acked = events
            .iter()
            .position(|e| &e.id == id && e.kind == EventKind::Acked);
        assert!(
            acked.is_some_and(|at| at < stuck_done),
            "echo {id} was not acked while the stuck request waited"
        );
    }
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_over_the_cap_is_cut_off_without_being_read() {
    let server = HttpServer::start(vec![Reply::Stream {
        bytes: 256 << 20,
        declare_length: false,
    }]);
    let project = Project::new(
        "concurrency = 4",
        &format!(
            r#"
[[topic]]
name = "big"
handler = "probe.wasm"
max_attempts = 2
backoff = {{ base = "50ms" }}
http = {{ max_response = "1MiB" }}
grants = {{ http = ["{}"] }}
"#,
            server.url()
        ),
    );
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let id = enqueue(&queue, "big", &fetch(&server.url()), 0, 0).await;
    let events = runner.until_settled("big", &id, WAIT).await;
    let reason = settled(&events, "big", &id).unwrap_err();
    assert!(
        reason.contains("HTTP response body size exceeds limit"),
        "{reason}"
    );
    // the runner stopped reading: the server got rid of a sliver of the 512 MiB
    // it tried to send over two attempts (socket buffers hold a few MiB)
    let streamed = server.streamed();
    assert!(streamed < 64 << 20, "{streamed} bytes were read");

    // a declared length over the cap is refused before the body is read
    server.set_script(vec![Reply::Stream {
        bytes: 256 << 20,
        declare_length: true,
    }]);
    let id = enqueue(&queue, "big", &fetch(&server.url()), 0, 1).await;
    let events = runner.until_settled("big", &id, WAIT).await;
    let reason = settled(&events, "big", &id).unwrap_err();
    assert!(
        reason.contains("(268435456 bytes) is over the topic's limit (http.max_response)"),
        "{reason}"
    );
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_component_with_wasi_http_loads_and_calls_out() {
    let server = HttpServer::start(vec![Reply::status(200, "hello, javascript")]);
    let project = js_project(&format!(
        "memory = \"128MiB\"\ngrants = {{ http = [\"{}\"] }}",
        server.url()
    ));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let acked = enqueue(&queue, "js", "{}", 0, 0).await;
    let events = runner.until_settled("js", &acked, WAIT).await;
    assert_eq!(settled(&events, "js", &acked), Ok(()));
    let fetched = enqueue(&queue, "js", &fetch(&server.url()), 0, 0).await;
    let events = runner.until_settled("js", &fetched, WAIT).await;
    let reason = settled(&events, "js", &fetched).unwrap_err();
    assert!(reason.contains("fetched 200 hello, javascript"), "{reason}");
    assert_eq!(server.received().len(), 1);
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_change_live_with_the_configuration() {
    let server = HttpServer::start(vec![Reply::status(200, "live")]);
    let topic = |grants: &str| {
        format!(
            r#"
[[topic]]
name = "t"
handler = "probe.wasm"
max_attempts = 1
{grants}
"#
        )
    };
    let granted = topic(&format!("grants = {{ http = [\"{}\"] }}", server.url()));
    let project = Project::new("concurrency = 2", &topic(""));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let outcome = async |runner: &mut Running| {
        let id = enqueue(&queue, "t", &fetch(&server.url()), 0, 0).await;
        let events = runner.until_settled("t", &id, WAIT).await;
        settled(&events, "t", &id).unwrap_err()
    };

    assert!(outcome(&mut runner).await.contains("denied"));
    project.write_config("concurrency = 2", &granted);
    runner
        .notice(WAIT, |n| matches!(n, hourglass::Notice::ConfigApplied))
        .await;
    assert!(outcome(&mut runner).await.contains("fetched 200 live"));
    project.write_config("concurrency = 2", &topic(""));
    runner
        .notice(WAIT, |n| matches!(n, hourglass::Notice::ConfigApplied))
        .await;
    assert!(outcome(&mut runner).await.contains("denied"));
    assert_eq!(server.received().len(), 1);
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_trusts_a_topics_extra_ca_and_not_an_unknown_one() {
    let certs = tempfile::tempdir().unwrap();
    test_support::tls::write_certificates(certs.path());
    let server = HttpServer::start_tls(vec![Reply::status(200, "over tls")], certs.path());
    let url = server.url();
    let ca = certs.path().join("ca.crt");
    let project = Project::new(
        "concurrency = 2",
        &format!(
            r#"
[defaults]
max_attempts = 1

[[topic]]
name = "trusting"
handler = "probe.wasm"
grants = {{ http = ["{url}"] }}
http = {{ tls_ca = "{}" }}

[[topic]]
name = "system_roots_only"
handler = "probe.wasm"
grants = {{ http = ["{url}"] }}
"#,
            ca.display()
        ),
    );
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let id = enqueue(&queue, "trusting", &fetch(&url), 0, 0).await;
    let events = runner.until_settled("trusting", &id, WAIT).await;
    let reason = settled(&events, "trusting", &id).unwrap_err();
    assert!(reason.contains("fetched 200 over tls"), "{reason}");
    let id = enqueue(&queue, "system_roots_only", &fetch(&url), 0, 0).await;
    let events = runner.until_settled("system_roots_only", &id, WAIT).await;
    let reason = settled(&events, "system_roots_only", &id).unwrap_err();
    assert!(
        reason.to_lowercase().contains("tls") && !reason.contains("fetched"),
        "{reason}"
    );
    assert_eq!(
        server.received().len(),
        1,
        "only the trusted request got through"
    );
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_may_hold_only_max_concurrent_requests_open() {
    // answers take a second: the first two requests hold both slots while
    // the third is started
    let server = HttpServer::start(vec![Reply::Delay(1000, Box::new(Reply::status(200, "ok")))]);
    let url = server.url();
    let project = js_project(&format!(
        "http = {{ max_concurrent = 2 }}\ngrants = {{ http = [\"{url}\"] }}"
    ));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    // three GETs started at once: the third finds both slots taken
    let payload = format!(r#"{{"fetch_many":["{url}/1","{url}/2","{url}/3"]}}"#);
    let id = enqueue(&queue, "js", &payload, 0, 0).await;
    let events = runner.until_settled("js", &id, WAIT).await;
    let reason = settled(&events, "js", &id).unwrap_err();
    assert!(reason.contains("2 ok, 1 failed"), "{reason}");
    assert_eq!(
        server.received().len(),
        2,
        "the third never left the process"
    );
    let counts = runner.outbound.snapshot();
    assert_eq!(counts.get(&("js".into(), "error".into())), Some(&1));
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_javascript_exception_is_recorded_with_its_message() {
    let project = js_project("");
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let id = enqueue(
        &queue,
        "js",
        r#"{"throw":"order 1042 has no customer"}"#,
        0,
        0,
    )
    .await;
    let events = runner.until_settled("js", &id, WAIT).await;
    let reason = settled(&events, "js", &id).unwrap_err();
    assert!(
        reason.contains("uncaught exception: order 1042 has no customer"),
        "{reason}"
    );
    runner.stop().await;
}
