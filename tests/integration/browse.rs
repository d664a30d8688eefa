//! Browsing a topic's jobs by state over the API, a page at a time from a
//! cursor: 100,000 dead letters paged newest first with nothing skipped or
//! repeated, a page far down found by rank (the Redis work of a page the same
//! deep down as at the top); filters by prefix, error text and version; each
//! state (scheduled, ready, running, suspended, dead, ended) lists its jobs;
//! bulk retry, cancel and purge change the jobs named and nothing else; the
//! read-only token reads and is refused every change; the history by the
//! minute and the recent flows.

use std::collections::HashSet;
use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::redis::NewJob;
use serde_json::{Value, json};
use test_support::http_client::call;

use crate::util::{Project, Served, TOKEN, dead_letters};

const READER: &str = "reader-token-0123456789abcdef";

fn topics(extra: &str) -> String {
    format!(
        "[[topic]]\nname = \"boom\"\nhandler = \"panic.wasm\"\n\n\
         [[topic]]\nname = \"kept\"\nhandler = \"echo.wasm\"\nresults = {{ keep = \"1h\" }}\n\n\
         [http]\nlisten = \"127.0.0.1:0\"\n{extra}"
    )
}

async fn get(addr: &str, path: &str) -> Value {
    let answer = call(addr, "GET", path, None, None).await;
    assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    answer.json()
}

