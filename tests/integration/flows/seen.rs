//! Flows as a user makes and sees them: bad flows refused whole, the API's
//! routes, dependencies read by Python and JavaScript handlers, a waiting job
//! inspected and waited for, lateness from the release.

use crate::util::{Project, Running, end_of, hourglass, result_json};
use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use hourglass::redis::flow::Policy;
use serde_json::{Value, json};
use std::time::Duration;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_flows_are_refused_whole_naming_the_job() {
    let project = Project::new("", &crate::util::probe_topics(&["t", "u"]));
    let write = |name: &str, text: &str| {
        let path = project.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    };
    let cases = [
        (
            r#"{"id": "c", "jobs": [{"name": "a", "topic": "t", "after": ["b"]}, {"name": "b", "topic": "t", "after": ["a"]}, {"name": "r", "topic": "t"}]}"#,
            "a cycle: a → b → a",
        ),
        (
            r#"{"id": "c", "jobs": [{"name": "a", "topic": "t", "after": ["ghost"]}, {"name": "r", "topic": "t"}]}"#,
            r#"job "a" depends on "ghost", which is not in the flow"#,
        ),
        (
            r#"{"id": "c", "jobs": [{"name": "r", "topic": "t"}, {"name": "a", "topic": "nope", "after": ["r"]}]}"#,
            r#"job "a": no topic "nope" in queues.toml"#,
        ),
        (
            r#"{"id": "c", "jobs": [{"name": "a", "topic": "t"}], "extra": 1}"#,
            "unknown field `extra`",
        ),
    ];
    for (i, (text, expected)) in cases.iter().enumerate() {
        let file = write(&format!("bad-{i}.json"), text);
        let out = hourglass(&project, &["flow", "enqueue", &file]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {stderr}");
        assert!(stderr.contains(expected), "{text}: {stderr}");
    }
    let queue = project.queue().await;
    for topic in ["t", "u"] {
        let stats = queue.stats(&queue.keys(topic), now_ms()).await.unwrap();
        assert_eq!(
            stats.ready + stats.scheduled,
            0,
            "{topic}: a refused flow enqueued something"
        );
    }
    assert!(queue.flows().show("c").await.unwrap().is_none());
    // a good one, then the same id again
    let good = write(
        "good.toml",
        "id = \"g\"\n[[jobs]]\nname = \"a\"\ntopic = \"t\"\n[[jobs]]\nname = \"b\"\ntopic = \"u\"\nafter = [\"a\"]\n",
    );
    let out = hourglass(&project, &["flow", "enqueue", &good]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("created flow g (2 jobs; 1 enqueued now")
    );
    let inspected = hourglass(&project, &["inspect", "t", "g/a"]);
    let text = String::from_utf8_lossy(&inspected.stdout);
    assert!(
        text.contains("flow       g, before b not ended (`hourglass flow show g`)"),
        "{text}"
    );
    let json = hourglass(&project, &["inspect", "t", "g/a", "--json"]);
    let json: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        json["flow"],
        json!({"id": "g", "index": 0, "dependencies": [], "dependents": [{"name": "b", "ended": null}]})
    );
    let again = hourglass(&project, &["flow", "enqueue", &good]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("a flow with id \"g\" exists"));
    let shown = hourglass(&project, &["flow", "show", "g"]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains("flow g: 2 jobs (1 enqueued, 1 waiting)"),
        "{text}"
    );
    assert!(text.contains("after a"), "{text}");
    let missing = hourglass(&project, &["flow", "show", "nope"]);
    assert_eq!(missing.status.code(), Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_creates_and_shows_a_flow_and_refuses_a_bad_one() {
    let project = Project::new(
        "concurrency = 2",
        &format!(
            "{}[http]\nlisten = \"127.0.0.1:0\"\ntoken = \"test-token-0123456789abcdef\"\n",
            crate::util::probe_topics(&["thumbs", "albums"])
        ),
    );
    let mut runner = Running::start(project.config()).await;
    let api = crate::util::Api(runner.http.expect("[http] is served").to_string());
    let album = json!({"id": "album-7", "jobs": [
        {"name": "thumb-1", "topic": "thumbs", "payload": {"result": "t1.png"}},
        {"name": "thumb-2", "topic": "thumbs", "payload": {"result": "t2.png"}},
        {"name": "publish", "topic": "albums", "payload": {"echo_deps": true},
         "after": ["thumb-1", {"name": "thumb-2", "policy": "ignore"}]}]});
    let created = api.post("/api/flows", &album.to_string()).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(
        created.json(),
        json!({"id": "album-7", "jobs": 3, "enqueued": {"thumbs": 2}})
    );
    let again = api.post("/api/flows", &album.to_string()).await;
    assert_eq!(again.status, 409, "{}", again.body);
    let cycle = json!({"jobs": [
        {"name": "a", "topic": "thumbs", "after": ["b"]},
        {"name": "b", "topic": "thumbs", "after": ["a"]}]});
    let refused = api.post("/api/flows", &cycle.to_string()).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.json()["error"]
            .as_str()
            .unwrap()
            .contains("a cycle: a → b → a"),
        "{}",
        refused.body
    );
    let unknown = json!({"jobs": [{"name": "a", "topic": "nowhere"}]});
    let refused = api.post("/api/flows", &unknown.to_string()).await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.body.contains(r#"no topic \"nowhere\""#),
        "{}",
        refused.body
    );
    runner
        .until_settled("albums", "album-7/publish", WAIT)
        .await;
    let shown = api
        .until("/api/flows/album-7", |v| v["done_at_ms"].is_u64())
        .await;
    assert_eq!(shown["counts"], json!({"acked": 3}));
    assert_eq!(
        shown["jobs"][2]["after"][1],
        json!({"name": "thumb-2", "policy": "ignore"})
    );
    assert_eq!(shown["jobs"][2]["id"], "album-7/publish");
    let metrics = api.get("/metrics").await.body;
    for line in [
        "hourglass_flows_completed_total 1",
        "hourglass_flows_open 0",
        "hourglass_flows_failed_total 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }
    assert_eq!(api.get("/api/flows/nope").await.status, 404);
    assert_eq!(api.get("/api/flows/%7Bbad%7D").await.status, 400);
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_javascript_handlers_read_their_dependencies() {
    let project = crate::util::with_python_and_javascript(crate::util::probe_topics(&["work"]));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let deps = [("a", Policy::Require), ("x", Policy::Ignore)];
    create(
        &queue,
        "langs",
        vec![
            job("a", "work", json!({"result": {"a": 1}}), &[]),
            job("x", "work", json!({"then": "fail"}), &[]),
            job("p", "py", json!({"echo_deps": true}), &deps),
            job("j", "js", json!({"echo_deps": true}), &deps),
        ],
    )
    .await;
    runner
        .until_all_settled(&[("py", "langs/p"), ("js", "langs/j")], WAIT)
        .await;
    for (topic, id) in [("py", "langs/p"), ("js", "langs/j")] {
        let end = end_of(&queue, topic, id).await;
        let deps = result_json(&end)["deps"].clone();
        assert_eq!(
            deps[0],
            json!({"name": "a", "topic": "work", "id": "langs/a", "ended": "acked", "result": {"a": 1}, "reason": null}),
            "{topic}"
        );
        assert_eq!(deps[1]["ended"], "dead", "{topic}: {deps}");
        assert!(
            deps[1]["reason"]
                .as_str()
                .unwrap()
                .contains("asked to fail"),
            "{topic}: {deps}"
        );
        assert_eq!(deps[1]["result"], Value::Null);
    }
    runner.stop().await;
}

/// A job still waiting in its flow (not in its topic yet) is inspected and
/// waited for by its id like any job: `inspect` (text and JSON) and the
/// API's job view say what it waits for; `hourglass wait` and the API's
/// long poll wait until it ends; one cancelled while it waits ends the
/// wait as cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_waiting_in_its_flow_is_inspected_and_waited_for_by_its_id() {
    let toml = format!(
        "{}\n[http]\nlisten = \"127.0.0.1:0\"\ntoken = \"{}\"\n",
        crate::util::probe_topics(&["t", "p"]),
        crate::util::TOKEN
    );
    let project = Project::new("concurrency = 2", &toml);
    let queue = project.queue().await;
    // p stays paused: its flow's first job waits there, the second in its flow
    assert!(hourglass(&project, &["pause", "p"]).status.success());
    create(
        &queue,
        "wa",
        vec![
            job("a", "p", json!({}), &[]),
            job("b", "p", json!({}), &[("a", Policy::Require)]),
        ],
    )
    .await;
    for id in ["wf", "wc"] {
        create(
            &queue,
            id,
            vec![
                job("a", "t", json!({}), &[]),
                job(
                    "b",
                    "t",
                    json!({"result": "b ran"}),
                    &[("a", Policy::Require)],
                ),
            ],
        )
        .await;
    }
    // no runner yet: a waits in its topic, b in its flow
    let out = hourglass(&project, &["inspect", "t", "wf/b"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text.contains("waiting in its flow for a"), "{text}");
    assert!(text.contains("wf, after a not ended"), "{text}");
    let out = hourglass(&project, &["inspect", "t", "wf/b", "--json"]);
    let view: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(view["state"], "waiting_in_flow", "{view:#}");
    assert_eq!(view["waiting_for"], json!(["a"]), "{view:#}");
    assert_eq!(view["flow"]["dependencies"][0]["name"], "a", "{view:#}");
    let waiting = |id: &str| {
        tokio::process::Command::new(crate::util::hourglass_bin())
            .args(["wait", "t", id, "--timeout", "60s", "--json", "--config"])
            .arg(project.config_path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // one cancelled while it waits in its flow: the wait ends, cancelled
    let cancelled = waiting("wc/b");
    // (a wait that begins after the cancel reads the end its flow keeps)
    tokio::time::sleep(Duration::from_millis(500)).await;
    let out = hourglass(&project, &["flow", "cancel", "wc"]);
    assert!(out.status.success(), "{out:?}");
    let out = tokio::time::timeout(WAIT, cancelled.wait_with_output())
        .await
        .expect("the wait on a job cancelled in its flow ended")
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let end: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(end["state"], "cancelled", "{end}");
    // one that runs once its flow releases it
    let acked = waiting("wf/b");
    let runner = Running::start(project.config()).await;
    let api = crate::util::Api(runner.http.unwrap().to_string());
    let out = tokio::time::timeout(WAIT, acked.wait_with_output())
        .await
        .expect("the wait on a flow job ended")
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let end: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (end["state"].as_str(), end["result"].as_str()),
        (Some("acked"), Some("b ran")),
        "{end}"
    );
    // the API takes the id with its slash encoded
    let later = api.get("/api/topics/t/jobs/wf%2Fb/result").await;
    assert_eq!(later.status, 200, "{}", later.body);
    // a flow job waiting in its flow, over the API
    let view = api.get("/api/topics/p/jobs/wa%2Fb").await;
    assert_eq!(view.status, 200, "{}", view.body);
    assert_eq!(view.json()["state"], "waiting_in_flow", "{}", view.body);
    let live = api.get("/api/topics/p/jobs/wa%2Fb/result").await;
    assert_eq!(
        (live.status, live.json()["state"].clone()),
        (202, json!("waiting_in_flow")),
        "{}",
        live.body
    );
    runner.stop().await;
}

/// Jobs a flow or a batch released are late from their release, not from
/// the Unix epoch (they used to be enqueued due at 0): the topic's
/// lateness in the API (what `stats` and the dashboard show) and every
/// observation of `/metrics`' lateness histogram are seconds at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_jobs_are_late_from_their_release() {
    let toml = format!(
        "{}\n[http]\nlisten = \"127.0.0.1:0\"\ntoken = \"{}\"\n",
        crate::util::probe_topics(&["t", "done"]),
        crate::util::TOKEN
    );
    let project = Project::new("concurrency = 2", &toml);
    let mut runner = Running::start(project.config()).await;
    let api = crate::util::Api(runner.http.unwrap().to_string());
    let queue = project.queue().await;
    create(
        &queue,
        "late",
        vec![
            job("a", "t", json!({"sleep_ms": 300}), &[]),
            job("b", "done", json!({}), &[("a", Policy::Require)]),
            job("c", "done", json!({}), &[("b", Policy::Require)]),
        ],
    )
    .await;
    let batch = json!({"id": "lb", "jobs": [{"name": "j", "topic": "t", "payload": {}}],
        "on_complete": {"topic": "done", "payload": {}}});
    let created = api.post("/api/flows", &batch.to_string()).await;
    assert_eq!(created.status, 201, "{}", created.body);
    runner
        .until(WAIT, |seen| {
            ["late/c", "lb/on_complete"].iter().all(|id| {
                seen.iter()
                    .any(|e| e.id == *id && matches!(e.kind, EventKind::Acked))
            })
        })
        .await;
    let topic = api
        .until("/api/topics/done", |v| v["late_p99_ms"].is_u64())
        .await;
    let p99 = topic["late_p99_ms"].as_u64().unwrap();
    assert!(p99 < 10_000, "released jobs {p99} ms late: {topic:#}");
    let metrics = api.get("/metrics").await.body;
    let count = |le: &str| -> u64 {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("hourglass_lateness_seconds_bucket{")
                    && l.contains("topic=\"done\"")
                    && l.contains(&format!("le=\"{le}\""))
            })
            .and_then(|l| l.rsplit(' ').next())
            .unwrap_or_else(|| panic!("no lateness bucket le={le} for done: {metrics}"))
            .parse()
            .unwrap()
    };
    assert_eq!(count("+Inf"), 3, "three attempts of `done`: {metrics}");
    assert_eq!(count("10.0"), 3, "every one under 10 s late: {metrics}");
    runner.stop().await;
}
