//! Results, progress and waiting: a handler's result in Rust, Python and
//! JavaScript returned by `enqueue --wait`, the API's `?wait=` and
//! `/result`, kept for `results.keep` and not at all by a topic without
//! `results`; dead, cancelled and timed-out waits; progress in order over
//! Server-Sent Events and a chatty handler throttled; a follow-up handed its
//! parent's result; thousands of waiters costing the runner nothing.

use std::time::{Duration, Instant};

use hourglass::redis::TopicKeys;
use serde_json::{Value, json};
use test_support::components::{JS_SDK_PROBE, PY_PROBE};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::util::{
    Api, Monitor, Project, RedisServer, RunnerProcess, Running, TOKEN, add_handler, eventually,
    hourglass_bin, hourglass_within,
};

const WAIT: Duration = Duration::from_secs(120);

const HTTP: &str = "[http]\nlisten = \"127.0.0.1:0\"\ntoken = \"test-token-0123456789abcdef\"\n";

/// Topics `rust`, `py` and `js` keeping results for `keep`, `plain` keeping none.
fn three_languages(keep: &str) -> Project {
    let topics = format!(
        "[[topic]]\nname = \"rust\"\nhandler = \"probe.wasm\"\nresults = {{ keep = \"{keep}\" }}\n\n\
         [[topic]]\nname = \"py\"\nhandler = \"py.wasm\"\nresults = {{ keep = \"{keep}\" }}\n\n\
         [[topic]]\nname = \"js\"\nhandler = \"js.wasm\"\nresults = {{ keep = \"{keep}\" }}\n\n\
         [[topic]]\nname = \"plain\"\nhandler = \"probe.wasm\"\n\n{HTTP}"
    );
    let project = Project::new("concurrency = 4", &topics);
    add_handler(&project, "py.wasm", PY_PROBE);
    add_handler(&project, "js.wasm", JS_SDK_PROBE);
    project
}

/// Keys of `topic` in the test namespace matching `pattern` (after the tag).
async fn keys(project: &Project, topic: &str, pattern: &str) -> Vec<String> {
    let keys = project.queue().await.keys(topic);
    let prefix = keys.pending.trim_end_matches(":due");
    let mut conn = redis::Client::open(url_of(project))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("KEYS")
        .arg(format!("{prefix}:{pattern}"))
        .query_async(&mut conn)
        .await
        .unwrap()
}

fn url_of(project: &Project) -> String {
    project.endpoint.urls()[0].clone()
}

