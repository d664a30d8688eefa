//! Durable sleeps and signals: no slot held, `wake`, signals before and after
//! the wait, a timeout, a cancel frees the journal, a restart wakes on time, one
//! job signalling another, in Python and JavaScript.

use crate::util::{
    Project, Running, enqueue, eventually, hourglass, hourglass_within, of, settled,
};
use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use std::time::Duration;
use test_support::{HttpServer, Reply};

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_sleep_holds_no_slot_and_wakes_early_on_command() {
    let (shop, project, queue, mut running) =
        serving("concurrency = 2", "concurrency = 1", "").await;
    let keys = queue.keys("checkout");
    let id = enqueue(
        &queue,
        "checkout",
        &order(&shop, r#", "sleep_ms": 3600000"#),
        0,
        0,
    )
    .await;
    until_suspended(&queue, &id).await;
    let stats = queue.stats(&keys, now_ms()).await.unwrap();
    assert_eq!((stats.suspended, stats.scheduled, stats.running), (1, 1, 0));
    let inspect = hourglass(&project, &["inspect", "checkout", &id]);
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(text.contains("waits for a durable sleep"), "{text}");
    assert!(text.contains("2 steps"), "{text}");
    assert!(
        text.contains("charge") && text.contains("reserve"),
        "{text}"
    );
    // its handler ran, but a suspension uses no attempt: the text says so
    assert!(
        text.contains("0 used of") && text.contains("a durable sleep or wait uses no attempt"),
        "{text}"
    );
    // journal --json is exactly inspect --json's `journal`
    let journal = hourglass(&project, &["journal", "checkout", &id, "--json"]);
    let journal: serde_json::Value = serde_json::from_slice(&journal.stdout).unwrap();
    let view = hourglass(&project, &["inspect", "checkout", &id, "--json"]);
    let view: serde_json::Value = serde_json::from_slice(&view.stdout).unwrap();
    assert_eq!(
        journal, view["journal"],
        "journal --json and inspect --json differ"
    );
    assert!(!view["suspended"].is_null(), "{view:#}");

    // the one slot serves a thousand other jobs while the job sleeps
    let others: Vec<hourglass::redis::NewJob> = (0..1000)
        .map(|i| hourglass::redis::NewJob {
            id: Some(format!("other-{i}")),
            payload: br#"{"noop": true}"#.to_vec(),
            due_at_ms: now_ms(),
            ..Default::default()
        })
        .collect();
    queue.enqueue(&keys, &others, now_ms()).await.unwrap();
    let flowed = std::time::Instant::now();
    eventually(Duration::from_secs(120), "the other jobs done", || async {
        match queue.stats(&keys, now_ms()).await.unwrap() {
            s if s.ready == 0 && s.running == 0 && s.scheduled == 1 => Ok(()),
            s => Err(format!("{s:?}")),
        }
    })
    .await;
    eprintln!("1,000 jobs beside a sleeping one: {:?}", flowed.elapsed());

    let out = hourglass_within(
        &project,
        &["wake", "checkout", &id],
        Duration::from_secs(30),
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    let events = running
        .until_settled("checkout", &id, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "checkout", &id), Ok(()));
    assert_eq!(
        calls(&shop),
        [1, 1, 1, 0, 0],
        "the steps before the sleep replayed"
    );
    let mine = of(&events, "checkout", &id);
    assert!(
        mine.iter()
            .any(|k| matches!(k, EventKind::Suspended { signal: None, .. })),
        "{mine:?}"
    );
    let acked = events
        .iter()
        .find(|e| e.id == id && e.kind == EventKind::Acked)
        .unwrap();
    assert_eq!(acked.attempt, 1, "a sleep uses no attempt");

    // waking it again: no such job now
    let out = hourglass(&project, &["wake", "checkout", &id]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_before_and_after_the_wait_and_a_timeout() {
    let (shop, project, queue, mut running) = serving("concurrency = 4", "", "").await;
    let approval = r#", "approval_ms": 600000"#;

    // after the wait: the signal wakes it
    let waits = enqueue(&queue, "checkout", &order(&shop, approval), 0, 0).await;
    until_suspended(&queue, &waits).await;
    let out = hourglass(&project, &["signal", "checkout", &waits, "approved", "ana"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("runs now"),
        "{out:?}"
    );
    let events = running
        .until_settled("checkout", &waits, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "checkout", &waits), Ok(()));
    let approved: Vec<_> = shop
        .received()
        .into_iter()
        .filter(|r| r.path.starts_with("/approved?"))
        .collect();
    assert_eq!(approved.len(), 1);
    assert_eq!(
        approved[0].body, b"ana",
        "the signal's payload reached the handler"
    );
    // a repeated signal to a finished job: no such job
    let out = hourglass(&project, &["signal", "checkout", &waits, "approved", "bo"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");

    // before the wait: kept, and the wait returns it at once
    let early = enqueue(&queue, "checkout", &order(&shop, approval), 1500, 0).await;
    let out = hourglass(&project, &["signal", "checkout", &early, "approved", "cy"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("kept"),
        "{out:?}"
    );
    let out = hourglass(&project, &["signal", "checkout", &early, "approved", "dan"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("the first one stands"),
        "{out:?}"
    );
    // --json: the API's words
    let out = hourglass(
        &project,
        &["signal", "checkout", &early, "approved", "eve", "--json"],
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"id": early, "signal": "approved", "delivered": "duplicate"}),
        "{out:?}"
    );
    let events = running
        .until_settled("checkout", &early, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "checkout", &early), Ok(()));
    let bodies: Vec<Vec<u8>> = shop
        .received()
        .into_iter()
        .filter(|r| r.path.starts_with("/approved?"))
        .map(|r| r.body)
        .collect();
    assert_eq!(
        bodies.last().map(Vec::as_slice),
        Some(&b"cy"[..]),
        "the first signal stood"
    );
    assert!(
        !of(&events, "checkout", &early)
            .iter()
            .any(|k| matches!(k, EventKind::Suspended { .. })),
        "a signal sent before the wait: no suspension"
    );

    // a timeout: the handler decides (refund, fail)
    let late = enqueue(
        &queue,
        "checkout",
        &order(&shop, r#", "approval_ms": 300"#),
        0,
        0,
    )
    .await;
    let events = running
        .until_settled("checkout", &late, Duration::from_secs(60))
        .await;
    let reason = settled(&events, "checkout", &late).unwrap_err();
    assert!(reason.contains("not approved in time"), "{reason}");
    assert_eq!(calls(&shop)[4], 1, "one refund");

    // no such job: exit 3; a dead letter: exit 1, saying so
    let out = hourglass(&project, &["signal", "checkout", "nobody", "approved"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let out = hourglass(&project, &["signal", "checkout", &late, "approved"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("dead-lettered"),
        "{out:?}"
    );
    let out = hourglass(&project, &["signal", "checkout", &late, ""]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an empty name is bad input: {out:?}"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_suspended_job_frees_its_journal() {
    let (shop, project, queue, running) = serving("concurrency = 2", "", "").await;
    let keys = queue.keys("checkout");
    let id = enqueue(
        &queue,
        "checkout",
        &order(&shop, r#", "sleep_ms": 3600000"#),
        0,
        0,
    )
    .await;
    until_suspended(&queue, &id).await;
    assert!(journal_exists(&queue, &id).await);
    // its steps ran on its payload: not replaced
    let out = hourglass(
        &project,
        &["enqueue", "checkout", "{}", "--id", &id, "--replace"],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("has a journal"),
        "{out:?}"
    );
    let out = hourglass(&project, &["cancel", "checkout", &id]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        !journal_exists(&queue, &id).await,
        "the journal went with the job"
    );
    let stats = queue.stats(&keys, now_ms()).await.unwrap();
    assert_eq!((stats.suspended, stats.scheduled), (0, 0));
    let out = hourglass(&project, &["wake", "checkout", &id]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_restarted_while_jobs_sleep_wakes_them_on_time() {
    let shop = HttpServer::start(vec![Reply::status(200, "ch_1")]);
    let project = Project::new("concurrency = 2", &topics(&shop, ""));
    let queue = project.queue().await;
    let first = Running::start(project.config()).await;
    let id = enqueue(
        &queue,
        "checkout",
        &order(&shop, r#", "sleep_ms": 2000"#),
        0,
        0,
    )
    .await;
    until_suspended(&queue, &id).await;
    first.stop().await;
    let mut second = Running::start(project.config()).await;
    let events = second
        .until_settled("checkout", &id, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "checkout", &id), Ok(()));
    assert_eq!(calls(&shop), [1, 1, 1, 0, 0]);
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_job_signals_another_through_its_may_enqueue() {
    let more = "\n[[topic]]\nname = \"waker\"\nhandler = \"probe.wasm\"\nmax_attempts = 1\n\
                may_enqueue = [\"checkout\"]\n\n\
                [[topic]]\nname = \"stranger\"\nhandler = \"probe.wasm\"\nmax_attempts = 1\n";
    let (shop, _project, queue, mut running) = serving("concurrency = 4", "", more).await;
    let id = enqueue(
        &queue,
        "checkout",
        &order(&shop, r#", "approval_ms": 600000"#),
        0,
        0,
    )
    .await;
    until_suspended(&queue, &id).await;
    let plan = |topic: &str| {
        format!(
            r#"{{"signal": {{"topic": "checkout", "id": "{id}", "name": "approved", "payload": "{topic}"}}}}"#
        )
    };
    let refused = enqueue(&queue, "stranger", &plan("stranger"), 0, 0).await;
    let events = running
        .until_settled("stranger", &refused, Duration::from_secs(60))
        .await;
    let reason = settled(&events, "stranger", &refused).unwrap_err();
    assert!(
        reason.contains("may not signal jobs of \"checkout\""),
        "{reason}"
    );
    let waker = enqueue(&queue, "waker", &plan("waker"), 0, 0).await;
    let events = running
        .until(Duration::from_secs(60), |seen| {
            [("waker", &waker), ("checkout", &id)].iter().all(|(t, j)| {
                seen.iter()
                    .any(|e| e.topic == *t && &&e.id == j && crate::util::is_final(&e.kind))
            })
        })
        .await;
    assert_eq!(settled(&events, "waker", &waker), Ok(()));
    assert_eq!(settled(&events, "checkout", &id), Ok(()));
    let approved: Vec<_> = shop
        .received()
        .into_iter()
        .filter(|r| r.path.starts_with("/approved?"))
        .collect();
    assert_eq!(approved.len(), 1);
    assert_eq!(approved[0].body, b"waker");
    running.stop().await;
}

/// A durable sleep and a wait for a signal in Python and JavaScript: the
/// job sleeps, waits, gets the signal's payload, and finishes on its first
/// attempt with each step run once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_javascript_sleep_and_wait_for_a_signal() {
    use test_support::components::{JS_SDK_PROBE, PY_PROBE};
    let shop = HttpServer::start(vec![Reply::status(200, "ch_1")]);
    let mut topics = String::new();
    for (topic, file) in [("py", "py_probe.wasm"), ("js", "js_sdk_probe.wasm")] {
        topics.push_str(&format!(
            "[[topic]]\nname = \"{topic}\"\nhandler = \"{file}\"\ntimeout = \"5s\"\n\
             grants = {{ http = [\"{}\"] }}\n\n",
            shop.url()
        ));
    }
    let project = Project::new("concurrency = 4", &topics);
    crate::util::add_handler(&project, "py_probe.wasm", PY_PROBE);
    crate::util::add_handler(&project, "js_sdk_probe.wasm", JS_SDK_PROBE);
    let queue = project.queue().await;
    let mut running = Running::start(project.config()).await;
    let payload = format!(
        r#"{{"saga": {{"shop": "{}", "sleep_ms": 300, "approval_s": 600}}}}"#,
        shop.url()
    );
    for topic in ["py", "js"] {
        let id = enqueue(&queue, topic, &payload, 0, 0).await;
        let keys = queue.keys(topic);
        // the sleep, then the wait: suspended for the signal
        let waits = eventually(
            Duration::from_secs(120),
            "waiting for the signal",
            || async {
                match queue.journal(&keys, &id).await.unwrap() {
                    (_, Some(w)) if w.signal.is_some() => Ok(w),
                    seen => Err(format!("{seen:?}")),
                }
            },
        )
        .await;
        assert_eq!(waits.signal.as_deref(), Some("approved"), "{topic}");
        let out = hourglass(&project, &["signal", topic, &id, "approved", topic]);
        assert!(out.status.success(), "{topic}: {out:?}");
        let events = running
            .until_settled(topic, &id, Duration::from_secs(120))
            .await;
        assert_eq!(settled(&events, topic, &id), Ok(()), "{topic}");
        let suspensions = of(&events, topic, &id)
            .iter()
            .filter(|k| matches!(k, EventKind::Suspended { .. }))
            .count();
        assert_eq!(suspensions, 2, "{topic}: the sleep and the wait");
        let acked = events
            .iter()
            .find(|e| e.id == id && e.kind == EventKind::Acked);
        assert_eq!(
            acked.map(|e| e.attempt),
            Some(1),
            "{topic}: no attempt used"
        );
        let bodies: Vec<Vec<u8>> = shop
            .received()
            .into_iter()
            .filter(|r| r.path.starts_with("/approved?"))
            .map(|r| r.body)
            .collect();
        assert_eq!(
            bodies.last().map(Vec::as_slice),
            Some(topic.as_bytes()),
            "{topic}"
        );
    }
    assert_eq!(calls(&shop), [2, 2, 2, 2, 0], "each step once per language");
    running.stop().await;
}
