//! The console in a real headless Chromium (Debian's, over chromedriver):
//! every view loads from its URL (and again after a reload), each saved as
//! a screenshot (`target/test-artifacts/console-*.png`, copied into
//! `docs/src/`); topics with their counts, pause, a dead letter browsed and
//! retried from its page; a job's attempts with their costs, its progress
//! live, then its kept end and result; with 100 topics and 100,000 dead
//! letters every topic has its row and the letters come 50 a page from a
//! cursor that survives a reload, and an id prefix finds its ten.
//! `console.rs` has the durable job, the flow graph, bulk actions and the
//! read-only token.

use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::redis::NewJob;
use serde_json::json;
use test_support::browser::{Browser, click};
use test_support::fantoccini::{Client, Locator};
use test_support::http_client::call;

use crate::util::{Project, Running, dead_letters, eventually};

const TOPICS: &str = "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n\n\
    [[topic]]\nname = \"panic\"\nhandler = \"panic.wasm\"\nmax_attempts = 1\n\n\
    [[topic]]\nname = \"probe\"\nhandler = \"probe.wasm\"\nresults = { keep = \"1h\" }\n\n\
    [[topic]]\nname = \"exports\"\nhandler = \"echo.wasm\"\nfairness = { by = \"key\" }\n\n\
    [http]\nlisten = \"127.0.0.1:0\"\n";

