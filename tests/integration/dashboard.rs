//! The dashboard in a real headless Chromium (Debian's, over chromedriver):
//! it shows a topic's counts after jobs ran, a dead letter in its list,
//! a job that expired unrun is counted beside them, pause shows as paused, and retry moves the letter back; each topic's CPU
//! per second and memory p99, and a dead job's attempts with their costs;
//! a running job's progress, then its kept end and result; a durable job's
//! journal and what it waits for; a flow in layers with each job's state;
//! with 100 topics
//! and 10,000 dead letters every topic has its row and the letters come a
//! page at a time. A screenshot is
//! saved as a test artifact (`target/test-artifacts/dashboard.png`).

use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::redis::NewJob;
use serde_json::json;
use test_support::browser::{Browser, click};
use test_support::fantoccini::{Client, Locator};
use test_support::http_client::call;

use crate::util::{Project, Running, eventually};

const TOPICS: &str = "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n\n\
    [[topic]]\nname = \"panic\"\nhandler = \"panic.wasm\"\nmax_attempts = 1\n\n\
    [[topic]]\nname = \"probe\"\nhandler = \"probe.wasm\"\nresults = { keep = \"1h\" }\n\n\
    [http]\nlisten = \"127.0.0.1:0\"\n";

/// The text of the first element `css` finds, once `wanted` holds for it.
async fn until_text(c: &Client, css: &str, wanted: impl Fn(&str) -> bool) -> String {
    eventually(Duration::from_secs(30), css, || async {
        let text = match c.find(Locator::Css(css)).await {
            Ok(e) => e.text().await.ok(),
            Err(_) => None,
        };
        if let Some(text) = &text
            && wanted(text)
        {
            return Ok(text.clone());
        }
        let page = c.source().await.unwrap_or_default();
        Err(format!("text {text:?}; page:\n{page}"))
    })
    .await
}

/// The number of rows matching `css` and the first one's `data-id`, read
/// again if the page redraws the table in between (a stale element).
async fn rows_and_first_id(c: &Client, css: &str) -> (usize, String) {
    eventually(Duration::from_secs(30), css, || async {
        let rows = c
            .find_all(Locator::Css(css))
            .await
            .map_err(|e| e.to_string())?;
        let first = rows.first().ok_or("no rows")?;
        let id = first
            .attr("data-id")
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no data-id")?;
        Ok((rows.len(), id))
    })
    .await
}

/// Wait until nothing matches `css`.
async fn until_gone(c: &Client, css: &str) {
    eventually(Duration::from_secs(30), &format!("{css} gone"), || async {
        match c.find(Locator::Css(css)).await {
            Ok(_) => Err("still there".to_owned()),
            Err(_) => Ok(()),
        }
    })
    .await
}

