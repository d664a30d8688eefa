//! Flows: a job runs once after every job it depends on has ended, with
//! their results; across topics on a three-master Cluster; `require` and
//! `ignore`; a release left by a runner that died is swept and enqueued
//! once; two ends at the same instant release their dependent once; bad
//! flows are refused whole.

use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use hourglass::redis::flow::{Dep, FlowJob, FlowSpec, Policy};
use hourglass::redis::{EndState, JobEnd, Notice, Queue};
use serde_json::{Value, json};
use test_support::RedisCluster;

use crate::util::{Project, Running, end_of, hourglass, result_json, starts};

const WAIT: Duration = Duration::from_secs(30);

fn job(name: &str, topic: &str, payload: Value, after: &[(&str, Policy)]) -> FlowJob {
    FlowJob {
        name: name.into(),
        topic: topic.into(),
        payload: payload.to_string().into_bytes(),
        after: after
            .iter()
            .map(|&(name, policy)| Dep {
                name: name.into(),
                policy,
            })
            .collect(),
        max_attempts: 0,
    }
}

async fn create(queue: &Queue, id: &str, jobs: Vec<FlowJob>) {
    let plan = FlowSpec {
        id: Some(id.into()),
        jobs,
        fail_fast: false,
    }
    .plan(|| unreachable!())
    .unwrap();
    queue.flows().create(&plan, now_ms()).await.unwrap();
}

/// Flow `id`: `a` and `b`, then `p` requiring both.
async fn two_then_one(queue: &Queue, id: &str) {
    let both = [("a", Policy::Require), ("b", Policy::Require)];
    let jobs = vec![
        job("a", "t", json!({}), &[]),
        job("b", "t", json!({}), &[]),
        job("p", "t", json!({}), &both),
    ];
    create(queue, id, jobs).await;
}

