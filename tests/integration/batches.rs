//! Batches: jobs that wait for nothing and callbacks that wait for all of
//! them; `on_complete` runs however they ended, `on_success` only when none
//! died (else it is skipped, and revived when the dead job is retried and
//! acks); an open batch takes jobs until it is sealed; each callback reads
//! the batch's counts and failed ids in Rust, Python and JavaScript.

use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::redis::flow::{BatchSpec, Callback, FlowJob};
use hourglass::redis::{EndState, JobEnd};
use serde_json::{Value, json};

use crate::util::{Project, Running, end_of, hourglass, starts};

const WAIT: Duration = Duration::from_secs(30);

fn member(name: &str, topic: &str, payload: Value) -> FlowJob {
    FlowJob {
        name: name.into(),
        topic: topic.into(),
        payload: payload.to_string().into_bytes(),
        ..Default::default()
    }
}

fn callback(topic: &str) -> Option<Callback> {
    Some(Callback {
        topic: topic.into(),
        payload: json!({"echo_deps": true}).to_string().into_bytes(),
        max_attempts: 0,
    })
}

/// The batch a callback's handler saw (the probe's `echo_deps`).
fn batch_seen(end: &JobEnd) -> Value {
    let result = end
        .result
        .as_deref()
        .unwrap_or_else(|| panic!("no result: {end:?}"));
    serde_json::from_slice::<Value>(result).unwrap()["batch"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_complete_runs_with_the_counts_and_on_success_is_skipped_when_a_job_died() {
    let project = Project::new(
        "concurrency = 4",
        &crate::util::probe_topics(&["rows", "done"]),
    );
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let spec = |id: &str, fail: bool| BatchSpec {
        id: Some(id.into()),
        jobs: vec![
            member("r1", "rows", json!({"result": 1})),
            member("r2", "rows", json!({"result": 2})),
            member(
                "r3",
                "rows",
                if fail {
                    json!({"then": "fail"})
                } else {
                    json!({})
                },
            ),
        ],
        on_complete: callback("done"),
        on_success: callback("done"),
        open: false,
    };
    for (id, fail) in [("bad", true), ("good", false)] {
        let plan = spec(id, fail).plan(|| unreachable!()).unwrap();
        queue.flows().create(&plan, now_ms()).await.unwrap();
    }
    let callbacks = [
        ("done", "bad/on_complete"),
        ("done", "good/on_complete"),
        ("done", "good/on_success"),
    ];
    let events = runner.until_all_settled(&callbacks, WAIT).await;
    let events = [
        events,
        runner.after_drained(&queue, &["rows", "done"], WAIT).await,
    ]
    .concat();
    for id in ["bad/on_complete", "good/on_complete", "good/on_success"] {
        assert_eq!(starts(&events, "done", id), 1, "{id}: {events:#?}");
    }
    assert_eq!(starts(&events, "done", "bad/on_success"), 0, "{events:#?}");
    let seen = batch_seen(&end_of(&queue, "done", "bad/on_complete").await);
    assert_eq!(
        seen,
        json!({"id": "bad", "jobs": 3, "acked": 2, "dead": 1, "cancelled": 0, "failed": ["bad/r3"]})
    );
    let seen = batch_seen(&end_of(&queue, "done", "good/on_success").await);
    assert_eq!(
        seen,
        json!({"id": "good", "jobs": 3, "acked": 3, "dead": 0, "cancelled": 0, "failed": []})
    );
    // the skipped callback ended in its batch, which is done
    let bad = crate::util::flow_done(&queue, "bad").await;
    let skipped = bad.jobs.iter().find(|j| j.name == "on_success").unwrap();
    assert_eq!(skipped.ended.as_deref(), Some("cancelled"), "{bad:?}");
    let shown = hourglass(&project, &["flow", "show", "bad"]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains("batch bad: 5 jobs") && text.contains("after every job, if none is dead"),
        "{text}"
    );
    // why it was skipped: in the flow's view, the text and the JSON
    let why = "skipped: 1 job(s) of the batch were dead-lettered";
    assert_eq!(skipped.reason.as_deref(), Some(why), "{bad:?}");
    assert!(text.contains(&format!("({why})")), "{text}");
    let shown = hourglass(&project, &["flow", "show", "bad", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    let callback = json["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "on_success")
        .unwrap();
    assert_eq!(callback["reason"], why, "{json:#}");
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_batch_takes_jobs_until_sealed_then_runs_its_callback_once() {
    let project = Project::new(
        "concurrency = 4",
        &format!(
            "{}[http]\nlisten = \"127.0.0.1:0\"\ntoken = \"test-token-0123456789abcdef\"\n",
            crate::util::probe_topics(&["rows", "done"])
        ),
    );
    let mut runner = Running::start(project.config()).await;
    let api = crate::util::Api(runner.http.expect("[http] is served").to_string());
    let queue = project.queue().await;
    let open = json!({"id": "imp", "open": true,
        "jobs": [{"name": "c1", "topic": "rows", "payload": {"result": 1}}],
        "on_complete": {"topic": "done", "payload": {"echo_deps": true}}});
    let created = api.post("/api/flows", &open.to_string()).await;
    assert_eq!(created.status, 201, "{}", created.body);
    runner.until_settled("rows", "imp/c1", WAIT).await;
    // every job has ended, but the batch is open: its callback waits
    let flow = queue.flows().show("imp").await.unwrap().unwrap();
    assert_eq!(flow.batch.as_deref(), Some("open"));
    let cb = flow.jobs.iter().find(|j| j.name == "on_complete").unwrap();
    assert!(!cb.released && cb.ended.is_none(), "{flow:?}");
    assert!(flow.done_ms.is_none(), "{flow:?}");
    // more jobs: from a file with the CLI, over the API
    let file = project.dir.path().join("more.json");
    std::fs::write(
        &file,
        json!({"jobs": [{"name": "c2", "topic": "rows", "payload": {"result": 2}}]}).to_string(),
    )
    .unwrap();
    let added = hourglass(&project, &["flow", "add", "imp", file.to_str().unwrap()]);
    assert!(added.status.success(), "{added:?}");
    let again = hourglass(&project, &["flow", "add", "imp", file.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("a job named \"c2\" is in it already"),
        "{again:?}"
    );
    let more = json!({"jobs": [{"name": "c3", "topic": "rows", "payload": {"then": "fail"}}]});
    let added = api.post("/api/flows/imp/jobs", &more.to_string()).await;
    assert_eq!(added.status, 200, "{}", added.body);
    assert_eq!(added.json()["enqueued"], json!({"rows": 1}));
    let bad = json!({"jobs": [{"name": "c4", "topic": "rows", "after": ["c1"]}]});
    let refused = api.post("/api/flows/imp/jobs", &bad.to_string()).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("wait for nothing"),
        "{}",
        refused.body
    );
    assert_eq!(
        api.post("/api/flows/nope/jobs", &more.to_string())
            .await
            .status,
        404
    );
    runner.until_settled("rows", "imp/c3", WAIT).await;
    // every job's end told to the batch (right after each one's commit)
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let flow = queue.flows().show("imp").await.unwrap().unwrap();
        let ended = flow.jobs.iter().filter(|j| j.ended.is_some()).count();
        if ended == 3 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{flow:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sealed = api.post("/api/flows/imp/seal", "").await;
    assert_eq!(sealed.status, 200, "{}", sealed.body);
    assert_eq!(sealed.json()["enqueued"], json!({"done": 1}));
    let late = hourglass(&project, &["flow", "add", "imp", file.to_str().unwrap()]);
    assert_eq!(late.status.code(), Some(2), "{late:?}");
    assert!(
        String::from_utf8_lossy(&late.stderr).contains("is sealed"),
        "{late:?}"
    );
    let events = runner.until_settled("done", "imp/on_complete", WAIT).await;
    // sealing again changes nothing
    let resealed = hourglass(&project, &["flow", "seal", "imp"]);
    assert!(resealed.status.success(), "{resealed:?}");
    let events = [
        events,
        runner.after_drained(&queue, &["rows", "done"], WAIT).await,
    ]
    .concat();
    assert_eq!(starts(&events, "done", "imp/on_complete"), 1, "{events:#?}");
    let seen = batch_seen(&end_of(&queue, "done", "imp/on_complete").await);
    assert_eq!(
        seen,
        json!({"id": "imp", "jobs": 3, "acked": 2, "dead": 1, "cancelled": 0, "failed": ["imp/c3"]})
    );
    let metrics = api.get("/metrics").await.body;
    for line in ["hourglass_flows_failed_total 1", "hourglass_flows_open 0"] {
        assert!(metrics.lines().any(|l| l == line), "{line} in {metrics}");
    }
    // a flow is not a batch
    let flow = json!({"id": "plain", "jobs": [{"name": "a", "topic": "rows"}]});
    assert_eq!(api.post("/api/flows", &flow.to_string()).await.status, 201);
    let refused = api.post("/api/flows/plain/seal", "").await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("not a batch"), "{}", refused.body);
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skipped_on_success_runs_once_the_dead_job_is_retried_and_acks() {
    let data = tempfile::tempdir().unwrap();
    let toml = crate::util::probe_topics(&["t"]).replace(
        "handler = \"probe.wasm\"\n",
        &format!(
            "handler = \"probe.wasm\"\ngrants = {{ dirs = [{{ host = \"{}\", guest = \"/data\" }}] }}\n",
            data.path().display()
        ),
    );
    let project = Project::new("concurrency = 2", &toml);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let plan = BatchSpec {
        id: Some("b".into()),
        jobs: vec![
            member("ok", "t", json!({})),
            // fails while /data/ok is missing
            member("x", "t", json!({"read": "/data/ok"})),
        ],
        on_success: callback("t"),
        ..Default::default()
    }
    .plan(|| unreachable!())
    .unwrap();
    queue.flows().create(&plan, now_ms()).await.unwrap();
    let first = runner.until_settled("t", "b/x", WAIT).await;
    let first = [first, runner.after_drained(&queue, &["t"], WAIT).await].concat();
    assert_eq!(starts(&first, "t", "b/on_success"), 0, "{first:#?}");
    std::fs::write(data.path().join("ok"), "yes").unwrap();
    let retried = queue
        .dead()
        .retry(&queue.keys("t"), &["b/x".to_owned()], now_ms())
        .await
        .unwrap();
    assert_eq!(retried, ["b/x"]);
    let second = runner.until_settled("t", "b/on_success", WAIT).await;
    let later = runner.after_drained(&queue, &["t"], WAIT).await;
    let events = [second, later].concat();
    assert_eq!(starts(&events, "t", "b/on_success"), 1, "{events:#?}");
    let end = end_of(&queue, "t", "b/on_success").await;
    assert_eq!(end.state, EndState::Acked);
    assert_eq!(batch_seen(&end)["dead"], 0);
    crate::util::flow_done(&queue, "b").await;
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_javascript_callbacks_read_their_batch() {
    let project = crate::util::with_python_and_javascript(crate::util::probe_topics(&["rows"]));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let plan = BatchSpec {
        id: Some("langs".into()),
        jobs: vec![
            member("a", "rows", json!({})),
            member("x", "rows", json!({"then": "fail"})),
        ],
        on_complete: callback("py"),
        ..Default::default()
    };
    let mut js = plan.clone();
    js.id = Some("langs-js".into());
    js.on_complete = callback("js");
    for spec in [plan, js] {
        let plan = spec.plan(|| unreachable!()).unwrap();
        queue.flows().create(&plan, now_ms()).await.unwrap();
    }
    runner
        .until_all_settled(
            &[("py", "langs/on_complete"), ("js", "langs-js/on_complete")],
            WAIT,
        )
        .await;
    for (topic, id) in [("py", "langs"), ("js", "langs-js")] {
        let end = end_of(&queue, topic, &format!("{id}/on_complete")).await;
        assert_eq!(
            batch_seen(&end),
            json!({"id": id, "jobs": 2, "acked": 1, "dead": 1, "cancelled": 0, "failed": [format!("{id}/x")]}),
            "{topic}"
        );
    }
    runner.stop().await;
}