/// Where test artifacts go: beside the build, kept after the run.
fn artifacts() -> std::path::PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_counts_dead_letters_pause_and_retry() {
    let project = Project::new("concurrency = 4", TOPICS);
    // a job whose deadline passes before any runner is up: it expires unrun
    let queue = project.queue().await;
    let now = now_ms();
    let late = NewJob {
        id: Some("late".into()),
        payload: b"x".to_vec(),
        due_at_ms: now,
        expires_at_ms: Some(now + 100),
        ..NewJob::default()
    };
    let keys = queue.keys("echo");
    queue.enqueue(&keys, &[late], now).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let running = Running::start(project.config()).await;
    let addr = running.http.unwrap().to_string();
    let post = |path: &'static str, body: serde_json::Value| {
        let addr = addr.clone();
        async move { call(&addr, "POST", path, None, Some(&body.to_string())).await }
    };
    let done: Vec<_> = (0..5).map(|i| json!({ "payload": i })).collect();
    assert_eq!(post("/api/topics/echo/jobs", done.into()).await.status, 200);
    let later = json!({ "id": "tomorrow", "payload": "x", "delay": "1d" });
    assert_eq!(post("/api/topics/echo/jobs", later).await.status, 201);
    let boom = json!({ "id": "boom-1", "payload": "x" });
    assert_eq!(post("/api/topics/panic/jobs", boom).await.status, 201);

    let browser = Browser::start().await;
    let c = &browser.client;
    c.goto(&format!("http://{addr}/")).await.unwrap();
    // counts after the jobs ran
    until_text(c, "tr[data-topic=echo] td.scheduled", |t| t == "1").await;
    until_text(c, "tr[data-topic=panic] td.dead", |t| t == "1").await;
    until_text(c, "tr[data-topic=echo] td.dead", |t| t == "1 (1 expired)").await;
    until_text(c, "#runners tbody", |t| {
        t.contains(&std::process::id().to_string())
    })
    .await;
    // what the attempts cost: CPU per second (from two polls) and memory p99
    until_text(c, "tr[data-topic=echo] td.memory", |t| t.ends_with(" MiB")).await;
    until_text(c, "tr[data-topic=echo] td.cpu-rate", |t| {
        t.parse::<f64>().is_ok_and(|cpu| cpu >= 0.0)
    })
    .await;

    // pause shows as paused
    click(c, "tr[data-topic=panic] button.pause").await;
    until_text(c, "tr[data-topic=panic] td.name", |t| t.contains("paused")).await;

    // the dead letter is listed with its reason and attempts
    click(c, "tr[data-topic=panic] a.dead").await;
    let row = until_text(c, "#dead tr[data-id=boom-1]", |t| t.contains("panicked")).await;
    assert!(row.contains("boom-1"), "{row}");
    let png = c.screenshot().await.unwrap();
    let shot = artifacts().join("dashboard.png");
    std::fs::write(&shot, &png).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");

    // retry moves it back: out of the dead list, waiting (the topic is paused)
    click(c, "#dead tr[data-id=boom-1] button.retry").await;
    until_gone(c, "#dead tr[data-id=boom-1]").await;
    until_text(c, "tr[data-topic=panic] td.ready", |t| t == "1").await;
    until_text(c, "tr[data-topic=panic] td.dead", |t| t == "0").await;

    // job lookup by id
    c.find(Locator::Css("#lookup-id"))
        .await
        .unwrap()
        .send_keys("tomorrow")
        .await
        .unwrap();
    click(c, "#lookup button").await;
    until_text(c, "#lookup-result", |t| t.contains("\"scheduled\"")).await;

    // resume: the job runs again and, the handler still panicking, returns
    click(c, "tr[data-topic=panic] button.resume").await;
    until_text(c, "tr[data-topic=panic] td.dead", |t| t == "1").await;

    // its dead letter's attempts (since the retry, which starts it afresh), with their costs
    c.find(Locator::Css("#lookup-topic"))
        .await
        .unwrap()
        .select_by_value("panic")
        .await
        .unwrap();
    let id = c.find(Locator::Css("#lookup-id")).await.unwrap();
    id.clear().await.unwrap();
    id.send_keys("boom-1").await.unwrap();
    click(c, "#lookup button").await;
    let cost = until_text(c, "#job-costs tbody tr[data-attempt='1']", |t| {
        t.contains(" ms") && t.contains("MiB")
    })
    .await;
    assert!(cost.starts_with('1'), "{cost}");

    // a running job's progress, live; once it ends, its kept end and result
    let long = json!({
        "id": "render-1",
        "payload": { "progress": [{ "percent": 40, "detail": { "stage": "render" }, "sleep_ms": 4000 }], "result": { "pages": 12 } },
    });
    assert_eq!(post("/api/topics/probe/jobs", long).await.status, 201);
    c.find(Locator::Css("#lookup-topic"))
        .await
        .unwrap()
        .select_by_value("probe")
        .await
        .unwrap();
    let id = c.find(Locator::Css("#lookup-id")).await.unwrap();
    id.clear().await.unwrap();
    id.send_keys("render-1").await.unwrap();
    click(c, "#lookup button").await;
    let said = until_text(c, "#job-progress-text", |t| t.contains("40%")).await;
    assert!(said.contains("render"), "{said}");
    until_text(c, "#lookup-result", |t| {
        t.contains("\"acked\"") && t.contains("\"pages\": 12")
    })
    .await;
    until_gone(c, "#job-progress").await;
    browser.close().await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_stays_usable_with_100_topics_and_10000_dead_letters() {
    let mut topics = String::from(
        "[[topic]]\nname = \"boom\"\nhandler = \"panic.wasm\"\nmax_attempts = 1\nconcurrency = 16\n\n\
         [http]\nlisten = \"127.0.0.1:0\"\n\n",
    );
    for t in 0..99 {
        topics.push_str(&format!(
            "[[topic]]\nname = \"t{t:02}\"\nhandler = \"echo.wasm\"\n\n"
        ));
    }
    let project = Project::new("concurrency = 16", &topics);
    let running = Running::start(project.config()).await;
    let addr = running.http.unwrap().to_string();
    let jobs: Vec<_> = (0..10_000)
        .map(|i| json!({ "id": format!("d{i:05}"), "payload": "x" }))
        .collect();
    let answer = call(
        &addr,
        "POST",
        "/api/topics/boom/jobs",
        None,
        Some(&serde_json::Value::from(jobs).to_string()),
    )
    .await;
    assert_eq!(answer.status, 200);
    // every one of them dies (the handler panics, one attempt)
    // a deadline, not a speed claim
    eventually(Duration::from_secs(120), "10,000 dead", || async {
        let topic = call(&addr, "GET", "/api/topics/boom", None, None).await;
        let body: serde_json::Value = serde_json::from_str(&topic.body).unwrap();
        match body["dead"] == 10_000 {
            true => Ok(()),
            false => Err(body.to_string()),
        }
    })
    .await;

    let browser = Browser::start().await;
    let c = &browser.client;
    c.goto(&format!("http://{addr}/")).await.unwrap();
    until_text(c, "tr[data-topic=boom] td.dead", |t| t == "10000").await;
    until_text(c, "tr[data-topic=t98] td.scheduled", |t| t == "0").await;
    let rows = c.find_all(Locator::Css("#topics tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 100, "every topic has its row");

    // the dead letters come a page at a time
    click(c, "tr[data-topic=boom] a.dead").await;
    until_text(c, "#dead-page", |t| t == "1–50 of 10000").await;
    let (rows, first_id) = rows_and_first_id(c, "#dead tbody tr").await;
    assert_eq!(rows, 50);
    click(c, "#dead-next").await;
    until_text(c, "#dead-page", |t| t == "51–100 of 10000").await;
    let (rows, second_id) = rows_and_first_id(c, "#dead tbody tr").await;
    assert_eq!(rows, 50);
    assert_ne!(first_id, second_id, "the next page shows other letters");
    browser.close().await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_a_durable_jobs_journal_and_what_it_waits_for() {
    let shop = test_support::HttpServer::start(vec![test_support::Reply::status(200, "ch_1")]);
    let topics = format!(
        "[[topic]]\nname = \"checkout\"\nhandler = \"checkout.wasm\"\n\
         grants = {{ http = [\"{}\"] }}\n\n[http]\nlisten = \"127.0.0.1:0\"\n",
        shop.url()
    );
    let project = Project::new("concurrency = 2", &topics);
    let running = Running::start(project.config()).await;
    let addr = running.http.unwrap().to_string();
    let job = json!({
        "id": "order-7",
        "payload": { "order": 7, "shop": shop.url(), "approval_ms": 3_600_000 },
    });
    let answer = call(
        &addr,
        "POST",
        "/api/topics/checkout/jobs",
        None,
        Some(&job.to_string()),
    )
    .await;
    assert_eq!(answer.status, 201, "{}", answer.body);

    let browser = Browser::start().await;
    let c = &browser.client;
    c.goto(&format!("http://{addr}/")).await.unwrap();
    until_text(c, "tr[data-topic=checkout] td.scheduled", |t| {
        t == "1 (1 suspended)"
    })
    .await;
    c.find(Locator::Css("#lookup-id"))
        .await
        .unwrap()
        .send_keys("order-7")
        .await
        .unwrap();
    click(c, "#lookup button").await;
    let waits = until_text(c, "#job-suspended", |t| t.contains("approved")).await;
    assert!(waits.contains("waits for signal \"approved\""), "{waits}");
    let charge = until_text(c, "#job-journal tr[data-step=charge]", |t| t.contains("B")).await;
    assert!(charge.starts_with("charge 6 B 1"), "{charge}");
    until_text(c, "#job-journal tr[data-step=reserve]", |t| {
        t.starts_with("reserve")
    })
    .await;
    browser.close().await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_draws_a_flow_in_layers_with_each_jobs_state() {
    let project = Project::new("concurrency = 2", TOPICS);
    let running = Running::start(project.config()).await;
    let addr = running.http.unwrap().to_string();
    let flow = json!({"id": "album", "jobs": [
        {"name": "a", "topic": "probe", "payload": {}},
        {"name": "b", "topic": "probe", "payload": {}, "after": ["a"]},
        {"name": "x", "topic": "probe", "payload": {"then": "fail"}, "max_attempts": 1, "after": ["a"]},
        {"name": "d", "topic": "probe", "payload": {},
         "after": ["b", {"name": "x", "policy": "ignore"}]}]});
    let answer = call(&addr, "POST", "/api/flows", None, Some(&flow.to_string())).await;
    assert_eq!(answer.status, 201, "{}", answer.body);

    let browser = Browser::start().await;
    let c = &browser.client;
    c.goto(&format!("http://{addr}/")).await.unwrap();
    c.find(Locator::Css("#flow-id"))
        .await
        .unwrap()
        .send_keys("album")
        .await
        .unwrap();
    click(c, "#flow-lookup button").await;
    let summary = until_text(c, "#flow-summary", |t| t.contains("done")).await;
    assert!(
        summary.starts_with("flow album: 4 jobs (3 acked, 1 dead)"),
        "{summary}"
    );
    let x = until_text(c, "#flow-graph [data-layer=\"1\"] [data-job=x]", |_| true).await;
    assert!(x.starts_with("x dead"), "{x}");
    let d = until_text(c, "#flow-graph [data-layer=\"2\"] [data-job=d]", |_| true).await;
    assert!(
        d.starts_with("d acked") && d.contains("after b, x (ignore)"),
        "{d}"
    );
    // a job of the flow, looked up (the dead one: kept in full), links to it
    c.find(Locator::Css("#lookup-topic"))
        .await
        .unwrap()
        .select_by_value("probe")
        .await
        .unwrap();
    c.find(Locator::Css("#lookup-id"))
        .await
        .unwrap()
        .send_keys("album/x")
        .await
        .unwrap();
    click(c, "#lookup button").await;
    until_text(c, "#job-flow", |t| t == "in flow album").await;
    browser.close().await;
    running.stop().await;
}

/// A topic with fairness has a keys button: the top keys with their jobs
/// queued and weight, the rest as "other"; pausing a key there holds its
/// jobs (and shows it paused), resuming runs them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_top_keys_and_pauses_one() {
    let topics = "[[topic]]\nname = \"exports\"\nhandler = \"echo.wasm\"\nfairness = { by = \"key\" }\n\n\
        [http]\nlisten = \"127.0.0.1:0\"\n";
    let project = Project::new("concurrency = 2", topics);
    let queue = project.queue().await;
    let k = queue.keys("exports");
    queue.tenants().pause(&k, "acme", true).await.unwrap();
    queue.tenants().set_weight(&k, "acme", 4).await.unwrap();
    let running = Running::start(project.config()).await;
    let addr = running.http.unwrap().to_string();
    let jobs: Vec<hourglass::redis::NewJob> = (0..3)
        .map(|i| hourglass::redis::NewJob {
            id: Some(format!("acme-{i}")),
            payload: b"{}".to_vec(),
            due_at_ms: 0,
            key: Some("acme".into()),
            ..Default::default()
        })
        .collect();
    queue
        .enqueue(&k, &jobs, hourglass::clock::now_ms())
        .await
        .unwrap();

    let browser = Browser::start().await;
    let c = &browser.client;
    c.goto(&format!("http://{addr}/")).await.unwrap();
    click(c, "#topics tr[data-topic=exports] button.keys").await;
    let row = until_text(c, "#keys tr[data-key=acme]", |t| t.contains("paused")).await;
    assert!(
        row.starts_with("acme") && row.contains(" 3 ") && row.contains(" 4 "),
        "{row}"
    );
    until_text(c, "#keys tr[data-key=\"(other)\"]", |t| {
        t.starts_with("other")
    })
    .await;
    click(c, "#keys tr[data-key=acme] button.resume").await;
    eventually(Duration::from_secs(30), "acme's jobs ran", || async {
        let s = queue
            .tenants()
            .stats(&k, hourglass::clock::now_ms(), 5)
            .await
            .unwrap();
        if s.queued == 0
            && queue
                .stats(&k, hourglass::clock::now_ms())
                .await
                .unwrap()
                .ready
                == 0
        {
            Ok(())
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;
    until_text(c, "#keys tr[data-key=acme]", |t| !t.contains("paused")).await;
    browser.close().await;
    running.stop().await;
}