/// The text of the first element `css` finds, once `wanted` holds for it.
pub async fn until_text(c: &Client, css: &str, wanted: impl Fn(&str) -> bool) -> String {
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

/// The ids (`data-id`) of the rows `css` finds, read again if the page
/// redraws the table in between (a stale element).
pub async fn row_ids(c: &Client, css: &str) -> Vec<String> {
    eventually(Duration::from_secs(30), css, || async {
        let rows = c
            .find_all(Locator::Css(css))
            .await
            .map_err(|e| e.to_string())?;
        let mut ids = Vec::new();
        for row in rows {
            let id = row.attr("data-id").await.map_err(|e| e.to_string())?;
            ids.push(id.ok_or("no data-id")?);
        }
        if ids.is_empty() {
            return Err("no rows".into());
        }
        Ok(ids)
    })
    .await
}

/// Open the console at `#/{route}` of the runner at `addr`.
pub async fn open(c: &Client, addr: &str, route: &str) {
    c.goto(&format!("http://{addr}/#/{route}")).await.unwrap();
    // the console's confirmations are the operator's; the test says yes
    c.execute("window.confirm = () => true", vec![])
        .await
        .unwrap();
}

/// Where test artifacts go: beside the build, kept after the run.
pub fn artifacts() -> std::path::PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let dir = target.join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Save what the browser shows as `console-{name}.png`.
pub async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    std::fs::write(artifacts().join(format!("console-{name}.png")), &png).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_view_of_the_console_loads_from_its_url() {
    let project = Project::new("concurrency = 4", TOPICS);
    let running = Running::start(project.config()).await;
    let addr = running.http.unwrap().to_string();
    let post = |path: &'static str, body: serde_json::Value| {
        let addr = addr.clone();
        async move { call(&addr, "POST", path, None, Some(&body.to_string())).await }
    };
    let done: Vec<_> = (0..5).map(|i| json!({ "payload": { "n": i } })).collect();
    assert_eq!(post("/api/topics/echo/jobs", done.into()).await.status, 200);
    let later = json!({ "id": "tomorrow", "payload": { "order": 1 }, "delay": "1d" });
    assert_eq!(post("/api/topics/echo/jobs", later).await.status, 201);
    let boom = json!({ "id": "boom-1", "payload": "x" });
    assert_eq!(post("/api/topics/panic/jobs", boom).await.status, 201);
    let flow = json!({"id": "album", "jobs": [
        {"name": "a", "topic": "probe", "payload": {}},
        {"name": "b", "topic": "probe", "payload": {}, "after": ["a"]}]});
    assert_eq!(post("/api/flows", flow).await.status, 201);

    let browser = Browser::start().await;
    let c = &browser.client;
    // each view, its URL and what shows it loaded
    let views: &[(&str, &str, &str, &str)] = &[
        ("topics", "topics", "tr[data-topic=panic] td.dead", "1"),
        (
            "topic",
            "topic/echo",
            "#topic-counts .tile.scheduled strong",
            "1",
        ),
        (
            "browse",
            "topic/panic/dead",
            "#browse tr[data-id=boom-1]",
            "boom-1",
        ),
        ("job", "job/panic/boom-1", "#job-state", "dead"),
        ("flows", "flows", "#flows tr[data-flow=album]", "album"),
        ("flow", "flow/album", "#flow-graph [data-job=b]", "acked"),
        ("tenants", "tenants", "#fair-topics", "exports"),
        ("keys", "tenants/exports", "#keys", "other"),
        (
            "rollouts",
            "rollouts",
            "#rollouts tr[data-topic=echo]",
            "echo",
        ),
        (
            "versions",
            "rollouts/echo",
            "#rollout tr.version",
            "version",
        ),
        (
            "runners",
            "runners",
            "#runners tbody",
            &std::process::id().to_string(),
        ),
    ];
    for (name, route, css, holds) in views {
        open(c, &addr, route).await;
        until_text(c, css, |t| t.contains(holds)).await;
        // a reload lands on the same view
        c.refresh().await.unwrap();
        until_text(c, css, |t| t.contains(holds)).await;
        screenshot(c, name).await;
    }
    // a route that is none says so
    open(c, &addr, "nowhere/at/all").await;
    until_text(c, "#not-found", |t| t.contains("no view at #/nowhere")).await;
    // dark theme, by its button, kept over a reload
    open(c, &addr, "topics").await;
    click(c, "#theme").await;
    c.refresh().await.unwrap();
    let theme = c
        .execute("return document.documentElement.dataset.theme", vec![])
        .await
        .unwrap();
    assert_eq!(theme, json!("dark"));
    until_text(c, "tr[data-topic=panic] td.dead", |t| t == "1").await;
    screenshot(c, "topics-dark").await;
    browser.close().await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_counts_pause_a_dead_letter_retried_and_a_jobs_story() {
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
    open(c, &addr, "topics").await;
    until_text(c, "tr[data-topic=echo] td.scheduled", |t| t == "1").await;
    until_text(c, "tr[data-topic=echo] td.dead", |t| t == "1 (1 expired)").await;
    until_text(c, "tr[data-topic=echo] td.memory", |t| t.ends_with(" MiB")).await;
    until_text(c, "tr[data-topic=echo] td.cpu-rate", |t| {
        t.parse::<f64>().is_ok_and(|cpu| cpu >= 0.0)
    })
    .await;
    // pause shows as paused
    click(c, "tr[data-topic=panic] button.pause").await;
    until_text(c, "tr[data-topic=panic] td.name", |t| t.contains("paused")).await;
    // the dead count opens the topic's dead letters; the id, the job's page
    until_text(c, "tr[data-topic=panic] td.dead", |t| t == "1").await;
    click(c, "tr[data-topic=panic] a.dead").await;
    let row = until_text(c, "#browse tr[data-id=boom-1]", |t| t.contains("panicked")).await;
    assert!(row.contains("boom-1"), "{row}");
    click(c, "#browse tr[data-id=boom-1] a.job").await;
    let cost = until_text(c, "#job-costs tbody tr[data-attempt='1']", |t| {
        t.contains(" ms") && t.contains("MiB")
    })
    .await;
    assert!(cost.starts_with("1 dead"), "{cost}");
    until_text(c, "#job-timeline .lane[data-attempt='1']", |t| {
        t.contains("dead")
    })
    .await;
    // retry from its page: waiting again (the topic is paused)
    click(c, "#job-actions button.retry").await;
    until_text(c, "#job-state", |t| t == "ready").await;
    // resume: it runs again and, the handler still panicking, dies again
    open(c, &addr, "topics").await;
    click(c, "tr[data-topic=panic] button.resume").await;
    open(c, &addr, "job/panic/boom-1").await;
    until_text(c, "#job-state", |t| t == "dead").await;

    // a running job's progress, live; once it ends, its kept end and result
    let long = json!({
        "id": "render-1",
        "payload": { "progress": [{ "percent": 40, "detail": { "stage": "render" }, "sleep_ms": 4000 }], "result": { "pages": 12 } },
    });
    assert_eq!(post("/api/topics/probe/jobs", long).await.status, 201);
    open(c, &addr, "job/probe/render-1").await;
    let said = until_text(c, "#job-progress-text", |t| t.contains("40%")).await;
    assert!(said.contains("render"), "{said}");
    until_text(c, "#job-state", |t| t == "acked").await;
    until_text(c, "#job-result", |t| t.contains("\"pages\": 12")).await;
    until_text(c, "#job-costs tbody tr[data-attempt='1']", |t| {
        t.contains("acked")
    })
    .await;
    browser.close().await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_pages_100000_dead_letters_of_one_of_100_topics() {
    let mut topics = String::from(
        "[[topic]]\nname = \"boom\"\nhandler = \"panic.wasm\"\nmax_attempts = 1\n\
         dead_letter = { keep = 1000000 }\n\n[http]\nlisten = \"127.0.0.1:0\"\n\n",
    );
    for t in 0..99 {
        topics.push_str(&format!(
            "[[topic]]\nname = \"t{t:02}\"\nhandler = \"echo.wasm\"\n\n"
        ));
    }
    let project = Project::new("concurrency = 4", &topics);
    // dead before any runner is up (straight through the pipeline)
    let queue = project.queue().await;
    dead_letters(&queue, "boom", "d", 100_000, now_ms()).await;
    let running = Running::start(project.config()).await;
    let addr = running.http.unwrap().to_string();

    let browser = Browser::start().await;
    let c = &browser.client;
    open(c, &addr, "topics").await;
    until_text(c, "tr[data-topic=boom] td.dead", |t| t == "100000").await;
    until_text(c, "tr[data-topic=t98] td.scheduled", |t| t == "0").await;
    let rows = c.find_all(Locator::Css("#topics tbody tr")).await.unwrap();
    assert_eq!(rows.len(), 100, "every topic has its row");

    // the dead letters, newest first, 50 a page
    click(c, "tr[data-topic=boom] a.dead").await;
    until_text(c, "#browse-page", |t| t.starts_with("page 1 · 50 jobs")).await;
    let first = row_ids(c, "#browse tbody tr").await;
    assert_eq!(first.len(), 50);
    assert_eq!(first[0], "d099999", "the newest first");
    click(c, "#browse-next").await;
    until_text(c, "#browse-page", |t| t.starts_with("page 2 · 50 jobs")).await;
    let second = row_ids(c, "#browse tbody tr").await;
    assert_eq!(second.len(), 50);
    assert_eq!(
        second[0], "d099949",
        "the next page goes on where the first ended"
    );
    // the page's URL holds its cursor: a reload shows the same letters
    let url = c.current_url().await.unwrap();
    assert!(url.as_str().contains("cursor="), "{url}");
    c.refresh().await.unwrap();
    until_text(c, "#browse tbody tr", |t| t.contains("d099949")).await;
    assert_eq!(row_ids(c, "#browse tbody tr").await, second);
    screenshot(c, "browse-100000").await;
    // an id prefix finds its ten
    let prefix = c
        .find(Locator::Css("#browse-filters input[name=prefix]"))
        .await
        .unwrap();
    prefix.send_keys("d09999").await.unwrap();
    click(c, "#browse-filters button[type=submit]").await;
    until_text(c, "#browse-page", |t| t.starts_with("page 1 · 10 jobs")).await;
    let found = row_ids(c, "#browse tbody tr").await;
    assert_eq!(found.len(), 10);
    assert!(found.iter().all(|id| id.starts_with("d09999")), "{found:?}");
    browser.close().await;
    running.stop().await;
}
