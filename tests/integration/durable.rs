//! Durable handlers: steps recorded in a job's journal survive failures and
//! a SIGKILL; durable sleeps hold no slot and end early on `hourglass wake`;
//! signals before and after the wait, timeouts, signals to no job; limits
//! and repeated names; a journal pins its job across a deploy and a canary;
//! cancel; a runner restarted while jobs sleep. The `checkout` handler is
//! the docs' saga: each step is a POST to a real local HTTP server that
//! counts calls.

use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use hourglass::redis::Queue;
use test_support::{HttpServer, Reply};

use crate::util::{
    Api, Project, RUNNER_LOG, RunnerProcess, Running, TOKEN, enqueue, eventually, hourglass,
    hourglass_within, of, settled,
};

fn topics(server: &HttpServer, extra: &str) -> String {
    format!(
        "[[topic]]\nname = \"checkout\"\nhandler = \"checkout.wasm\"\nmax_attempts = 5\n\
         timeout = \"3s\"\nbackoff = {{ base = \"50ms\", max = \"50ms\", jitter = 0.0 }}\n\
         grants = {{ http = [\"{}\"] }}\n{extra}\n",
        server.url()
    )
}

/// A shop answering every call, a project whose checkout topic has `extra`
/// lines (and `more` after the topic), its queue, and a runner serving it.
async fn serving(runner: &str, extra: &str, more: &str) -> (HttpServer, Project, Queue, Running) {
    let shop = HttpServer::start(vec![Reply::status(200, "ch_1")]);
    let project = Project::new(runner, &format!("{}{more}", topics(&shop, extra)));
    let queue = project.queue().await;
    let running = Running::start(project.config()).await;
    (shop, project, queue, running)
}

/// How many calls the shop got for each step, in step order.
fn calls(server: &HttpServer) -> [usize; 5] {
    let received = server.received();
    let n = |step: &str| {
        received
            .iter()
            .filter(|r| r.path.starts_with(&format!("/{step}?")))
            .count()
    };
    [
        n("charge"),
        n("reserve"),
        n("email"),
        n("approved"),
        n("refund"),
    ]
}