/// Wait until a waiter has read where job `id` stands (`peek.lua`, after its
/// subscription is up: `Waiters::watch`).
async fn read_where_it_stands(monitor: &mut Monitor, keys: &TopicKeys, id: &str) {
    let result = keys.result(id);
    monitor
        .call(WAIT, &format!("a waiter's read of {id}"), |args| {
            // EVALSHA, its hash, 5 keys (the job's result key last), the id
            matches!(args, [cmd, _, n, _, _, _, _, key, arg]
                if cmd.eq_ignore_ascii_case("evalsha") && n == "5" && *key == result && arg == id)
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_in_three_languages_by_cli_wait_api_wait_and_result_then_expire() {
    let project = three_languages("4s");
    let running = Running::start(project.config()).await;
    let api = Api(running.http.expect("[http]").to_string());
    let queue = project.queue().await;
    for topic in ["rust", "py", "js"] {
        let value = json!({ "lang": topic, "receipt": format!("r-{topic}"), "n": [1, 2] });
        // the CLI: the result on stdout, exit 0
        let payload = json!({ "result": value }).to_string();
        let out = hourglass_within(
            &project,
            &[
                "enqueue",
                topic,
                &payload,
                "--id",
                &format!("cli-{topic}"),
                "--wait",
                "90s",
            ],
            WAIT,
        )
        .await;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{topic}: {stdout} {stderr}");
        assert_eq!(
            serde_json::from_str::<Value>(stdout.trim()).unwrap_or(Value::Null),
            value,
            "{topic}: stdout {stdout:?}"
        );
        assert!(
            stderr.contains(&format!("enqueued {topic}/cli-{topic}")),
            "{stderr}"
        );
        // the API's wait: 200 with the end
        let body = json!({ "id": format!("api-{topic}"), "payload": { "result": value } });
        let answer = api
            .post(
                &format!("/api/topics/{topic}/jobs?wait=90s"),
                &body.to_string(),
            )
            .await;
        assert_eq!(answer.status, 200, "{topic}: {}", answer.body);
        let end = answer.json();
        assert_eq!(end["state"], "acked", "{end}");
        assert_eq!(end["status"], "new", "{end}");
        assert_eq!(end["result"], value, "{end}");
        assert_eq!(end["attempts"], 1, "{end}");
        assert!(
            end["version"].as_str().is_some_and(|v| v.len() == 16),
            "{end}"
        );
        // and its result, read again
        let kept = api
            .get(&format!("/api/topics/{topic}/jobs/api-{topic}/result"))
            .await;
        assert_eq!(kept.status, 200, "{}", kept.body);
        assert_eq!(kept.json()["result"], value);
        // `hourglass wait` on a job that already ended answers at once
        let out = hourglass_within(&project, &["wait", topic, &format!("cli-{topic}")], WAIT).await;
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            serde_json::from_slice::<Value>(&out.stdout).unwrap_or(Value::Null),
            value
        );
    }
    // a topic without `results` keeps nothing and cannot be waited on
    let plain = api
        .post(
            "/api/topics/plain/jobs",
            &json!({ "id": "p-1", "payload": { "result": { "x": 1 }, "progress": [{ "percent": 50 }] } })
                .to_string(),
        )
        .await;
    assert_eq!(plain.status, 201, "{}", plain.body);
    eventually(WAIT, "plain/p-1 ran", || async {
        match queue.inspect(&queue.keys("plain"), "p-1", 0).await.unwrap() {
            None => Ok(()),
            Some(v) => Err(format!("{v:?}")),
        }
    })
    .await;
    assert_eq!(
        keys(&project, "plain", "result:*").await,
        Vec::<String>::new()
    );
    assert_eq!(
        keys(&project, "plain", "progress").await,
        Vec::<String>::new()
    );
    let refused = api
        .post(
            "/api/topics/plain/jobs?wait=5s",
            &json!({ "payload": "{}" }).to_string(),
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("keeps no results"),
        "{}",
        refused.body
    );
    let out = hourglass_within(&project, &["enqueue", "plain", "{}", "--wait"], WAIT).await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("keeps no results"));
    // what the others kept: one end per job, gone after `keep`
    assert_eq!(keys(&project, "rust", "result:*").await.len(), 2);
    // `keep` is time the product measures (each end expires 4 s after it was
    // kept): let it pass, then every end must be gone, not eventually gone
    tokio::time::sleep(Duration::from_secs(4)).await;
    for topic in ["rust", "py", "js"] {
        let gone = api
            .get(&format!("/api/topics/{topic}/jobs/api-{topic}/result"))
            .await;
        assert_eq!(gone.status, 404, "{topic}: {}", gone.body);
        assert_eq!(
            keys(&project, topic, "result:*").await,
            Vec::<String>::new()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_cancelled_and_timed_out_waits_say_so() {
    let project = Project::new(
        "concurrency = 4",
        &format!(
            "[[topic]]\nname = \"probe\"\nhandler = \"probe.wasm\"\nmax_attempts = 2\n\
             backoff = {{ base = \"100ms\" }}\nresults = {{ keep = \"1h\", max = \"1KiB\" }}\n\n{HTTP}"
        ),
    );
    let running = Running::start(project.config()).await;
    let api = Api(running.http.expect("[http]").to_string());

    // dead: exit 1 with the reason; the API says so in the end's body
    let out = hourglass_within(
        &project,
        &["enqueue", "probe", r#"{"then":"fail"}"#, "--wait", "60s"],
        WAIT,
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("is dead after 1 attempt(s): failed: asked to fail"),
        "{stderr}"
    );
    let dead = api
        .post(
            "/api/topics/probe/jobs?wait=60s",
            &json!({ "id": "d-1", "payload": { "then": "fail" } }).to_string(),
        )
        .await;
    assert_eq!(dead.status, 200, "{}", dead.body);
    assert_eq!(dead.json()["state"], "dead");
    assert!(
        dead.json()["reason"]
            .as_str()
            .unwrap()
            .contains("asked to fail")
    );

    // a result over results.max fails the attempt, naming the limit
    let big = api
        .post(
            "/api/topics/probe/jobs?wait=60s",
            &json!({ "id": "big", "payload": { "result_bytes": 2000 } }).to_string(),
        )
        .await;
    assert_eq!(big.json()["state"], "dead", "{}", big.body);
    let reason = big.json()["reason"].as_str().unwrap().to_owned();
    assert!(
        reason.contains("result of 2000 bytes is over the topic's results.max (1024 bytes)"),
        "{reason}"
    );
    assert_eq!(big.json()["attempts"], 2, "retried like any failure");

    // cancelled: a waiter started before the cancel hears of it
    let later = api
        .post(
            "/api/topics/probe/jobs",
            &json!({ "id": "c-1", "payload": "{}", "delay": "1h" }).to_string(),
        )
        .await;
    assert_eq!(later.status, 201);
    let mut monitor = Monitor::start(&url_of(&project)).await;
    let waiter = tokio::process::Command::new(hourglass_bin())
        .args(["wait", "probe", "c-1", "--timeout", "60s", "--config"])
        .arg(project.config_path())
        .kill_on_drop(true)
        .output();
    let waiter = tokio::spawn(waiter);
    // the cancel once the waiter has read the job live: it subscribed before
    // that read, so it can learn of the cancel only by hearing of it
    read_where_it_stands(&mut monitor, &project.queue().await.keys("probe"), "c-1").await;
    drop(monitor);
    assert_eq!(api.delete("/api/topics/probe/jobs/c-1").await.status, 200);
    let out = tokio::time::timeout(WAIT, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("probe/c-1 was cancelled"));
    let cancelled = api.get("/api/topics/probe/jobs/c-1/result").await;
    assert_eq!(cancelled.json()["state"], "cancelled", "{}", cancelled.body);

    // the time runs out: 124 and the id; the API's 202 with the id
    let out = hourglass_within(
        &project,
        &[
            "enqueue", "probe", "{}", "--id", "t-1", "--delay", "1h", "--wait", "1s",
        ],
        WAIT,
    )
    .await;
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "t-1");
    let began = Instant::now();
    let timed_out = api
        .post(
            "/api/topics/probe/jobs?wait=1s",
            &json!({ "id": "t-2", "payload": "{}", "delay": "1h" }).to_string(),
        )
        .await;
    assert_eq!(timed_out.status, 202, "{}", timed_out.body);
    assert_eq!(timed_out.json()["id"], "t-2");
    assert!(began.elapsed() >= Duration::from_secs(1));
    let live = api.get("/api/topics/probe/jobs/t-2/result").await;
    assert_eq!(live.status, 202, "{}", live.body);
    assert_eq!(live.json()["state"], "waiting");
    // no such job: 404 and exit 3 (not 1, which is a dead or cancelled
    // job's); a bad wait is named
    assert_eq!(
        api.get("/api/topics/probe/jobs/nope/result").await.status,
        404
    );
    let out = hourglass_within(&project, &["wait", "probe", "nope"], WAIT).await;
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("never enqueued"),
        "{out:?}"
    );
    let bad = api.get("/api/topics/probe/jobs/t-2/result?wait=soon").await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.json()["field"], "wait");
    let long = api.get("/api/topics/probe/jobs/t-2/result?wait=10m").await;
    assert_eq!(long.status, 400, "{}", long.body);
    assert!(long.body.contains("at most 5m"), "{}", long.body);

    // an id used again after its job ended: the wait is for the new job,
    // not the old one's kept end
    let first = api
        .post(
            "/api/topics/probe/jobs?wait=60s",
            &json!({ "id": "again", "payload": { "result": "first" } }).to_string(),
        )
        .await;
    assert_eq!(first.json()["result"], "first", "{}", first.body);
    let second = api
        .post(
            "/api/topics/probe/jobs?wait=60s",
            &json!({ "id": "again", "payload": { "result": "second" }, "delay": "1s" }).to_string(),
        )
        .await;
    assert_eq!(second.json()["status"], "new", "{}", second.body);
    assert_eq!(second.json()["result"], "second", "{}", second.body);
}

// The end is published while the waiter's subscription is down (killed by
// the server): the waiter reads the job's state again once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_announced_while_a_waiter_reconnects_is_not_missed() {
    use hourglass::redis::{Done, EndState, JobEnd, Waited, Waiters};
    let project = Project::new(
        "",
        "[[topic]]\nname = \"probe\"\nhandler = \"probe.wasm\"\nresults = { keep = \"1h\" }\n",
    );
    let queue = project.queue().await;
    let keys = queue.keys("probe");
    crate::util::enqueue(&queue, "probe", "{}", 0, 0).await;
    let waiters = Waiters::new(queue.clone());
    let mut monitor = Monitor::start(&url_of(&project)).await;
    let waiting = {
        let (waiters, keys) = (waiters.clone(), keys.clone());
        tokio::spawn(async move { waiters.wait_for(&keys, "1", Duration::from_secs(20)).await })
    };
    // subscribed, then read the job live: from now on the end reaches it only
    // as a message, or by the read again after its subscription is back
    read_where_it_stands(&mut monitor, &keys, "1").await;
    drop(monitor);
    // no runner: the test claims and acks the job itself, right after the kill
    let mut conn = redis::Client::open(url_of(&project))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let killed: u64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(killed, 1, "the waiters' one subscription");
    let now = hourglass::clock::now_ms();
    let claimed = queue
        .pipeline()
        .claim(&keys, now, now + 60_000, 1)
        .await
        .unwrap();
    assert_eq!(claimed.jobs.len(), 1);
    let done = Done {
        logs: String::new(),
        id: "1".into(),
        attempt: 1,
        follow_ups: vec![],
        notice: None,
        end: Some(JobEnd {
            history: Vec::new(),
            logs: None,
            state: EndState::Acked,
            result: Some(b"42".to_vec()),
            reason: None,
            version: None,
            attempts: 1,
            at_ms: now,
        }),
        flows: Vec::new(),
    };
    let refused = queue
        .pipeline()
        .ack(
            &keys,
            &[done],
            now,
            hourglass::redis::Kept {
                results: Some(Duration::from_secs(3600)),
                logs: 0,
            },
        )
        .await
        .unwrap();
    assert!(refused.is_empty());
    match waiting.await.unwrap().unwrap() {
        Waited::Ended(end) => assert_eq!(end.result.as_deref(), Some(&b"42"[..])),
        other => panic!("{other:?}"),
    }
}

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

/// Tests that measure the runner's work: `scripts/test` runs them after the
/// others, one at a time (they fill both cores for a minute).
mod alone {
    use std::collections::HashSet;

    use super::*;

    /// CPU the process `pid` has used, all its threads (ns, from schedstat).
    fn cpu_ns(pid: u32) -> u64 {
        let mut total = 0;
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .flatten()
        {
            if let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) {
                total += text
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
        total
    }

    /// Bytes the process `pid` has read and written through system calls
    /// (`rchar` + `wchar` of /proc/PID/io): for the runner, its Redis traffic
    /// (plus a few bytes per tokio wake-up and its log lines).
    fn io_bytes(pid: u32) -> u64 {
        let text = std::fs::read_to_string(format!("/proc/{pid}/io")).expect("/proc/PID/io");
        text.lines()
            .filter(|line| line.starts_with("rchar:") || line.starts_with("wchar:"))
            .map(|line| {
                line.split_whitespace()
                    .nth(1)
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            })
            .sum()
    }

    /// A process stopped (SIGSTOP) until dropped (SIGCONT).
    struct Stopped(nix::unistd::Pid);

    impl Stopped {
        fn new(pid: u32) -> Stopped {
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP");
            Stopped(pid)
        }
    }

    impl Drop for Stopped {
        fn drop(&mut self) {
            let _ = nix::sys::signal::kill(self.0, nix::sys::signal::Signal::SIGCONT);
        }
    }

    // Waiters live in the API process (`hourglass serve`), the runner in its own:
    // the runner's CPU per job is measured with and without 2,000 waiters.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_thousand_api_waiters_are_all_answered_and_cost_the_runner_nothing() {
        const JOBS: usize = 2_000;
        // pairs of rounds: the median of nine rode out the host's noise where
        // five did not (one pair in five off by a fifth is usual here)
        const PAIRS: usize = 9;
        let redis = RedisServer::start();
        let topic =
            "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\nresults = { keep = \"1h\" }\n";
        let runner_project = Project::with_redis(redis.url(), "concurrency = 16", topic);
        let api_project =
            Project::with_redis(redis.url(), "concurrency = 16", &format!("{topic}\n{HTTP}"));
        let runner = RunnerProcess::start(&runner_project);
        let mut serve = tokio::process::Command::new(hourglass_bin())
            .args(["serve", "--config"])
            .arg(api_project.config_path())
            .env("RUST_LOG", "info")
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(serve.stderr.take().unwrap()).lines();
        let addr = loop {
            let line = tokio::time::timeout(WAIT, lines.next_line())
                .await
                .expect("serve says where it listens")
                .unwrap()
                .expect("serve is running");
            if let Some(rest) = line.split("API on http://").nth(1) {
                break rest.split('/').next().unwrap().to_owned();
            }
        };
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let api = Api(addr.clone());
        let queue = runner_project.queue().await;
        let keys = queue.keys("echo");
        // two cores: the runner gets one to itself; the API process, redis-server
        // (which fans the ends out) and this test (whose waiters read the
        // answers) the other, so the figure is the runner's work, not how often
        // they preempted it
        let redis_pid = redis.pid().expect("redis-server runs");
        let serve_pid = serve.id().unwrap();
        for (pid, cpu) in [
            (runner.id(), "0"),
            (serve_pid, "1"),
            (redis_pid, "1"),
            (std::process::id(), "1"),
        ] {
            crate::util::taskset(&["-a", "-p", "-c", cpu, &pid.to_string()]);
        }

        // one round: pause, enqueue JOBS, (waiters), resume, run them all; the
        // runner's CPU from resume to the last end, per job
        let pid = runner.id();
        let url = redis.url();
        let round = |round: usize, waiters: bool| {
            let (api, queue, keys, addr, url) = (&api, &queue, &keys, addr.clone(), &url);
            async move {
                assert_eq!(api.post("/api/topics/echo/pause", "").await.status, 200);
                let jobs: Vec<Value> = (0..JOBS)
                    .map(|i| json!({ "id": format!("{round}-{i}"), "payload": "x" }))
                    .collect();
                let bulk = api
                    .post("/api/topics/echo/jobs", &Value::Array(jobs).to_string())
                    .await;
                assert_eq!(bulk.json()["new"], JOBS, "{}", bulk.body);
                let idle_until = tokio::time::Instant::now() + Duration::from_secs(3);
                let mut handles = Vec::new();
                if waiters {
                    let mut monitor = Monitor::start(url).await;
                    for i in 0..JOBS {
                        let addr = addr.clone();
                        handles.push(tokio::spawn(async move {
                            test_support::http_client::call(
                                &addr,
                                "GET",
                                &format!("/api/topics/echo/jobs/{round}-{i}/result?wait=120s"),
                                Some(TOKEN),
                                None,
                            )
                            .await
                        }));
                    }
                    // every waiter is subscribed and has read its job waiting
                    // (`peek.lua`) before the jobs run
                    let (prefix, mut read) = (keys.result(&format!("{round}-")), HashSet::new());
                    monitor
                        .call(WAIT, "every waiter's read of its job", |args| {
                            if let [cmd, _, n, _, _, _, _, key, id] = args
                                && cmd.eq_ignore_ascii_case("evalsha")
                                && n == "5"
                                && key.starts_with(&prefix)
                            {
                                read.insert(id.clone());
                            }
                            read.len() == JOBS
                        })
                        .await;
                    if tokio::time::Instant::now() > idle_until {
                        eprintln!("round {round}: the waiters took over 3 s to read");
                    }
                }
                // not a wait for anything: the runner idles as long before every
                // round, with waiters or without (3 s idle first had cost up to
                // a third more)
                tokio::time::sleep_until(idle_until).await;
                assert_eq!(api.post("/api/topics/echo/resume", "").await.status, 200);
                // The API process answers its waiters after the run, not during
                // it: stopped (in every round, so the rounds differ only by the
                // waiters), it stays subscribed and Redis keeps the ends for it.
                // On this 2-vCPU machine its answering filled the other core and
                // raised the runner's CPU per job whatever the runner did.
                let stopped = Stopped::new(serve_pid);
                let (cpu_before, io_before) = (cpu_ns(pid), io_bytes(pid));
                eventually(WAIT, "every job ran", || async {
                    match queue.stats(keys, hourglass::clock::now_ms()).await.unwrap() {
                        s if s.ready + s.running + s.scheduled == 0 => Ok(()),
                        s => Err(format!("{s:?}")),
                    }
                })
                .await;
                let cpu = (cpu_ns(pid) - cpu_before) as f64 / JOBS as f64 / 1000.0;
                let io = (io_bytes(pid) - io_before) as f64 / JOBS as f64;
                drop(stopped);
                for h in handles {
                    let answer = h.await.unwrap();
                    assert_eq!(answer.status, 200, "{}", answer.body);
                    assert_eq!(answer.json()["state"], "acked", "{}", answer.body);
                }
                (cpu, io)
            }
        };
        // warm up, then alternate (AB BA AB ...: a drift favours neither), nine
        // of each: the host's neighbours make single rounds noisy
        round(0, false).await;
        // each pair's two rounds ran back to back: the pair's ratio cancels the
        // host's drift over the test, the median of nine the outliers
        let mut pairs = Vec::new();
        let orders = (0..PAIRS).map(|r| [r % 2 == 1, r % 2 == 0]);
        for (r, order) in orders.enumerate() {
            let (mut without, mut with) = ((0.0, 0.0), (0.0, 0.0));
            for (k, waiters) in order.into_iter().enumerate() {
                let per_job = round(1 + 2 * r + k, waiters).await;
                if waiters {
                    with = per_job;
                } else {
                    without = per_job;
                }
            }
            pairs.push((without, with));
        }
        let median = |ratios: Vec<f64>| {
            let mut ratios = ratios;
            ratios.sort_by(|a, b| a.partial_cmp(b).unwrap());
            ratios[ratios.len() / 2]
        };
        let io: Vec<(f64, f64)> = pairs.iter().map(|&(a, b)| (a.1, b.1)).collect();
        let cpu: Vec<(f64, f64)> = pairs.iter().map(|&(a, b)| (a.0, b.0)).collect();
        let io_ratio = median(io.iter().map(|(a, b)| b / a).collect());
        let cpu_ratio = median(cpu.iter().map(|(a, b)| b / a).collect());
        // The runner learns of waiters only through Redis, so the same work is
        // the same traffic with Redis: what it sends and reads per job, which
        // the host's noise does not move (CPU it does: reported, not judged;
        // `scripts/bench` is where speed is measured). Pairs here fall within
        // 3%; a runner sending one more small command (a GET) per job that has
        // a waiter made it 1.11 and failed.
        eprintln!(
            "runner per job with {JOBS} waiters against without: Redis traffic median ratio \
         {io_ratio:.3} (pairs in bytes, without/with: {io:.0?}); CPU median ratio \
         {cpu_ratio:.3}, not judged (pairs in µs: {cpu:.1?})"
        );
        assert!(
            io_ratio <= 1.05,
            "with {JOBS} waiters the runner exchanged {io_ratio:.3}x the bytes per job with \
         Redis it did without them (pairs, without/with: {io:.0?})"
        );
        drop(serve);
    }
}
