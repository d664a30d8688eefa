//! Outbound calls bounded: a server that never answers cut off by the time
//! limit, a response over the cap, at most `max_concurrent` requests open.

use crate::util::{Project, Running, enqueue, eventually, settled};
use hourglass::events::EventKind;
use test_support::{HttpServer, Reply};

use super::*;

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
