//! Follow-up jobs: enqueued exactly when their parent acks, only to topics
//! the parent's `may_enqueue` allows; parked follow-ups of a runner that
//! died before delivering them are swept and delivered once; a deadline, a
//! priority and options together from each SDK (`enqueue-with`).

use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use hourglass::redis::{Done, Enqueued, NewJob, OUTBOX_SWEEP, Parked};

use test_support::components::{JS_SDK_PROBE, PY_PROBE};

use crate::util::{Project, RedisServer, Running, add_handler, enqueue, eventually, of};

const WAIT: Duration = Duration::from_secs(20);

const TOPICS: &str = r#"
[defaults]
max_attempts = 1

[[topic]]
name = "parent"
handler = "probe.wasm"
may_enqueue = ["child"]

[[topic]]
name = "child"
handler = "echo.wasm"

[[topic]]
name = "other"
handler = "echo.wasm"
"#;

fn plan(follow_ups: &str, then: &str) -> String {
    format!(r#"{{"follow_ups":[{follow_ups}],"then":"{then}"}}"#)
}

/// The length of the hash `key` (an outbox: follow-ups parked, not yet delivered).
async fn hlen(project: &Project, key: &str) -> u64 {
    let client = redis::Client::open(project.endpoint.urls()[0].as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("HLEN")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap()
}

async fn dead_reason(runner: &mut Running, topic: &str, id: &str) -> String {
    let events = runner.until_settled(topic, id, WAIT).await;
    match of(&events, topic, id).last() {
        Some(EventKind::Dead { reason }) => reason.clone(),
        other => panic!("expected {topic}/{id} dead, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_ups_appear_when_the_parent_acks_and_never_when_it_fails_or_traps() {
    let project = Project::new("concurrency = 4", TOPICS);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let child = queue.keys("child");

    let ok = plan(
        r#"{"topic":"child","payload":"now","id":"c1"},{"topic":"child","payload":"later","delay_ms":400,"id":"c2"}"#,
        "ack",
    );
    let parent = enqueue(&queue, "parent", &ok, 0, 0).await;
    let events = runner
        .until(WAIT, |seen| {
            ["c1", "c2"].iter().all(|id| {
                seen.iter()
                    .any(|e| e.topic == "child" && e.id == *id && e.kind == EventKind::Acked)
            })
        })
        .await;
    let acked_at = events
        .iter()
        .position(|e| e.topic == "parent" && e.id == parent && e.kind == EventKind::Acked)
        .expect("the parent acked");
    let first_child = events
        .iter()
        .position(|e| e.topic == "child")
        .expect("a child ran");
    assert!(
        acked_at < first_child,
        "a child ran before its parent acked: {events:#?}"
    );
    let c2_start = events.iter().find_map(|e| match e.kind {
        EventKind::Started {
            due_at_ms,
            started_at_ms,
            ..
        } if e.id == "c2" => Some((due_at_ms, started_at_ms)),
        _ => None,
    });
    let (due, started) = c2_start.expect("c2 started");
    assert!(started >= due, "the delayed follow-up started early");

    for then in ["fail", "panic"] {
        let id = format!("never-{then}");
        let doomed = plan(
            &format!(r#"{{"topic":"child","payload":"x","id":"{id}"}}"#),
            then,
        );
        let parent = enqueue(&queue, "parent", &doomed, 0, 0).await;
        let reason = dead_reason(&mut runner, "parent", &parent).await;
        let expected = match then {
            "fail" => "failed: asked to fail",
            _ => "panicked",
        };
        assert!(reason.contains(expected), "{then}: {reason}");
        assert!(
            queue
                .inspect(&child, &id, now_ms())
                .await
                .unwrap()
                .is_none(),
            "a parent that ended with {then} left a follow-up behind"
        );
    }
    let parked = queue
        .pipeline()
        .take_outbox(&queue.keys("parent"), now_ms() + 86_400_000, 100)
        .await
        .unwrap();
    assert!(parked.is_empty(), "nothing stays parked: {parked:?}");
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_to_a_topic_not_in_may_enqueue_is_refused() {
    let project = Project::new("concurrency = 4", TOPICS);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let parent = enqueue(
        &queue,
        "parent",
        &plan(r#"{"topic":"other","payload":"x","id":"o1"}"#, "ack"),
        0,
        0,
    )
    .await;
    let reason = dead_reason(&mut runner, "parent", &parent).await;
    assert!(reason.contains(r#"may not enqueue to "other""#), "{reason}");
    let other = queue.keys("other");
    assert!(
        queue
            .inspect(&other, "o1", now_ms())
            .await
            .unwrap()
            .is_none()
    );
    runner.stop().await;
}

#[tokio::test]
async fn follow_ups_parked_by_a_runner_that_died_are_swept_and_delivered_once() {
    let redis = RedisServer::start();
    let q = hourglass::redis::Queue::connect(&redis.url(), "t")
        .await
        .unwrap();
    let (parent, child) = (q.keys("parent"), q.keys("child"));
    let job = |id: &str| NewJob {
        id: Some(id.into()),
        payload: b"p".to_vec(),
        due_at_ms: 0,
        max_attempts: 0,
        ..Default::default()
    };
    q.enqueue(&parent, &[job("p1")], 0).await.unwrap();
    let claimed = q.pipeline().claim(&parent, 10, 1_000, 1).await.unwrap();
    let done = Done {
        logs: String::new(),
        notice: None,
        end: None,
        id: "p1".into(),
        attempt: claimed.jobs[0].attempt,
        follow_ups: vec![Parked {
            topic: "child".into(),
            job: job("k1"),
        }],
        flows: Vec::new(),
    };
    // acked at t=100, then the runner dies before delivering
    assert!(
        q.pipeline()
            .ack(&parent, &[done], 100, Default::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(q.inspect(&child, "k1", 100).await.unwrap().is_none());

    let sweep_at = 100 + OUTBOX_SWEEP.as_millis() as u64;
    assert!(
        q.pipeline()
            .take_outbox(&parent, sweep_at - 1, 10)
            .await
            .unwrap()
            .is_empty(),
        "not swept while its own runner may still deliver it"
    );
    let taken = q
        .pipeline()
        .take_outbox(&parent, sweep_at, 10)
        .await
        .unwrap();
    assert_eq!(taken.len(), 1);
    let (token, jobs) = &taken[0];
    assert_eq!(token, "1:p1");
    let jobs = jobs.clone().unwrap();
    assert_eq!(jobs.jobs[0].job.id.as_deref(), Some("k1"));
    // a second sweeper finds it held
    assert!(
        q.pipeline()
            .take_outbox(&parent, sweep_at, 10)
            .await
            .unwrap()
            .is_empty()
    );

    let entry = vec![(token.clone(), jobs)];
    q.pipeline()
        .deliver(&parent, &entry, sweep_at)
        .await
        .unwrap();
    assert!(q.inspect(&child, "k1", sweep_at).await.unwrap().is_some());
    // delivered twice (a sweeper that crashed after enqueueing): still one job
    q.pipeline()
        .deliver(&parent, &entry, sweep_at)
        .await
        .unwrap();
    let again = q.enqueue(&child, &[job("k1")], sweep_at).await.unwrap();
    assert_eq!(again, [Enqueued::Duplicate("k1".into())]);
    let later = sweep_at + 10 * OUTBOX_SWEEP.as_millis() as u64;
    assert!(
        q.pipeline()
            .take_outbox(&parent, later, 10)
            .await
            .unwrap()
            .is_empty(),
        "cleared once delivered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unique_follow_up_is_not_enqueued_again_within_its_window() {
    let project = Project::new("concurrency = 4", TOPICS);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let unique = plan(
        r#"{"topic":"child","payload":"once","id":"daily-7","unique_for_ms":60000}"#,
        "ack",
    );
    enqueue(&queue, "parent", &unique, 0, 0).await;
    runner.until_settled("child", "daily-7", WAIT).await;
    // the child is done and gone; a second parent asks for it again
    let second = enqueue(&queue, "parent", &unique, 0, 0).await;
    let events = runner.until_settled("parent", &second, WAIT).await;
    assert_eq!(
        of(&events, "parent", &second).last(),
        Some(&&EventKind::Acked)
    );
    // the ack parked the follow-up; once the parent's outbox is empty its
    // delivery is over, and a repeat it enqueued would be in the child topic:
    // wait for that to drain too, with every event until then
    let outbox = queue.keys("parent").outbox;
    eventually(WAIT, "the parent's outbox drained", || async {
        match hlen(&project, &outbox).await {
            0 => Ok(()),
            n => Err(format!("{n} entries")),
        }
    })
    .await;
    let later = runner.after_drained(&queue, &["child"], WAIT).await;
    assert!(
        of(&later, "child", "daily-7").is_empty(),
        "the repeat within the window was enqueued: {later:#?}"
    );
    // without an id a unique follow-up is refused: the parent fails with the reason
    let anonymous = plan(
        r#"{"topic":"child","payload":"x","unique_for_ms":1000}"#,
        "ack",
    );
    let id = enqueue(&queue, "parent", &anonymous, 0, 0).await;
    let reason = dead_reason(&mut runner, "parent", &id).await;
    assert!(reason.contains("needs an id"), "{reason}");
    runner.stop().await;
}

const OPTIONS: &str = r#"
[defaults]
max_attempts = 1

[[topic]]
name = "rust"
handler = "probe.wasm"
may_enqueue = ["later"]

[[topic]]
name = "py"
handler = "py_probe.wasm"
may_enqueue = ["later"]

[[topic]]
name = "js"
handler = "js_sdk_probe.wasm"
may_enqueue = ["later"]

[[topic]]
name = "later"
handler = "echo.wasm"
"#;

/// A parent's plan in `lang`'s probe: one follow-up to `later` with these
/// JSON fields (times in ms; the Python and JavaScript SDKs take seconds),
/// acking with a result.
fn asking(lang: &str, id: &str, fields: &[(&str, u64)], key: Option<&str>) -> String {
    let mut f = format!(r#""topic":"later","payload":"x","id":"{id}""#);
    for (name, v) in fields {
        f += &match (lang, *name) {
            ("rust", "priority") => format!(r#","priority":{v}"#),
            ("rust", "with_result") => r#","with_parent_result":true"#.to_owned(),
            ("rust", _) => format!(r#","{name}_ms":{v}"#),
            (_, "priority") => format!(r#","priority":{v}"#),
            (_, "with_result") => r#","with_result":true"#.to_owned(),
            (_, _) => format!(r#","{name}":{}"#, *v as f64 / 1000.0),
        };
    }
    if let Some(k) = key {
        f += &format!(r#","key":"{k}""#);
    }
    match lang {
        "rust" => format!(r#"{{"follow_ups":[{{{f}}}],"result":"r"}}"#),
        _ => format!(r#"{{"follow_up":{{{f}}},"result":"r"}}"#),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_ups_carry_a_deadline_a_priority_and_options_together_from_each_sdk() {
    let project = Project::new("concurrency = 4", OPTIONS);
    add_handler(&project, "py_probe.wasm", PY_PROBE);
    add_handler(&project, "js_sdk_probe.wasm", JS_SDK_PROBE);
    let queue = project.queue().await;
    let later = queue.keys("later");
    // the follow-ups wait where they land until the test looks at them
    queue.admin().set_paused(&later, true).await.unwrap();
    let mut runner = Running::start(project.config()).await;
    for lang in ["rust", "py", "js"] {
        let soon = asking(lang, &format!("soon-{lang}"), &[("expires_in", 300)], None);
        let all = [("priority", 7), ("unique_for", 60_000), ("with_result", 1)];
        let low = asking(lang, &format!("low-{lang}"), &all, Some("acme"));
        let before = now_ms();
        for plan in [soon, low] {
            let id = enqueue(&queue, lang, &plan, 0, 0).await;
            let events = runner.until_settled(lang, &id, WAIT).await;
            assert_eq!(
                of(&events, lang, &id).last(),
                Some(&&EventKind::Acked),
                "{lang}: {plan}"
            );
        }
        let after = now_ms();
        let seen = |id: String| {
            let queue = &queue;
            let later = &later;
            async move {
                eventually(WAIT, "the follow-up delivered", || async {
                    match queue.inspect(later, &id, now_ms()).await.unwrap() {
                        Some(view) => Ok(view),
                        None => Err(format!("{id} not there yet")),
                    }
                })
                .await
            }
        };
        let view = seen(format!("soon-{lang}")).await;
        let deadline = view.expires_at_ms.expect("a deadline");
        assert!(
            (before + 300..=after + 300).contains(&deadline),
            "{lang}: deadline {deadline} not 300 ms after the ack ({before}..{after})"
        );
        assert_eq!(view.priority, 0, "{lang}");
        let view = seen(format!("low-{lang}")).await;
        assert_eq!(
            (view.priority, view.key.as_deref(), view.expires_at_ms),
            (7, Some("acme"), None),
            "{lang}"
        );
        let record = view.record.expect("a record").expect("readable");
        // "r", as JSON from Rust, as text from the others
        let handed = record.parent_result.unwrap_or_default();
        assert!(
            handed.contains(&b'r'),
            "{lang}: its parent's result handed on: {handed:?}"
        );
        let taken = redis::Client::open(project.endpoint.urls()[0].as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let exists: u64 = redis::cmd("EXISTS")
            .arg(later.unique(&format!("low-{lang}")))
            .query_async(&mut taken.clone())
            .await
            .unwrap();
        assert_eq!(exists, 1, "{lang}: its id reserved for the window");
        // bad options fail the parent, saying why; nothing is enqueued
        for (bad, why) in [
            (asking(lang, "x", &[("priority", 10)], None), "out of range"),
            (
                asking(lang, "x", &[("delay", 500), ("expires_in", 500)], None),
                "expire before it is due",
            ),
        ] {
            let id = enqueue(&queue, lang, &bad, 0, 0).await;
            let reason = dead_reason(&mut runner, lang, &id).await;
            assert!(reason.contains(why), "{lang}: {reason}");
        }
    }
    // past its deadline, the expiring follow-up is not run; the others are
    tokio::time::sleep(Duration::from_millis(400)).await;
    queue.admin().set_paused(&later, false).await.unwrap();
    let events = runner.after_drained(&queue, &["later"], WAIT).await;
    for lang in ["rust", "py", "js"] {
        let soon = of(&events, "later", &format!("soon-{lang}"));
        assert!(
            matches!(soon.last(), Some(EventKind::Expired { dropped: false, .. })),
            "{lang}: {soon:?}"
        );
        assert!(!soon.iter().any(|k| matches!(k, EventKind::Started { .. })));
        let low = of(&events, "later", &format!("low-{lang}"));
        assert_eq!(low.last(), Some(&&EventKind::Acked), "{lang}");
    }
    assert!(
        !of(&events, "later", "x")
            .iter()
            .any(|k| matches!(k, EventKind::Started { .. })),
        "a refused follow-up was enqueued"
    );
    runner.stop().await;
}