fn order(server: &HttpServer, extra: &str) -> String {
    format!(r#"{{"order": 1042, "shop": "{}"{extra}}}"#, server.url())
}

/// Wait until job `id` of checkout is suspended (a durable sleep or wait).
async fn until_suspended(queue: &Queue, id: &str) {
    let keys = queue.keys("checkout");
    eventually(Duration::from_secs(30), "the job suspended", || async {
        match queue.journal(&keys, id).await.unwrap() {
            (_, Some(waits)) => Ok(waits),
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
}

async fn journal_exists(queue: &Queue, id: &str) -> bool {
    let keys = queue.keys("checkout");
    queue.journal(&keys, id).await.unwrap().0.is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_recorded_before_a_failing_step_run_once() {
    let (shop, _project, queue, mut running) = serving("concurrency = 2", "", "").await;
    let id = enqueue(
        &queue,
        "checkout",
        &order(&shop, r#", "email_fails": 2"#),
        0,
        0,
    )
    .await;
    let events = running
        .until_settled("checkout", &id, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "checkout", &id), Ok(()));
    assert_eq!(
        calls(&shop),
        [1, 1, 3, 0, 0],
        "charge and reserve ran once, the email three times"
    );
    let acked = events
        .iter()
        .find(|e| e.id == id && e.kind == EventKind::Acked)
        .unwrap();
    assert_eq!(acked.attempt, 3);
    assert!(
        !journal_exists(&queue, &id).await,
        "an acked job's journal is deleted with it"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_during_a_step_replays_the_steps_before_it() {
    // the email hangs until the runner is killed; after that the shop answers
    let ok = Reply::status(200, "ch_1");
    let shop = HttpServer::start(vec![ok.clone(), ok.clone(), Reply::Hang, ok]);
    let project = Project::new(
        "concurrency = 2\nlease_margin = \"500ms\"",
        &topics(&shop, ""),
    );
    let queue = project.queue().await;
    let first = RunnerProcess::launch(&project, RUNNER_LOG);
    let id = enqueue(&queue, "checkout", &order(&shop, ""), 0, 0).await;
    eventually(Duration::from_secs(60), "the email step began", || async {
        match calls(&shop) {
            [1, 1, 1, 0, 0] => Ok(()),
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
    first.kill(); // SIGKILL, inside step 3
    let mut second = Running::start(project.config()).await;
    let events = second
        .until_settled("checkout", &id, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "checkout", &id), Ok(()));
    assert_eq!(
        calls(&shop),
        [1, 1, 2, 0, 0],
        "charge and reserve ran once; the email, whose runner died mid-call, twice"
    );
    second.stop().await;
}

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
async fn an_oversize_step_and_a_repeated_name_are_clear_errors() {
    let topics = "[[topic]]\nname = \"probe\"\nhandler = \"probe.wasm\"\nmax_attempts = 2\n\
                  backoff = { base = \"50ms\", max = \"50ms\", jitter = 0.0 }\n";
    let project = Project::new("concurrency = 2", topics);
    let queue = project.queue().await;
    let mut running = Running::start(project.config()).await;
    let big = enqueue(
        &queue,
        "probe",
        r#"{"steps":[{"name":"big","bytes":300000}]}"#,
        0,
        0,
    )
    .await;
    let twice = enqueue(
        &queue,
        "probe",
        r#"{"steps":[{"name":"a","bytes":1},{"name":"a","bytes":1}]}"#,
        0,
        0,
    )
    .await;
    let events = running
        .until(Duration::from_secs(60), |seen| {
            [&big, &twice].iter().all(|id| {
                seen.iter()
                    .any(|e| &&e.id == id && crate::util::is_final(&e.kind))
            })
        })
        .await;
    let reason = settled(&events, "probe", &big).unwrap_err();
    assert!(
        reason.contains("result of 300000 bytes is over the limit of 262144 bytes"),
        "{reason}"
    );
    let reason = settled(&events, "probe", &twice).unwrap_err();
    assert!(
        reason.contains("step name \"a\" is used twice in one attempt"),
        "{reason}"
    );
    assert!(
        reason.starts_with("failed:"),
        "a repeated name fails for good: {reason}"
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

/// `hourglass_steps_total` of checkout by `how`, as /metrics shows it.
async fn steps_scraped(api: &Api) -> (f64, f64) {
    let answer = api.get("/metrics").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let lines = answer.body.lines().map(|l| Ok(l.to_owned()));
    let scrape =
        test_support::prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
    let count = |how: &str| {
        scrape
            .samples
            .iter()
            .filter(|s| {
                s.metric == "hourglass_steps_total"
                    && s.labels.get("topic") == Some("checkout")
                    && s.labels.get("how") == Some(how)
            })
            .map(|s| match s.value {
                test_support::prometheus_parse::Value::Counter(v)
                | test_support::prometheus_parse::Value::Untyped(v) => v,
                ref other => panic!("hourglass_steps_total: {other:?}"),
            })
            .sum::<f64>()
    };
    (count("recorded"), count("replayed"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_shows_the_journal_and_takes_signals() {
    let http = format!("\n[http]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n");
    let (shop, _project, queue, mut running) = serving("concurrency = 2", "", &http).await;
    let api = Api(running.http.unwrap().to_string());
    let id = enqueue(
        &queue,
        "checkout",
        &order(&shop, r#", "approval_ms": 600000"#),
        0,
        0,
    )
    .await;
    until_suspended(&queue, &id).await;
    let view = api
        .until(&format!("/api/topics/checkout/jobs/{id}"), |v| {
            !v["suspended"].is_null()
        })
        .await;
    assert_eq!(view["suspended"]["signal"], "approved", "{view:#}");
    let steps: Vec<&str> = view["journal"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["charge", "reserve"], "{view:#}");
    assert_eq!(view["version_source"], "journal", "{view:#}");
    assert_eq!(
        view["journal"]["steps"][0]["bytes"], 6,
        "\"ch_1\" as JSON: {view:#}"
    );

    // the suspended job in /metrics (read from Redis at most once a second)
    eventually(Duration::from_secs(10), "suspended in /metrics", || async {
        let answer = api.get("/metrics").await;
        let line = "hourglass_jobs{topic=\"checkout\",state=\"suspended\"} 1";
        match answer.body.lines().any(|l| l == line) {
            true => Ok(()),
            false => Err(answer.body),
        }
    })
    .await;
    let answer = api
        .post(
            &format!("/api/topics/checkout/jobs/{id}/signals/approved"),
            "dee",
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["delivered"], "woken");
    let events = running
        .until_settled("checkout", &id, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "checkout", &id), Ok(()));
    // gone: 404 for a signal and a wake
    let answer = api
        .post(
            &format!("/api/topics/checkout/jobs/{id}/signals/approved"),
            "x",
        )
        .await;
    assert_eq!(answer.status, 404, "{}", answer.body);
    let answer = api
        .post(&format!("/api/topics/checkout/jobs/{id}/wake"), "")
        .await;
    assert_eq!(answer.status, 404, "{}", answer.body);
    let answer = api
        .post("/api/topics/checkout/jobs/nobody/signals/approved", "x")
        .await;
    assert_eq!(answer.status, 404, "{}", answer.body);
    // recorded: charge, reserve, approved, email; replayed: charge, reserve
    eventually(Duration::from_secs(10), "steps in /metrics", || async {
        match steps_scraped(&api).await {
            (4.0, 2.0) => Ok(()),
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
    running.stop().await;
}

/// The handler versions that started attempts of job `id`, in order.
fn versions_of(events: &[hourglass::events::Event], id: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.id == id)
        .filter_map(|e| match &e.kind {
            EventKind::Started { handler, .. } => Some(handler.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_pins_its_job_across_a_deploy_and_a_canary_and_replays_need_a_reset() {
    let rollout = "rollout = { canary = \"99%\", for = \"1h\", min_attempts = 100000, max_failure_rate = 0.9 }";
    let (shop, project, queue, mut running) = serving("concurrency = 4", rollout, "").await;
    let old = crate::util::hash_of(test_support::components::CHECKOUT);
    let sleeper = enqueue(
        &queue,
        "checkout",
        &order(&shop, r#", "sleep_ms": 3600000"#),
        0,
        0,
    )
    .await;
    until_suspended(&queue, &sleeper).await;
    // a job that dies with a journal: its approval never comes
    let dies = enqueue(
        &queue,
        "checkout",
        &order(&shop, r#", "approval_ms": 200"#),
        0,
        0,
    )
    .await;
    let events = running
        .until_settled("checkout", &dies, Duration::from_secs(60))
        .await;
    assert!(settled(&events, "checkout", &dies).is_err());

    // a new version, served as a canary to 99% of attempts
    let bytes = std::fs::read(test_support::components::CHECKOUT).unwrap();
    let new_bytes = crate::util::variant(&bytes, "v2");
    let new = hourglass::wasm::content_hash(&new_bytes);
    crate::util::deploy(&project.handler("checkout.wasm"), &new_bytes);
    eventually(Duration::from_secs(60), "the canary", || async {
        let r = queue.rollouts().get(&queue.keys("checkout")).await.unwrap();
        match r.canary {
            Some(c) if c.version == new => Ok(()),
            _ => Err(format!("{r:?}")),
        }
    })
    .await;
    let mut fresh = Vec::new();
    for _ in 0..10 {
        fresh.push(enqueue(&queue, "checkout", r#"{"noop": true}"#, 0, 0).await);
    }
    let out = hourglass(&project, &["wake", "checkout", &sleeper]);
    assert!(out.status.success(), "{out:?}");
    let events = running
        .until(Duration::from_secs(60), |seen| {
            fresh.iter().chain([&sleeper]).all(|id| {
                seen.iter()
                    .any(|e| &e.id == id && crate::util::is_final(&e.kind))
            })
        })
        .await;
    assert_eq!(settled(&events, "checkout", &sleeper), Ok(()));
    assert_eq!(
        versions_of(&events, &sleeper),
        std::slice::from_ref(&old),
        "the journaled job finished on the version that wrote its journal"
    );
    let on_canary = fresh
        .iter()
        .filter(|id| versions_of(&events, id) == [new.clone()])
        .count();
    assert!(
        on_canary >= 5,
        "the canary serves jobs without a journal: {on_canary} of 10"
    );

    // replay of the dead letter: on its own version by default (the journal
    // replays: no new charge); on another only with --reset-journal
    let charges = calls(&shop)[0];
    let out = hourglass(
        &project,
        &["dead", "retry", "checkout", &dies, "--version", &new],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--reset-journal"),
        "{out:?}"
    );
    let out = hourglass(&project, &["dead", "retry", "checkout", &dies]);
    assert!(out.status.success(), "{out:?}");
    let events = running
        .until_settled("checkout", &dies, Duration::from_secs(60))
        .await;
    assert!(settled(&events, "checkout", &dies).is_err());
    assert_eq!(
        versions_of(&events, &dies),
        std::slice::from_ref(&old),
        "replayed: no wait this time"
    );
    assert_eq!(
        calls(&shop)[0],
        charges,
        "replayed on its version: no new charge"
    );
    let out = hourglass(
        &project,
        &[
            "dead",
            "retry",
            "checkout",
            &dies,
            "--version",
            &new,
            "--reset-journal",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let events = running
        .until_settled("checkout", &dies, Duration::from_secs(60))
        .await;
    // (two attempts' starts: the wait for the approval suspends it once)
    assert_eq!(versions_of(&events, &dies), [new.clone(), new.clone()]);
    assert_eq!(
        calls(&shop)[0],
        charges + 1,
        "a reset journal charges again"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_journal_lives_in_its_topics_slot() {
    let cluster = test_support::RedisCluster::start();
    let shop = HttpServer::start(vec![Reply::status(200, "ch_1")]);
    let project = Project::on_cluster(cluster.urls(), "concurrency = 2", &topics(&shop, ""));
    let queue = project.queue().await;
    let keys = queue.keys("checkout");
    let mut running = Running::start(project.config()).await;
    let id = enqueue(
        &queue,
        "checkout",
        &order(&shop, r#", "email_fails": 1, "approval_ms": 600000"#),
        0,
        0,
    )
    .await;
    until_suspended(&queue, &id).await;
    assert_eq!(
        cluster.master_of(&keys.journal_of(&id)),
        cluster.master_of(&keys.job),
        "the journal is on the topic's master"
    );
    let out = hourglass(&project, &["signal", "checkout", &id, "approved", "ana"]);
    assert!(out.status.success(), "{out:?}");
    let events = running
        .until_settled("checkout", &id, Duration::from_secs(60))
        .await;
    assert_eq!(settled(&events, "checkout", &id), Ok(()));
    assert_eq!(calls(&shop), [1, 1, 2, 1, 0]);
    assert!(!journal_exists(&queue, &id).await);
    running.stop().await;
}

/// The same steps in Python and JavaScript: a runner killed during the
/// email step, then the email failing twice more: the charge and the
/// reservation each ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_javascript_steps_survive_a_sigkill_and_failures() {
    use test_support::components::{JS_SDK_PROBE, PY_PROBE};
    for (topic, file, component) in [
        ("py", "py_probe.wasm", PY_PROBE),
        ("js", "js_sdk_probe.wasm", JS_SDK_PROBE),
    ] {
        let ok = Reply::status(200, "ch_1");
        let shop = HttpServer::start(vec![ok.clone(), ok.clone(), Reply::Hang, ok]);
        let topics = format!(
            "[[topic]]\nname = \"{topic}\"\nhandler = \"{file}\"\nmax_attempts = 5\n\
             timeout = \"5s\"\nbackoff = {{ base = \"50ms\", max = \"50ms\", jitter = 0.0 }}\n\
             grants = {{ http = [\"{}\"] }}\n",
            shop.url()
        );
        let project = Project::new("concurrency = 2\nlease_margin = \"500ms\"", &topics);
        crate::util::add_handler(&project, file, component);
        let queue = project.queue().await;
        let first = RunnerProcess::launch(&project, RUNNER_LOG);
        let payload = format!(
            r#"{{"saga": {{"shop": "{}", "email_fails": 3}}}}"#,
            shop.url()
        );
        let id = enqueue(&queue, topic, &payload, 0, 0).await;
        eventually(Duration::from_secs(120), "the email step began", || async {
            match calls(&shop) {
                [1, 1, 1, 0, 0] => Ok(()),
                seen => Err(format!("{seen:?}")),
            }
        })
        .await;
        first.kill();
        let mut second = Running::start(project.config()).await;
        let events = second
            .until_settled(topic, &id, Duration::from_secs(120))
            .await;
        assert_eq!(settled(&events, topic, &id), Ok(()), "{topic}");
        assert_eq!(
            calls(&shop),
            [1, 1, 4, 0, 0],
            "{topic}: charge and reserve once; the email killed once, failed twice, sent"
        );
        let acked = events
            .iter()
            .find(|e| e.id == id && e.kind == EventKind::Acked);
        assert_eq!(acked.map(|e| e.attempt), Some(4), "{topic}");
        second.stop().await;
    }
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
