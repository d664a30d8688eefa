//! The console in headless Chromium, what it does beyond looking: a
//! durable job's page shows its journal while it waits, then (signalled)
//! its attempts' recorded and replayed steps and its logs; a diamond flow
//! is drawn one node per job with each job's state; bulk retry retries
//! the dead letters selected and nothing else; with the read-only token
//! the console reads and an action is refused; the schedules view lists
//! each `[[schedule]]` with its next fire times and its last job.

use std::time::Duration;

use hourglass::clock::now_ms;
use serde_json::json;
use test_support::browser::{Browser, click};
use test_support::fantoccini::Locator;
use test_support::http_client::call;

use crate::dashboard::{open, row_ids, screenshot, until_text};
use crate::util::{Project, Running, dead_letters, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_jobs_page_shows_recorded_and_replayed_steps_and_its_logs() {
    let shop = test_support::HttpServer::start(vec![test_support::Reply::status(200, "ch_1")]);
    let topics = format!(
        "[[topic]]\nname = \"checkout\"\nhandler = \"checkout.wasm\"\nresults = {{ keep = \"1h\" }}\n\
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
    open(c, &addr, "topics").await;
    until_text(c, "tr[data-topic=checkout] td.scheduled", |t| {
        t == "1 (1 suspended)"
    })
    .await;
    open(c, &addr, "job/checkout/order-7").await;
    let waits = until_text(c, "#job-suspended", |t| t.contains("approved")).await;
    assert!(waits.contains("waits for signal \"approved\""), "{waits}");
    let charge = until_text(c, "#job-journal tr[data-step=charge]", |t| t.contains("B")).await;
    assert!(charge.starts_with("charge 6 B 1"), "{charge}");
    until_text(c, "#job-journal tr[data-step=reserve]", |t| {
        t.starts_with("reserve")
    })
    .await;
    let first = until_text(c, "#job-costs tr.outcome-suspend", |t| {
        t.contains("recorded")
    })
    .await;
    assert!(first.contains("2 recorded, 0 replayed"), "{first}");
    screenshot(c, "job-durable").await;

    // approved: the next attempt replays charge and reserve, records the rest, logs, acks
    let signal = "/api/topics/checkout/jobs/order-7/signals/approved";
    let answer = call(&addr, "POST", signal, None, Some("ops")).await;
    assert!(answer.status < 300, "{}", answer.body);
    until_text(c, "#job-state", |t| t == "acked").await;
    let second = until_text(c, "#job-costs tr.outcome-ack", |t| t.contains("replayed")).await;
    assert!(second.contains("2 recorded, 2 replayed"), "{second}");
    let logs = until_text(c, "#job-logs", |t| t.contains("emailed")).await;
    assert!(
        logs.contains("order 7: charged ch_1, reserved, emailed"),
        "{logs}"
    );
    browser.close().await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diamond_flow_is_drawn_one_node_per_job_with_its_state() {
    let topics = "[[topic]]\nname = \"probe\"\nhandler = \"probe.wasm\"\n\n[http]\nlisten = \"127.0.0.1:0\"\n";
    let project = Project::new("concurrency = 2", topics);
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
    open(c, &addr, "flow/album").await;
    let summary = until_text(c, "#flow-summary", |t| t.contains("done")).await;
    assert!(
        summary.starts_with("flow album: 4 jobs (3 acked, 1 dead)"),
        "{summary}"
    );
    let nodes = c.find_all(Locator::Css("#flow-graph .node")).await.unwrap();
    assert_eq!(nodes.len(), 4, "one node per job");
    for (job, layer, state) in [
        ("a", 0, "acked"),
        ("b", 1, "acked"),
        ("x", 1, "dead"),
        ("d", 2, "acked"),
    ] {
        let css =
            format!("#flow-graph .node.state-{state}[data-layer=\"{layer}\"][data-job={job}]");
        let text = until_text(c, &css, |_| true).await;
        assert!(text.starts_with(&format!("{job} {state}")), "{text}");
    }
    let d = until_text(c, "#flow-graph [data-job=d]", |_| true).await;
    assert!(d.contains("after b, x (ignore)"), "{d}");
    // four edges, laid out top to bottom: each below the job it waits for
    let edges = c
        .find_all(Locator::Css("#flow-graph path.edge"))
        .await
        .unwrap();
    assert_eq!(edges.len(), 4);
    let top = |job: &'static str| async move {
        let e = c
            .find(Locator::Css(&format!("#flow-graph [data-job={job}]")))
            .await
            .unwrap();
        e.rectangle().await.unwrap().1
    };
    assert!(top("a").await < top("b").await && top("b").await < top("d").await);
    screenshot(c, "flow").await;
    // a node opens its job's page, which links back to the flow
    click(c, "#flow-graph [data-job=x]").await;
    until_text(c, "#job-flow", |t| t == "in flow album").await;
    until_text(c, "#job-state", |t| t == "dead").await;
    browser.close().await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_retry_retries_the_dead_letters_selected_and_nothing_else() {
    let topics = "[[topic]]\nname = \"boom\"\nhandler = \"panic.wasm\"\nmax_attempts = 1\n\n[http]\nlisten = \"127.0.0.1:0\"\n";
    let project = Project::new("concurrency = 2", topics);
    let queue = project.queue().await;
    dead_letters(&queue, "boom", "d", 10, now_ms()).await;
    let keys = queue.keys("boom");
    let running = Running::start(project.config()).await;
    let addr = running.http.unwrap().to_string();
    // paused: what is retried waits where the test can see it
    assert_eq!(
        call(&addr, "POST", "/api/topics/boom/pause", None, None)
            .await
            .status,
        200
    );

    let browser = Browser::start().await;
    let c = &browser.client;
    open(c, &addr, "topic/boom/dead").await;
    let ids = row_ids(c, "#browse tbody tr").await;
    assert_eq!(ids.len(), 10);
    let chosen = ["d000002", "d000005", "d000007"];
    for id in chosen {
        click(c, &format!("#browse tr[data-id={id}] input.select")).await;
    }
    until_text(c, "#selected-count", |t| t == "3 selected").await;
    click(c, "#bulk button.bulk-retry").await;
    until_text(c, "#bulk-result", |t| t == "retry: 3 done, 0 left alone").await;
    eventually(
        Duration::from_secs(30),
        "3 retried, 7 still dead",
        || async {
            let s = queue.stats(&keys, now_ms()).await.unwrap();
            match (s.ready, s.dead) {
                (3, 7) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    let left = row_ids(c, "#browse tbody tr").await;
    assert_eq!(left.len(), 7);
    for id in &ids {
        assert_eq!(
            left.contains(id),
            !chosen.contains(&id.as_str()),
            "{id}: {left:?}"
        );
    }
    open(c, &addr, "topic/boom/ready").await;
    let mut ready = row_ids(c, "#browse tbody tr").await;
    ready.sort();
    assert_eq!(ready, chosen);
    browser.close().await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_read_only_token_the_console_reads_and_an_action_is_refused() {
    let topics = "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n\n\
        [http]\nlisten = \"127.0.0.1:0\"\ntoken = \"operator-secret-0123456789\"\nread_token = \"watcher-secret-0123456789\"\n";
    let project = Project::new("concurrency = 2", topics);
    let running = Running::start(project.config()).await;
    let addr = running.http.unwrap().to_string();

    let browser = Browser::start().await;
    let c = &browser.client;
    open(c, &addr, "topics").await;
    // no token: asked for one
    until_text(c, "#token-form", |_| true).await;
    let token = c.find(Locator::Css("#token")).await.unwrap();
    token.send_keys("watcher-secret-0123456789").await.unwrap();
    click(c, "#token-form button").await;
    until_text(c, "tr[data-topic=echo] td.scheduled", |t| t == "0").await;
    click(c, "tr[data-topic=echo] button.pause").await;
    let said = until_text(c, "#notice", |t| t.contains("read-only")).await;
    assert!(said.contains("/topics/echo/pause"), "{said}");
    let topic = call(
        &addr,
        "GET",
        "/api/topics/echo",
        Some("operator-secret-0123456789"),
        None,
    )
    .await;
    let topic: serde_json::Value = serde_json::from_str(&topic.body).unwrap();
    assert_eq!(topic["paused"], false, "nothing changed");
    browser.close().await;
    running.stop().await;
}

/// A topic with fairness links to its keys: the top keys with their jobs
/// queued and weight, the rest as "other"; pausing a key there holds its
/// jobs (and shows it paused), resuming runs them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_the_top_keys_and_pauses_one() {
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
    queue.enqueue(&k, &jobs, now_ms()).await.unwrap();

    let browser = Browser::start().await;
    let c = &browser.client;
    open(c, &addr, "topics").await;
    click(c, "#topics tr[data-topic=exports] a.keys").await;
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
        let s = queue.tenants().stats(&k, now_ms(), 5).await.unwrap();
        let ready = queue.stats(&k, now_ms()).await.unwrap().ready;
        match (s.queued, ready) {
            (0, 0) => Ok(()),
            _ => Err(format!("{s:?}")),
        }
    })
    .await;
    until_text(c, "#keys tr[data-key=acme]", |t| !t.contains("paused")).await;
    browser.close().await;
    running.stop().await;
}

/// The schedules view (`#/cron`), and `GET /api/schedules` under it: each
/// `[[schedule]]` with its next fire times in its own zone's terms, and the
/// job of its last fire time with how it stands, linked to its page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cron_view_lists_each_schedule_with_its_next_fire_and_last_job() {
    let topics = "[[topic]]\nname = \"probe\"\nhandler = \"probe.wasm\"\nresults = { keep = \"1h\" }\n\n\
        [[schedule]]\nname = \"tick\"\ntopic = \"probe\"\nevery = \"2s\"\npayload = \"{}\"\n\n\
        [[schedule]]\nname = \"new-year\"\ntopic = \"probe\"\ncron = \"0 0 1 1 *\"\ntimezone = \"Europe/Berlin\"\n\n\
        [http]\nlisten = \"127.0.0.1:0\"\n";
    let project = Project::new("concurrency = 2", topics);
    let running = Running::start(project.config()).await;
    let addr = running.http.unwrap().to_string();
    let read = |path: &'static str| {
        let addr = addr.clone();
        async move {
            let answer = call(&addr, "GET", path, None, None).await;
            (
                answer.status,
                serde_json::from_str::<serde_json::Value>(&answer.body).unwrap(),
            )
        }
    };
    // the tick's last fire time acked (kept with its end)
    let last = eventually(Duration::from_secs(30), "tick's last job acked", || async {
        let (status, list) = read("/api/schedules?next=3").await;
        assert_eq!(status, 200, "{list}");
        let tick = &list["schedules"][0];
        match tick["last"]["state"].as_str() {
            Some("acked") => Ok(tick.clone()),
            _ => Err(list.to_string()),
        }
    })
    .await;
    assert_eq!(last["every_ms"], 2000);
    let fire = last["last"]["fire_ms"].as_u64().unwrap();
    assert_eq!(fire % 2000, 0, "{last}");
    assert_eq!(last["last"]["job"], format!("tick@{fire}"));
    let next: Vec<u64> = serde_json::from_value(last["next_ms"].clone()).unwrap();
    assert_eq!(next.len(), 3);
    assert!(next.windows(2).all(|w| w[1] == w[0] + 2000), "{next:?}");
    assert!(next[0] > fire, "{next:?} after {fire}");
    let (_, list) = read("/api/schedules?next=1").await;
    let year = &list["schedules"][1];
    assert_eq!(
        (&year["name"], &year["cron"]),
        (&json!("new-year"), &json!("0 0 0 1 1 *"))
    );
    // midnight of 1 January in Berlin is 23:00 UTC the day before
    let at = year["next_ms"][0].as_u64().unwrap();
    assert_eq!(at % 86_400_000, 23 * 3_600_000, "{year}");
    assert!(at > now_ms() && at - now_ms() < 366 * 86_400_000, "{year}");
    let (status, bad) = read("/api/schedules?next=51").await;
    assert_eq!((status, &bad["field"]), (400, &json!("next")), "{bad}");

    let browser = Browser::start().await;
    let c = &browser.client;
    open(c, &addr, "cron").await;
    let row = until_text(c, "#schedules tr[data-schedule=tick] td.last", |t| {
        t.contains("acked")
    })
    .await;
    assert!(row.starts_with("tick@"), "{row}");
    let when = until_text(c, "#schedules tr[data-schedule=new-year] td.when", |_| true).await;
    assert_eq!(when, "0 0 0 1 1 * (Europe/Berlin)");
    until_text(c, "#schedules tr[data-schedule=tick] td.next", |t| {
        t.contains("in ")
    })
    .await;
    screenshot(c, "cron").await;
    // the last job's link opens its page
    click(c, "#schedules tr[data-schedule=tick] td.last a").await;
    until_text(c, "#job-state", |t| t == "acked").await;
    browser.close().await;
    running.stop().await;
}
