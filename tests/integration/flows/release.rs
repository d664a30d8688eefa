//! Flows' dependencies released: a diamond on a Cluster, a fan-out of 1,000, the
//! failure policies, two ends at one instant, and the sweeper that finishes a
//! release a dead runner left.

use crate::util::{Project, Running, end_of, hourglass, result_json, starts};
use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use hourglass::redis::flow::{FlowJob, Policy};
use hourglass::redis::{EndState, Notice, Queue};
use serde_json::{Value, json};
use std::time::Duration;
use test_support::RedisCluster;

use super::*;

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