/// An acked end, now.
fn acked() -> JobEnd {
    JobEnd {
        history: Vec::new(),
        logs: None,
        state: EndState::Acked,
        result: None,
        reason: None,
        version: None,
        attempts: 1,
        at_ms: now_ms(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diamond_across_three_topics_on_a_cluster_runs_each_job_once_after_its_dependencies() {
    let cluster = RedisCluster::start();
    let project = Project::on_cluster(
        cluster.urls(),
        "concurrency = 4",
        &crate::util::probe_topics(&["first", "middle", "last"]),
    );
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let require = Policy::Require;
    create(
        &queue,
        "diamond",
        vec![
            job(
                "d",
                "last",
                json!({"echo_deps": true}),
                &[("b", require), ("c", require)],
            ),
            job("a", "first", json!({"result": {"a": 1}}), &[]),
            job(
                "b",
                "middle",
                json!({"result": "from b"}),
                &[("a", require)],
            ),
            job(
                "c",
                "middle",
                json!({"result": {"c": [3]}}),
                &[("a", require)],
            ),
        ],
    )
    .await;
    let events = runner.until_settled("last", "diamond/d", WAIT).await;
    // every later event too: a duplicate start cannot hide
    let later = runner
        .after_drained(&queue, &["first", "middle", "last"], WAIT)
        .await;
    let events = [events, later].concat();
    for (topic, id) in [
        ("first", "diamond/a"),
        ("middle", "diamond/b"),
        ("middle", "diamond/c"),
        ("last", "diamond/d"),
    ] {
        assert_eq!(
            starts(&events, topic, id),
            1,
            "{id} started once: {events:#?}"
        );
    }
    let position = |topic: &str, id: &str, acked: bool| {
        events
            .iter()
            .position(|e| {
                e.topic == topic
                    && e.id == id
                    && if acked {
                        e.kind == EventKind::Acked
                    } else {
                        matches!(e.kind, EventKind::Started { .. })
                    }
            })
            .unwrap_or_else(|| panic!("{id} acked={acked} in {events:#?}"))
    };
    assert!(position("first", "diamond/a", true) < position("middle", "diamond/b", false));
    assert!(position("first", "diamond/a", true) < position("middle", "diamond/c", false));
    assert!(position("middle", "diamond/b", true) < position("last", "diamond/d", false));
    assert!(position("middle", "diamond/c", true) < position("last", "diamond/d", false));
    let d = end_of(&queue, "last", "diamond/d").await;
    assert_eq!(d.state, EndState::Acked);
    assert_eq!(
        result_json(&d),
        json!({"deps": [
            {"name": "b", "topic": "middle", "id": "diamond/b", "ended": "acked", "result": "from b", "reason": null},
            {"name": "c", "topic": "middle", "id": "diamond/c", "ended": "acked", "result": {"c": [3]}, "reason": null},
        ], "batch": null})
    );
    let flow = crate::util::flow_done(&queue, "diamond").await;
    assert!(
        flow.jobs
            .iter()
            .all(|j| j.ended.as_deref() == Some("acked"))
    );
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fan_out_of_1000_children_runs_its_parent_once_with_every_result() {
    let project = Project::new(
        "concurrency = 8",
        &crate::util::probe_topics(&["child", "parent"]),
    );
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let mut jobs: Vec<FlowJob> = (0..1000)
        .map(|i| job(&format!("c{i}"), "child", json!({"result": {"i": i}}), &[]))
        .collect();
    let names: Vec<String> = (0..1000).map(|i| format!("c{i}")).collect();
    let after: Vec<(&str, Policy)> = names
        .iter()
        .map(|n| (n.as_str(), Policy::Require))
        .collect();
    jobs.push(job("all", "parent", json!({"echo_deps": true}), &after));
    create(&queue, "fan", jobs).await;
    let events = runner
        .until_settled("parent", "fan/all", Duration::from_secs(120))
        .await;
    assert_eq!(starts(&events, "parent", "fan/all"), 1);
    let end = end_of(&queue, "parent", "fan/all").await;
    let deps = result_json(&end)["deps"].as_array().cloned().unwrap();
    assert_eq!(deps.len(), 1000);
    for (i, d) in deps.iter().enumerate() {
        assert_eq!(d["name"], format!("c{i}"));
        assert_eq!(d["result"], json!({"i": i}), "{d}");
    }
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_dead_letters_the_dependent_unrun_and_ignore_runs_it_seeing_the_failure() {
    let project = Project::new("concurrency = 4", &crate::util::probe_topics(&["work"]));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    create(
        &queue,
        "f",
        vec![
            job("x", "work", json!({"then": "fail"}), &[]),
            job("ok", "work", json!({"result": 1}), &[]),
            job(
                "strict",
                "work",
                json!({"echo_deps": true}),
                &[("x", Policy::Require), ("ok", Policy::Require)],
            ),
            job(
                "lenient",
                "work",
                json!({"echo_deps": true}),
                &[("x", Policy::Ignore), ("ok", Policy::Require)],
            ),
            job(
                "after-strict",
                "work",
                json!({}),
                &[("strict", Policy::Require)],
            ),
        ],
    )
    .await;
    let events = runner
        .until(WAIT, |seen| {
            ["f/lenient", "f/after-strict"].iter().all(|id| {
                seen.iter()
                    .any(|e| e.id == *id && crate::util::is_final(&e.kind))
            })
        })
        .await;
    assert_eq!(
        starts(&events, "work", "f/strict"),
        0,
        "strict ran: {events:#?}"
    );
    let strict = end_of(&queue, "work", "f/strict").await;
    assert_eq!(strict.state, EndState::Dead);
    let reason = strict.reason.unwrap();
    assert!(
        reason.contains(r#"dependency "x" (topic work, job f/x) was dead-lettered"#)
            && reason.contains("asked to fail"),
        "{reason}"
    );
    // inspect shows the dead letter's place in its flow
    let json = hourglass(&project, &["inspect", "work", "f/strict", "--json"]);
    let json: Value = serde_json::from_slice(&json.stdout).unwrap();
    let deps = &json["flow"]["dependencies"];
    assert_eq!(
        deps[0],
        json!({"name": "x", "topic": "work", "id": "f/x", "policy": "require", "ended": "dead"})
    );
    assert_eq!(deps[1]["ended"], "acked");
    let text = hourglass(&project, &["inspect", "work", "f/strict"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("flow       f, after x dead, ok acked, before after-strict dead"),
        "{text}"
    );
    assert_eq!(
        json["flow"]["dependents"],
        json!([{"name": "after-strict", "ended": "dead"}])
    );
    // and what required it in turn
    let after = end_of(&queue, "work", "f/after-strict").await;
    assert_eq!(after.state, EndState::Dead);
    assert!(after.reason.unwrap().contains(r#"dependency "strict""#));
    let lenient = end_of(&queue, "work", "f/lenient").await;
    assert_eq!(lenient.state, EndState::Acked);
    let deps = result_json(&lenient)["deps"].clone();
    assert_eq!(deps[0]["name"], "x");
    assert_eq!(deps[0]["ended"], "dead");
    assert!(
        deps[0]["reason"]
            .as_str()
            .unwrap()
            .contains("asked to fail")
    );
    assert_eq!(deps[1]["ended"], "acked");
    assert_eq!(deps[1]["result"], 1);
    crate::util::flow_done(&queue, "f").await;
    runner.stop().await;
}

/// Two notices at the same instant (two runners acking the last two
/// children) release the dependent once, however the race falls; a
/// repeated delivery of a notice changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_ends_at_the_same_instant_release_their_dependent_once() {
    let project = Project::new("", &crate::util::probe_topics(&["t"]));
    let (q1, q2) = (project.queue().await, project.queue().await);
    for round in 0..20 {
        let id = format!("race-{round}");
        two_then_one(&q1, &id).await;
        let notice = |index: u32| Notice {
            job: hourglass::redis::FlowRef {
                flow: id.clone(),
                index,
            },
            end: acked(),
        };
        let (na, nb) = (notice(0), notice(1));
        let (sa, sb) = ([&na], [&nb]);
        let (ra, rb) = tokio::join!(q1.flows().end(&sa, now_ms()), q2.flows().end(&sb, now_ms()));
        let released: usize =
            ra.unwrap().values().sum::<usize>() + rb.unwrap().values().sum::<usize>();
        assert_eq!(
            released, 1,
            "round {round}: the dependent was enqueued {released} times"
        );
        // one end delivered twice at once (a sweep and its runner): counted once
        let twice = format!("twice-{round}");
        two_then_one(&q1, &twice).await;
        let mut na2 = notice(0);
        na2.job.flow.clone_from(&twice);
        let same = [&na2];
        let (r1, r2) = tokio::join!(
            q1.flows().end(&same, now_ms()),
            q2.flows().end(&same, now_ms())
        );
        let early = r1.unwrap().values().sum::<usize>() + r2.unwrap().values().sum::<usize>();
        assert_eq!(
            early, 0,
            "round {round}: a's end counted twice released p before b ended"
        );
        // delivered again (a sweep after a runner died mid-delivery): nothing more
        let again = q1.flows().end(&[&na, &nb], now_ms()).await.unwrap();
        assert_eq!(again.values().sum::<usize>(), 0, "round {round}");
        let p = q1
            .inspect(&q1.keys("t"), &format!("{id}/p"), now_ms())
            .await
            .unwrap();
        assert!(
            p.is_some(),
            "round {round}: the dependent is not in its topic"
        );
    }
}

/// Flow `id` (`a`, then `p` after it) with `a`'s end told and `p`'s
/// release parked as `flow_end.lua` does for a runner that dies right after
/// it: in the flow's outbox, sweep time 0, the flow marked for the sweep.
async fn park_as_a_dead_runner(
    project: &Project,
    queue: &Queue,
    id: &str,
) -> (
    hourglass::redis::TopicKeys,
    redis::aio::MultiplexedConnection,
) {
    let after_a = [("a", Policy::Require)];
    let jobs = vec![
        job("a", "t", json!({}), &[]),
        job("p", "t", json!({"result": "p ran"}), &after_a),
    ];
    create(queue, id, jobs).await;
    let keys = queue.flows().keys(id);
    let mut conn = redis::Client::open(project.endpoint.urls()[0].as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let script = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../client/lua/flow_end.lua"
    ))
    .unwrap();
    let parked: Vec<redis::Value> = redis::Script::new(&script)
        .key(&keys.flow)
        .key(&keys.outbox)
        .key(&keys.outbox_due)
        .arg(now_ms())
        .arg(0)
        .arg(60_000)
        .arg("test")
        .arg(0)
        .arg("acked")
        .arg(acked().encode())
        .arg("0")
        .invoke_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(parked.len(), 3, "no cancel, one release parked: {parked:?}");
    let _: i64 = redis::cmd("ZADD")
        .arg("test:flows:due")
        .arg(0)
        .arg(id)
        .query_async(&mut conn)
        .await
        .unwrap();
    (keys, conn)
}

/// A release another sweeper holds (and may die delivering) keeps its flow
/// in the sweep's index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_whose_release_another_sweeper_holds_stays_indexed() {
    let project = Project::new("", &crate::util::probe_topics(&["t"]));
    let queue = project.queue().await;
    let (keys, mut conn) = park_as_a_dead_runner(&project, &queue, "held").await;
    let now = now_ms();
    let held = queue.pipeline().take_outbox(&keys, now, 10).await.unwrap();
    assert_eq!(held.len(), 1, "the other sweeper holds the release");
    let new = queue.flows().sweep(now, 100).await.unwrap();
    assert_eq!(
        new.values().sum::<usize>(),
        0,
        "a held release is not delivered twice"
    );
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg("test:flows:due")
        .arg("held")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        score.is_some_and(|s| s as u64 > now),
        "the flow left the index: {score:?}"
    );
    // once the hold ends, a sweep delivers it
    let later = now + 60_000;
    let new = queue.flows().sweep(later, 100).await.unwrap();
    assert_eq!(new.get("t"), Some(&1), "{new:?}");
}

/// A runner that parked a release and died before enqueueing it: another
/// runner's sweep enqueues it, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_left_by_a_runner_that_died_is_swept_and_runs_once() {
    let project = Project::new("concurrency = 2", &crate::util::probe_topics(&["t"]));
    let queue = project.queue().await;
    let (keys, mut conn) = park_as_a_dead_runner(&project, &queue, "left").await;
    // the job a's own attempt is irrelevant here: p is released already
    let mut runner = Running::start(project.config()).await;
    let events = runner.until_settled("t", "left/p", WAIT).await;
    let later = runner.after_drained(&queue, &["t"], WAIT).await;
    let events = [events, later].concat();
    assert_eq!(starts(&events, "t", "left/p"), 1, "{events:#?}");
    let outbox: u64 = redis::cmd("HLEN")
        .arg(&keys.outbox)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(outbox, 0, "the swept release was cleared");
    runner.stop().await;
}

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

/// Whether any of `ids` started (in any topic).
fn any_started(events: &[hourglass::events::Event], ids: &[&str]) -> Vec<String> {
    events
        .iter()
        .filter(|e| ids.contains(&e.id.as_str()) && matches!(e.kind, EventKind::Started { .. }))
        .map(|e| e.id.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_flow_mid_way_cancels_every_job_not_started() {
    let project = Project::new("concurrency = 1", &crate::util::probe_topics(&["t"]));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let slow = json!({"sleep_ms": 1500});
    create(
        &queue,
        "mid",
        vec![
            job("a", "t", slow.clone(), &[]),
            job("b", "t", slow, &[]),
            job("c", "t", json!({}), &[("a", Policy::Require)]),
            job(
                "d",
                "t",
                json!({}),
                &[("c", Policy::Ignore), ("b", Policy::Ignore)],
            ),
        ],
    )
    .await;
    // one root runs (concurrency 1), the other waits in its topic
    let first = runner
        .until(WAIT, |seen| {
            !any_started(seen, &["mid/a", "mid/b"]).is_empty()
        })
        .await;
    let out = hourglass(&project, &["flow", "cancel", "mid"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("cancelled flow mid (2 jobs cancelled in their topics"),
        "{stdout}"
    );
    let later = runner.after_drained(&queue, &["t"], WAIT).await;
    // let a late start show itself: the sleeping attempt ends meanwhile
    tokio::time::sleep(Duration::from_secs(2)).await;
    let events = [first, later].concat();
    assert_eq!(
        any_started(&events, &["mid/a", "mid/b", "mid/c", "mid/d"]).len(),
        1,
        "{events:#?}"
    );
    let flow = queue.flows().show("mid").await.unwrap().unwrap();
    assert!(
        flow.cancelled_ms.is_some() && flow.done_ms.is_some(),
        "{flow:?}"
    );
    for j in &flow.jobs {
        assert_eq!(j.ended.as_deref(), Some("cancelled"), "{flow:?}");
    }
    let shown = hourglass(&project, &["flow", "show", "mid"]);
    assert!(String::from_utf8_lossy(&shown.stdout).contains("4 cancelled"));
    assert_eq!(
        hourglass(&project, &["flow", "cancel", "nope"])
            .status
            .code(),
        Some(3)
    );
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_fast_cancels_the_rest_when_one_job_dies() {
    let project = Project::new("concurrency = 2", &crate::util::probe_topics(&["t"]));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let plan = FlowSpec {
        id: Some("ff".into()),
        jobs: vec![
            job("x", "t", json!({"sleep_ms": 300, "then": "fail"}), &[]),
            job("s", "t", json!({"sleep_ms": 3000}), &[]),
            job(
                "w",
                "t",
                json!({}),
                &[("s", Policy::Ignore), ("x", Policy::Ignore)],
            ),
        ],
        fail_fast: true,
    }
    .plan(|| unreachable!())
    .unwrap();
    queue.flows().create(&plan, now_ms()).await.unwrap();
    let first = runner.until_settled("t", "ff/x", WAIT).await;
    let later = runner.after_drained(&queue, &["t"], WAIT).await;
    let events = [first, later].concat();
    assert!(
        any_started(&events, &["ff/w"]).is_empty(),
        "w ran: {events:#?}"
    );
    let flow = crate::util::flow_done(&queue, "ff").await;
    let states: Vec<_> = flow.jobs.iter().map(|j| j.ended.as_deref()).collect();
    assert_eq!(
        states,
        [Some("dead"), Some("cancelled"), Some("cancelled")],
        "{flow:?}"
    );
    runner.stop().await;
}

/// fail_fast: the end that dead-letters `x` also releases `q`, which waits
/// for nothing else (`ignore`); the cancel that end raises comes first, so
/// `q` never starts (it used to start ~5 ms later, then its ack was
/// discarded as cancelled while it ran).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_fast_never_starts_a_job_the_dead_job_released() {
    let project = Project::new("concurrency = 2", &crate::util::probe_topics(&["t"]));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let plan = FlowSpec {
        id: Some("ffq".into()),
        jobs: vec![
            job("x", "t", json!({"then": "fail"}), &[]),
            job("q", "t", json!({}), &[("x", Policy::Ignore)]),
        ],
        fail_fast: true,
    }
    .plan(|| unreachable!())
    .unwrap();
    queue.flows().create(&plan, now_ms()).await.unwrap();
    let first = runner.until_settled("t", "ffq/x", WAIT).await;
    let flow = crate::util::flow_done(&queue, "ffq").await;
    let later = runner.after_drained(&queue, &["t"], WAIT).await;
    let events = [first, later].concat();
    assert!(
        any_started(&events, &["ffq/q"]).is_empty(),
        "q started: {events:#?}"
    );
    let states: Vec<_> = flow.jobs.iter().map(|j| j.ended.as_deref()).collect();
    assert_eq!(states, [Some("dead"), Some("cancelled")], "{flow:?}");
    assert_eq!(
        flow.jobs[1].reason.as_deref(),
        Some("flow ffq was cancelled"),
        "{flow:?}"
    );
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

/// A dependency dead-lettered, its dependents dead-lettered unrun because
/// of it (and theirs in turn); the dependency retried from the dead-letter
/// set acks: the flow goes on, each blocked job running once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retrying_a_dead_dependency_resumes_the_flow() {
    let data = tempfile::tempdir().unwrap();
    let mut toml = crate::util::probe_topics(&["t"]);
    toml = toml.replace(
        "handler = \"probe.wasm\"\n",
        &format!(
            "handler = \"probe.wasm\"\ngrants = {{ dirs = [{{ host = \"{}\", guest = \"/data\" }}] }}\n",
            data.path().display()
        ),
    );
    let project = Project::new("concurrency = 2", &toml);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    create(
        &queue,
        "resume",
        vec![
            // fails while /data/ok is missing
            job("x", "t", json!({"read": "/data/ok", "result": "x ok"}), &[]),
            job(
                "p",
                "t",
                json!({"echo_deps": true}),
                &[("x", Policy::Require)],
            ),
            job(
                "k",
                "t",
                json!({"result": "k ran"}),
                &[("p", Policy::Require)],
            ),
        ],
    )
    .await;
    let first = runner.until_settled("t", "resume/k", WAIT).await;
    assert_eq!(end_of(&queue, "t", "resume/p").await.state, EndState::Dead);
    assert_eq!(end_of(&queue, "t", "resume/k").await.state, EndState::Dead);
    std::fs::write(data.path().join("ok"), "yes").unwrap();
    let keys = queue.keys("t");
    let retried = queue
        .dead()
        .retry(&keys, &["resume/x".to_owned()], now_ms())
        .await
        .unwrap();
    assert_eq!(retried, ["resume/x"]);
    let second = runner.until_settled("t", "resume/k", WAIT).await;
    let later = runner.after_drained(&queue, &["t"], WAIT).await;
    let events = [first, second, later].concat();
    assert_eq!(starts(&events, "t", "resume/p"), 1, "{events:#?}");
    assert_eq!(starts(&events, "t", "resume/k"), 1, "{events:#?}");
    let p = end_of(&queue, "t", "resume/p").await;
    assert_eq!(p.state, EndState::Acked, "{p:?}");
    assert_eq!(result_json(&p)["deps"][0]["result"], "x ok");
    assert_eq!(result_json(&end_of(&queue, "t", "resume/k").await), "k ran");
    let flow = crate::util::flow_done(&queue, "resume").await;
    assert!(
        flow.jobs
            .iter()
            .all(|j| j.ended.as_deref() == Some("acked")),
        "{flow:?}"
    );
    runner.stop().await;
}