/// The Redis commands a server has run so far (scripts' calls counted).
async fn commands(project: &Project) -> u64 {
    let mut conn = redis::Client::open(project.endpoint.urls()[0].as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .filter(|l| !l.starts_with("cmdstat_info:"))
        .filter_map(|l| {
            l.split_once("calls=")?
                .1
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// The ids of a page.
fn ids(body: &Value) -> Vec<String> {
    body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_dead_letters_page_newest_first_from_a_cursor() {
    let project = Project::new("", &topics(""));
    let queue = project.queue().await;
    dead_letters(&queue, "boom", "d", 100_000, 1_000_000).await;
    let served = Served::start(&project).await;
    let addr = &served.addr;
    let mut seen = HashSet::new();
    let mut last: Option<String> = None;
    let mut cursor = String::new();
    let mut pages = 0;
    loop {
        let body = get(
            addr,
            &format!("/api/topics/boom/jobs?state=dead&limit=500{cursor}"),
        )
        .await;
        let jobs = body["jobs"].as_array().unwrap();
        for j in jobs {
            let id = j["id"].as_str().unwrap().to_owned();
            // newest first: the last batch first, ids descending within one
            if let Some(before) = &last {
                assert!(id < *before, "{id} after {before}");
            }
            let i: usize = id[1..].parse().unwrap();
            assert_eq!(j["error"], format!("failed: boom {}", i % 7), "{j}");
            assert!(seen.insert(id.clone()), "{id} twice");
            last = Some(id);
        }
        pages += 1;
        match body["next"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => break,
        }
        assert_eq!(jobs.len(), 500, "a page short before the end");
    }
    assert_eq!(seen.len(), 100_000, "every letter once");
    assert_eq!(pages, 200);
    assert_eq!(last.as_deref(), Some("d000000"));
    // the second page and one 99,000 letters down cost Redis the same commands
    let top = get(addr, "/api/topics/boom/jobs?state=dead&limit=50").await;
    let second = format!(
        "/api/topics/boom/jobs?state=dead&limit=50&cursor={}",
        top["next"].as_str().unwrap()
    );
    let before = commands(&project).await;
    let near = get(addr, &second).await;
    let near_cost = commands(&project).await - before;
    let mut deep = String::new();
    for _ in 0..198 {
        let body = get(
            addr,
            &format!("/api/topics/boom/jobs?state=dead&limit=500{deep}"),
        )
        .await;
        deep = format!("&cursor={}", body["next"].as_str().unwrap());
    }
    let before = commands(&project).await;
    let far = get(
        addr,
        &format!("/api/topics/boom/jobs?state=dead&limit=50{deep}"),
    )
    .await;
    let far_cost = commands(&project).await - before;
    assert_eq!(ids(&near).len(), 50);
    assert_eq!(ids(&far)[0], "d000999", "{far}");
    assert_eq!(
        far_cost, near_cost,
        "a page costs the same commands wherever it is"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_find_what_they_name_within_a_bounded_look() {
    let project = Project::new("", &topics(""));
    let queue = project.queue().await;
    dead_letters(&queue, "boom", "d", 20_000, 1_000_000).await;
    let served = Served::start(&project).await;
    let addr = &served.addr;
    // a prefix among the newest
    let body = get(addr, "/api/topics/boom/jobs?state=dead&prefix=d01999").await;
    let ids: Vec<&str> = body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        (0..10)
            .rev()
            .map(|i| format!("d01999{i}"))
            .collect::<Vec<_>>()
    );
    // error text: every 7th
    let body = get(
        addr,
        "/api/topics/boom/jobs?state=dead&error=boom%203&limit=20",
    )
    .await;
    let jobs = body["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 20);
    assert!(
        jobs.iter().all(|j| j["error"] == "failed: boom 3"),
        "{body}"
    );
    // a version no letter ran on: nothing in the look, and a cursor to go on
    let body = get(
        addr,
        "/api/topics/boom/jobs?state=dead&version=fedcba9876543210",
    )
    .await;
    assert!(body["jobs"].as_array().unwrap().is_empty());
    assert!(
        body["next"].is_string(),
        "5,000 looked at, 15,000 left: {body}"
    );
    // bad input names the field
    for (query, field) in [
        ("state=lost", "state"),
        ("state=dead&limit=0", "limit"),
        ("state=dead&cursor=%25%25", "cursor"),
        ("state=dead&version=nope", "version"),
        ("state=dead&key=a%20b", "key"),
    ] {
        let answer = call(
            addr,
            "GET",
            &format!("/api/topics/boom/jobs?{query}"),
            None,
            None,
        )
        .await;
        assert_eq!(answer.status, 400, "{query}: {}", answer.body);
        assert_eq!(answer.json()["field"], field, "{query}: {}", answer.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_state_lists_its_jobs() {
    let project = Project::new("", &topics(""));
    let queue = project.queue().await;
    let keys = queue.keys("kept");
    let now = now_ms();
    let job = |id: &str, due: u64| NewJob {
        id: Some(id.into()),
        payload: b"{}".to_vec(),
        due_at_ms: due,
        ..Default::default()
    };
    queue
        .enqueue(
            &keys,
            &[
                job("r1", now - 5_000),
                job("r2", now - 4_000),
                job("run", now - 10_000),
            ],
            now - 10_000,
        )
        .await
        .unwrap();
    // claims the earliest due: "run"
    let claimed = queue
        .pipeline()
        .claim(&keys, now - 9_000, now + 600_000, 1)
        .await
        .unwrap();
    assert_eq!(claimed.jobs[0].id, "run");
    let later: Vec<NewJob> = (0..30)
        .map(|i| job(&format!("s{i:02}"), now + 3_600_000 + i))
        .collect();
    queue.enqueue(&keys, &later, now).await.unwrap();
    let served = Served::start(&project).await;
    let addr = &served.addr;
    assert_eq!(
        ids(&get(addr, "/api/topics/kept/jobs?state=ready").await),
        ["r1", "r2"]
    );
    assert_eq!(
        ids(&get(addr, "/api/topics/kept/jobs?state=running").await),
        ["run"]
    );
    // scheduled, in due order, two pages of 20 and 10
    let first = get(addr, "/api/topics/kept/jobs?state=scheduled&limit=20").await;
    let next = first["next"].as_str().unwrap();
    let second = get(
        addr,
        &format!("/api/topics/kept/jobs?state=scheduled&limit=20&cursor={next}"),
    )
    .await;
    let mut all = ids(&first);
    all.extend(ids(&second));
    assert_eq!(all, (0..30).map(|i| format!("s{i:02}")).collect::<Vec<_>>());
    assert!(second["next"].is_null());
    assert_eq!(first["jobs"][0]["at_ms"], now + 3_600_000);
    // an end kept: listed as ended, newest first
    let done = hourglass::redis::Done {
        id: "run".into(),
        attempt: 1,
        follow_ups: vec![],
        end: Some(hourglass::redis::JobEnd {
            state: hourglass::redis::EndState::Acked,
            result: None,
            reason: None,
            version: Some("0123456789abcdef".into()),
            attempts: 1,
            at_ms: now,
            history: Vec::new(),
            logs: None,
        }),
        notice: None,
        flows: vec![],
        logs: String::new(),
    };
    let kept = hourglass::redis::Kept {
        results: Some(Duration::from_secs(3600)),
        logs: 64 << 10,
    };
    queue
        .pipeline()
        .ack(&keys, &[done], now, kept)
        .await
        .unwrap();
    let ended = get(addr, "/api/topics/kept/jobs?state=ended").await;
    assert_eq!(ids(&ended), ["run"]);
    assert_eq!(ended["jobs"][0]["ended"], "acked");
    assert!(
        get(addr, "/api/topics/kept/jobs?state=suspended").await["jobs"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_actions_change_the_jobs_named_and_the_read_only_token_only_reads() {
    let extra = format!("token = \"{TOKEN}\"\nread_token = \"{READER}\"\n");
    let project = Project::new("", &topics(&extra));
    let queue = project.queue().await;
    dead_letters(&queue, "boom", "d", 10, 1_000_000).await;
    let served = Served::start(&project).await;
    let addr = &served.addr;
    let bulk = |token: &'static str, body: Value| {
        let addr = addr.clone();
        async move {
            call(
                &addr,
                "POST",
                "/api/topics/boom/bulk",
                Some(token),
                Some(&body.to_string()),
            )
            .await
        }
    };
    let retry = json!({ "action": "retry", "ids": ["d000002", "d000005", "d000007", "nope"] });
    // the read-only token reads and may change nothing
    let refused = bulk(READER, retry.clone()).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("read_token"), "{}", refused.body);
    let listed = call(
        addr,
        "GET",
        "/api/topics/boom/jobs?state=dead",
        Some(READER),
        None,
    )
    .await;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.json()["jobs"].as_array().unwrap().len(), 10);
    assert_eq!(
        call(addr, "GET", "/api/topics/boom/jobs?state=dead", None, None)
            .await
            .status,
        401
    );
    assert_eq!(
        call(
            addr,
            "DELETE",
            "/api/topics/boom/dead/d000001",
            Some(READER),
            None
        )
        .await
        .status,
        403
    );
    // the operator's retries exactly those named
    let done = bulk(TOKEN, retry).await;
    assert_eq!(done.status, 200, "{}", done.body);
    let done = done.json();
    assert_eq!(done["done"], json!(["d000002", "d000005", "d000007"]));
    assert_eq!(done["missed"], json!(["nope"]));
    let stats = queue.stats(&queue.keys("boom"), now_ms()).await.unwrap();
    assert_eq!((stats.dead, stats.ready), (7, 3), "{stats:?}");
    let ready = call(
        addr,
        "GET",
        "/api/topics/boom/jobs?state=ready",
        Some(READER),
        None,
    )
    .await;
    let requeued: HashSet<String> = ids(&ready.json()).into_iter().collect();
    let named: HashSet<String> = ["d000002", "d000005", "d000007"].map(String::from).into();
    assert_eq!(requeued, named);
    // cancel one of them and purge two letters
    let cancel = bulk(TOKEN, json!({ "action": "cancel", "ids": ["d000002"] }))
        .await
        .json();
    assert_eq!(cancel["done"], json!(["d000002"]));
    let purge = bulk(
        TOKEN,
        json!({ "action": "purge", "ids": ["d000001", "d000005", "d000009"] }),
    )
    .await
    .json();
    // d000005 is no dead letter now
    assert_eq!(purge["done"], json!(["d000001", "d000009"]));
    assert_eq!(purge["missed"], json!(["d000005"]));
    let stats = queue.stats(&queue.keys("boom"), now_ms()).await.unwrap();
    assert_eq!((stats.dead, stats.ready), (5, 2), "{stats:?}");
    // bad bodies name the field
    for (body, field) in [
        (json!({ "action": "retry", "ids": [] }), "ids"),
        (json!({ "action": "explode", "ids": ["a"] }), "action"),
        (json!({ "action": "purge", "ids": [""] }), "ids[0]"),
    ] {
        let answer = bulk(TOKEN, body.clone()).await;
        assert_eq!(answer.status, 400, "{body}: {}", answer.body);
        assert_eq!(answer.json()["field"], field, "{body}: {}", answer.body);
    }
}
