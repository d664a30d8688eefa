//! Waiting for a job's end: results in three languages by the CLI, the API's
//! wait and `result`, then expired; dead, cancelled and timed-out waits; an end
//! announced while a waiter reconnects.

use crate::util::{
    Api, Monitor, Project, Running, add_handler, eventually, hourglass_bin, hourglass_within,
};
use hourglass::redis::TopicKeys;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use test_support::components::{JS_SDK_PROBE, PY_PROBE};

use super::*;

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
