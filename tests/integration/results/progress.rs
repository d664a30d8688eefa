//! Progress over server-sent events, in order, a chatty handler throttled;
//! a follow-up given its parent's result across languages.

use crate::util::{
    Api, Project, RunnerProcess, Running, TOKEN, add_handler, eventually, hourglass_bin,
};
use serde_json::{Value, json};
use std::time::Duration;
use test_support::components::{JS_SDK_PROBE, PY_PROBE};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::*;

/// Read Server-Sent Events from `path` until an `end` event (or `within`):
/// (event, data as JSON) in order.
async fn sse(addr: &str, path: &str, within: Duration) -> Vec<(String, Value)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut lines = BufReader::new(stream).lines();
    let mut events = Vec::new();
    let mut name = String::new();
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let line = match tokio::time::timeout_at(deadline, lines.next_line()).await {
            Ok(Ok(Some(line))) => line,
            other => panic!("the event stream ended without `end` ({other:?}); saw {events:?}"),
        };
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_owned();
        } else if let Some(data) = line.strip_prefix("data: ") {
            events.push((name.clone(), serde_json::from_str(data).unwrap()));
            if name == "end" {
                return events;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_arrives_in_order_over_sse_and_a_chatty_handler_is_throttled() {
    let project = Project::new(
        "concurrency = 4",
        &format!(
            "[[topic]]\nname = \"probe\"\nhandler = \"probe.wasm\"\nresults = {{ keep = \"1h\" }}\n\n\
             [[topic]]\nname = \"py\"\nhandler = \"py.wasm\"\nresults = {{ keep = \"1h\" }}\n\n\
             [[topic]]\nname = \"js\"\nhandler = \"js.wasm\"\nresults = {{ keep = \"1h\" }}\n\n\
             [[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n\n{HTTP}"
        ),
    );
    add_handler(&project, "py.wasm", PY_PROBE);
    add_handler(&project, "js.wasm", JS_SDK_PROBE);
    let mut runner = RunnerProcess::start(&project);
    let addr = eventually(WAIT, "the runner's API address", || async {
        let log = runner.log();
        log.lines()
            .find_map(|l| l.split("API on http://").nth(1))
            .map(|a| a.split('/').next().unwrap().to_owned())
            .ok_or(log)
    })
    .await;
    let api = Api(addr.clone());
    let queue = project.queue().await;

    // three reports 400 ms apart, then a result: seen in order, then the end
    let steps = json!([
        { "percent": 10, "detail": { "stage": "fetch" }, "sleep_ms": 400 },
        { "percent": 50, "detail": { "stage": "render" }, "sleep_ms": 400 },
        { "percent": 90, "detail": { "stage": "upload" }, "sleep_ms": 400 },
    ]);
    let job = json!({ "id": "long", "payload": { "progress": steps, "result": { "url": "s3://r/1" } }, "delay": "1s" });
    assert_eq!(
        api.post("/api/topics/probe/jobs", &job.to_string())
            .await
            .status,
        201
    );
    let inspecting = {
        let project_dir = project.config_path();
        tokio::spawn(async move {
            // `inspect` while it runs shows the latest report
            eventually(WAIT, "inspect shows progress", || async {
                let out = tokio::process::Command::new(hourglass_bin())
                    .args(["inspect", "probe", "long", "--json", "--config"])
                    .arg(&project_dir)
                    .output()
                    .await
                    .unwrap();
                let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
                match v["progress"]["percent"].as_u64() {
                    Some(p) if p >= 10 => Ok(v),
                    _ => Err(String::from_utf8_lossy(&out.stdout).into_owned()),
                }
            })
            .await
        })
    };
    let events = sse(&addr, "/api/topics/probe/jobs/long/events", WAIT).await;
    let percents: Vec<u64> = events
        .iter()
        .filter(|(e, _)| e == "progress")
        .map(|(_, d)| d["percent"].as_u64().unwrap())
        .collect();
    assert_eq!(percents, [10, 50, 90], "{events:?}");
    let stages: Vec<&str> = events
        .iter()
        .filter_map(|(_, d)| d["detail"]["stage"].as_str())
        .collect();
    assert_eq!(stages, ["fetch", "render", "upload"]);
    let (last, end) = events.last().unwrap();
    assert_eq!(last, "end");
    assert_eq!(end["state"], "acked");
    assert_eq!(end["result"]["url"], "s3://r/1");
    let seen = inspecting.await.unwrap();
    assert_eq!(seen["progress"]["attempt"], 1, "{seen}");
    // the end cleared it
    assert!(
        queue
            .inspect(&queue.keys("probe"), "long", 0)
            .await
            .unwrap()
            .is_none()
    );

    // Python reports too; an attempt that fails is an `attempt` event
    let py = json!({ "id": "py-1", "payload": { "progress": [20, 80] }, "delay": "1s" });
    assert_eq!(
        api.post("/api/topics/py/jobs", &py.to_string())
            .await
            .status,
        201
    );
    let events = sse(&addr, "/api/topics/py/jobs/py-1/events", WAIT).await;
    let percents: Vec<u64> = events
        .iter()
        .filter(|(e, _)| e == "progress")
        .map(|(_, d)| d["percent"].as_u64().unwrap())
        .collect();
    assert_eq!(percents, [20, 80], "{events:?}");
    let retried = json!({ "id": "r-1", "payload": { "retry_in": 0.2, "reason": "busy" }, "max_attempts": 2, "delay": "1s" });
    assert_eq!(
        api.post("/api/topics/py/jobs", &retried.to_string())
            .await
            .status,
        201
    );
    let events = sse(&addr, "/api/topics/py/jobs/r-1/events", WAIT).await;
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(names, ["attempt", "end"], "{events:?}");
    assert_eq!(events[0].1["failure"]["error"], "busy", "{events:?}");
    assert_eq!(events.last().unwrap().1["state"], "dead", "{events:?}");

    // a handler reporting in a tight loop for 2 s: Redis sees a few writes a
    // second; another topic's job runs meanwhile; the runner stays healthy
    let mut conn = redis::Client::open(url_of(&project))
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    conn.subscribe(queue.keys("probe").events).await.unwrap();
    let chatty = json!({ "id": "chatty", "payload": { "chatty_ms": 2000 } });
    assert_eq!(
        api.post("/api/topics/probe/jobs", &chatty.to_string())
            .await
            .status,
        201
    );
    crate::util::until_running(&mut runner, &queue, "probe", WAIT).await;
    let quick = api
        .post(
            "/api/topics/echo/jobs",
            &json!({ "id": "quick", "payload": "hi" }).to_string(),
        )
        .await;
    assert_eq!(quick.status, 201);
    eventually(
        Duration::from_secs(5),
        "echo/quick ran while chatty reported",
        || async {
            match queue
                .inspect(&queue.keys("echo"), "quick", 0)
                .await
                .unwrap()
            {
                None => Ok(()),
                Some(v) => Err(format!("{v:?}")),
            }
        },
    )
    .await;
    let log = runner.logged("reported progress", WAIT).await;
    let reports: u64 = log
        .split("reported progress ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{log}"));
    let mut messages = conn.on_message();
    let mut published = 0;
    while let Ok(Some(msg)) = tokio::time::timeout(
        Duration::from_millis(1500),
        futures::StreamExt::next(&mut messages),
    )
    .await
    {
        let text: String = msg.get_payload().unwrap();
        if text.starts_with("chatty\n") && !text.contains("\"event\"") {
            published += 1;
        }
    }
    eprintln!("chatty: {reports} reports in 2 s, {published} written");
    assert!(
        reports >= 20_000,
        "the handler reported only {reports} times"
    );
    assert!(
        (4..=12).contains(&published),
        "{published} progress writes for {reports} reports in 2 s"
    );
    assert_eq!(api.get("/healthz").await.status, 200);
    runner.assert_alive();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_receives_its_parents_result_across_languages() {
    let project = Project::new(
        "concurrency = 4",
        "[[topic]]\nname = \"charge\"\nhandler = \"py.wasm\"\nmay_enqueue = [\"receipt\"]\n\n\
         [[topic]]\nname = \"receipt\"\nhandler = \"js.wasm\"\nresults = { keep = \"1h\" }\n\n\
         [[topic]]\nname = \"audit\"\nhandler = \"probe.wasm\"\nresults = { keep = \"1h\" }\n\n\
         [[topic]]\nname = \"pay\"\nhandler = \"probe.wasm\"\nmay_enqueue = [\"audit\"]\n",
    );
    add_handler(&project, "py.wasm", PY_PROBE);
    add_handler(&project, "js.wasm", JS_SDK_PROBE);
    let _running = Running::start(project.config()).await;
    let queue = project.queue().await;
    // Python charges and hands its receipt to a JavaScript follow-up; a
    // second follow-up without the flag gets nothing
    let charge = json!({
        "result": { "receipt": "r-42", "amount": 1999 },
        "follow_up": { "topic": "receipt", "payload": { "echo_parent": true }, "id": "mail-42", "with_result": true },
    });
    crate::util::enqueue(&queue, "charge", &charge.to_string(), 0, 0).await;
    // a follow-up exists once its parent acked: until then there is no such job
    let exists = |topic: &'static str, id: &'static str| {
        let queue = queue.clone();
        async move {
            eventually(WAIT, "the follow-up was delivered", || async {
                match queue.standing(&queue.keys(topic), id).await.unwrap() {
                    hourglass::redis::Standing::Unknown => Err("not yet".to_owned()),
                    _ => Ok(()),
                }
            })
            .await
        }
    };
    exists("receipt", "mail-42").await;
    let waited = queue
        .wait_for(&queue.keys("receipt"), "mail-42", WAIT)
        .await
        .unwrap();
    let hourglass::redis::Waited::Ended(end) = waited else {
        panic!("{waited:?}")
    };
    let result: Value = serde_json::from_slice(end.result.as_deref().unwrap()).unwrap();
    assert_eq!(
        result,
        json!({ "parent": { "receipt": "r-42", "amount": 1999 } })
    );
    // Rust: a follow-up with the flag sees the result, one without sees none
    let rust = json!({
        "result": { "ok": true },
        "follow_ups": [
            { "topic": "audit", "payload": "{\"echo_parent\":true}", "id": "with", "with_parent_result": true },
            { "topic": "audit", "payload": "{\"echo_parent\":true}", "id": "without" },
        ],
    });
    crate::util::enqueue(&queue, "pay", &rust.to_string(), 0, 0).await;
    for (id, parent) in [("with", json!({ "ok": true })), ("without", Value::Null)] {
        exists("audit", id).await;
        let waited = queue
            .wait_for(&queue.keys("audit"), id, WAIT)
            .await
            .unwrap();
        let hourglass::redis::Waited::Ended(end) = waited else {
            panic!("{id}: {waited:?}")
        };
        let result: Value = serde_json::from_slice(end.result.as_deref().unwrap()).unwrap();
        assert_eq!(result, json!({ "parent": parent }), "{id}");
    }
}
