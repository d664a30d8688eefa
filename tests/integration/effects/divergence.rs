//! Where a journal stops: a divergence dead-lettered with where and what, or
//! live on, a body over the cap, a full journal.

use crate::util::{Api, Project, Running, enqueue, eventually, hourglass, settled};
use hourglass::redis::Queue;
use std::time::Duration;
use test_support::{HttpServer, Reply};

use super::*;

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
