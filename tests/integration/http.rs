//! Outbound HTTP behind per-topic grants, against a real HTTP server on a
//! loopback port: granted calls go through and their answers reach the
//! handler; anything else is refused before it leaves the process; the
//! limits hold; the webhook handler turns statuses into ack, retry and
//! dead-letter; a JavaScript component importing wasi:http runs; grants
//! change live.

use std::time::Duration;

use hourglass::events::EventKind;
use test_support::{HttpServer, Reply};

use crate::util::{Project, Running, enqueue, is_final, retry_reasons, settled};

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

mod bounds;
mod webhook;
