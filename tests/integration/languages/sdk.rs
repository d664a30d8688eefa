//! Handlers written with the Python and JavaScript SDKs: every outcome, log
//! lines, exceptions, granted calls, 16 Python instances at once.

use crate::util::{
    Project, RunnerProcess, Running, add_handler, enqueue, of, retry_reasons, settled, starts,
};
use hourglass::events::EventKind;
use std::time::Duration;
use test_support::components::{PY_PROBE, PY_RAW_PROBE};
use test_support::{HttpServer, Reply};

use super::*;

/// A project serving both probes (and `sink`, the echo handler, for their
/// follow-ups), with these extra lines in each probe's topic.
fn probes_project(runner: &str, topic_lines: &str) -> Project {
    let mut topics = String::from(
        "[defaults]\nmax_attempts = 2\nbackoff = { base = \"50ms\", factor = 1.0, jitter = 0.0 }\n\n\
         [[topic]]\nname = \"sink\"\nhandler = \"echo.wasm\"\n",
    );
    for (topic, file, _, _, _) in PROBES {
        topics.push_str(&format!(
            "\n[[topic]]\nname = \"{topic}\"\nhandler = \"{file}\"\nmay_enqueue = [\"sink\"]\n{topic_lines}\n"
        ));
    }
    let project = Project::new(runner, &topics);
    for (_, file, component, _, _) in PROBES {
        add_handler(&project, file, component);
    }
    project
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_handlers_ack_retry_with_a_delay_fail_raise_and_follow_up() {
    let project = probes_project("concurrency = 8", "");
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    for (topic, _, _, exception, raise) in PROBES {
        let ack = enqueue(&queue, topic, "{}", 0, 0).await;
        let later = enqueue(
            &queue,
            topic,
            r#"{"retry_in": 1, "reason": "the API said later"}"#,
            0,
            0,
        )
        .await;
        let fail = enqueue(&queue, topic, r#"{"fail": "order 7 does not exist"}"#, 0, 0).await;
        let raised = enqueue(
            &queue,
            topic,
            &format!(r#"{{"{raise}": "amount is negative"}}"#),
            0,
            0,
        )
        .await;
        let parent = enqueue(
            &queue,
            topic,
            &format!(
                r#"{{"follow_up": {{"topic": "sink", "payload": {{"from": "{topic}"}}, "id": "child-{topic}"}}}}"#
            ),
            0,
            0,
        )
        .await;
        let garbled = enqueue(&queue, topic, "not json", 0, 0).await;
        let bad_key = enqueue(
            &queue,
            topic,
            r#"{"follow_up": {"topic": "sink", "payload": {}, "key": "no spaces"}}"#,
            0,
            0,
        )
        .await;
        let child = format!("child-{topic}");
        let events = runner.after_drained(&queue, &[topic, "sink"], WAIT).await;

        assert_eq!(settled(&events, topic, &ack), Ok(()), "{topic}: ack");

        // retry_in(1, ...): the next attempt is due a second after the first
        // ended, and starts no earlier; twice, then attempts run out
        let kinds = of(&events, topic, &later);
        let first_start = kinds.iter().find_map(|k| match k {
            EventKind::Started { started_at_ms, .. } => Some(*started_at_ms),
            _ => None,
        });
        let next_due = kinds.iter().find_map(|k| match k {
            EventKind::Retried { next_due_ms, .. } => Some(*next_due_ms),
            _ => None,
        });
        let second_start = kinds
            .iter()
            .filter_map(|k| match k {
                EventKind::Started { started_at_ms, .. } => Some(*started_at_ms),
                _ => None,
            })
            .nth(1);
        let (first, due, second) = (
            first_start.unwrap(),
            next_due.unwrap(),
            second_start.unwrap(),
        );
        assert!(
            due >= first + 1000,
            "{topic}: due {due}, first start {first}"
        );
        assert!(second >= due, "{topic}: started {second} before due {due}");
        assert_eq!(
            retry_reasons(&events, topic, &later),
            vec!["the API said later"],
            "{topic}"
        );

        let reason = settled(&events, topic, &fail).unwrap_err();
        assert!(
            reason.contains("order 7 does not exist"),
            "{topic}: {reason}"
        );
        assert_eq!(starts(&events, topic, &fail), 1, "{topic}: fail is final");

        // an exception is a failed attempt: retried, its type and message recorded
        let expected = format!("{exception}: amount is negative");
        assert_eq!(
            retry_reasons(&events, topic, &raised),
            vec![expected.clone()],
            "{topic}"
        );
        let reason = settled(&events, topic, &raised).unwrap_err();
        assert!(reason.contains(&expected), "{topic}: {reason}");

        assert_eq!(settled(&events, topic, &parent), Ok(()), "{topic}: parent");
        assert_eq!(
            settled(&events, "sink", &child),
            Ok(()),
            "{topic}: its follow-up"
        );

        // the key reaches the host, which refuses a bad one: the job fails
        let reason = settled(&events, topic, &bad_key).unwrap_err();
        assert!(
            reason.contains("follow-up key") && reason.contains("no spaces"),
            "{topic}: {reason}"
        );

        let reason = settled(&events, topic, &garbled).unwrap_err();
        assert!(reason.contains("payload is not JSON"), "{topic}: {reason}");
        assert_eq!(
            starts(&events, topic, &garbled),
            1,
            "{topic}: bad JSON is final"
        );
    }
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_log_lines_and_prints_carry_the_attempts_topic_job_and_handler() {
    let project = probes_project("", "");
    let runner = RunnerProcess::start(&project);
    let queue = project.queue().await;
    for (topic, _, component, _, _) in PROBES {
        let id = format!("{topic}-says");
        queue
            .enqueue(
                &queue.keys(topic),
                &[hourglass::redis::NewJob {
                    id: Some(id.clone()),
                    payload: format!(
                        r#"{{"log": "hello from {topic}", "print": "printed by {topic}"}}"#
                    )
                    .into_bytes(),
                    due_at_ms: hourglass::clock::now_ms(),
                    max_attempts: 1,
                    ..Default::default()
                }],
                hourglass::clock::now_ms(),
            )
            .await
            .unwrap();
        let hash = crate::util::hash_of(component);
        for text in [format!("hello from {topic}"), format!("printed by {topic}")] {
            let line = runner.wait_for(&text, WAIT);
            for field in [
                format!("topic={topic}"),
                format!("job_id={id}"),
                "attempt=1".to_owned(),
                format!("handler=\"{hash}\""),
            ] {
                assert!(line.contains(&field), "{field} missing: {line}");
            }
        }
    }
    drop(runner);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_python_components_exception_is_recorded_from_its_traceback() {
    let project = Project::new(
        "",
        "[[topic]]\nname = \"raw\"\nhandler = \"py_raw_probe.wasm\"\nmax_attempts = 1\n",
    );
    add_handler(&project, "py_raw_probe.wasm", PY_RAW_PROBE);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let id = enqueue(&queue, "raw", "raise the amount is negative", 0, 0).await;
    let fine = enqueue(&queue, "raw", "hello", 0, 0).await;
    let events = runner.after_drained(&queue, &["raw"], WAIT).await;
    let reason = settled(&events, "raw", &id).unwrap_err();
    assert!(
        reason.contains("uncaught exception: ValueError: the amount is negative"),
        "{reason}"
    );
    assert_eq!(settled(&events, "raw", &fine), Ok(()));
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_javascript_call_granted_hosts_and_are_denied_the_rest() {
    let server = HttpServer::start(vec![Reply::status(200, "the order is cancelled")]);
    let url = server.url();
    let project = probes_project("", &format!("grants = {{ http = [\"{url}\"] }}"));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    for (topic, _, _, _, _) in PROBES {
        let granted = enqueue(
            &queue,
            topic,
            &format!(r#"{{"fetch": "{url}/orders/42"}}"#),
            0,
            1,
        )
        .await;
        // same host, another port: not granted
        let other = format!("http://127.0.0.1:{}/", server.port() + 1);
        let denied = enqueue(&queue, topic, &format!(r#"{{"fetch": "{other}"}}"#), 0, 1).await;
        let events = runner.after_drained(&queue, &[topic], WAIT).await;
        let reason = settled(&events, topic, &granted).unwrap_err();
        assert!(
            reason.contains("fetched 200 the order is cancelled"),
            "{topic}: {reason}"
        );
        // Python's HttpError says why; fetch() reports any failure as a NetworkError
        let reason = settled(&events, topic, &denied).unwrap_err();
        let said = if topic == "py" {
            "denied"
        } else {
            "NetworkError"
        };
        assert!(reason.contains(said), "{topic}: {reason}");
    }
    // a JSON POST from each: the body, its type and its length arrive
    // (a length, not a chunked upload: some servers refuse those, 411)
    for (topic, _, _, _, _) in PROBES {
        let posted = enqueue(
            &queue,
            topic,
            &format!(r#"{{"post_json": "{url}/cancel", "body": {{"order": 42}}}}"#),
            0,
            1,
        )
        .await;
        let events = runner.after_drained(&queue, &[topic], WAIT).await;
        let reason = settled(&events, topic, &posted).unwrap_err();
        assert!(reason.contains("posted 200"), "{topic}: {reason}");
        let received = server.received();
        let post = received.last().unwrap();
        assert_eq!(
            (post.method.as_str(), post.path.as_str()),
            ("POST", "/cancel"),
            "{topic}"
        );
        assert_eq!(
            post.header("content-type"),
            Some("application/json"),
            "{topic}"
        );
        let length = post.body.len().to_string();
        assert_eq!(
            post.header("content-length"),
            Some(length.as_str()),
            "{topic}"
        );
        assert_eq!(post.header("transfer-encoding"), None, "{topic}");
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&post.body).unwrap(),
            serde_json::json!({"order": 42}),
            "{topic}"
        );
    }
    let paths: Vec<String> = server.received().into_iter().map(|r| r.path).collect();
    assert_eq!(
        paths,
        ["/orders/42", "/orders/42", "/cancel", "/cancel"],
        "only granted requests arrive"
    );
    // a GET carries no body, so neither a length nor chunks
    let get = &server.received()[0];
    assert_eq!(get.header("transfer-encoding"), None);
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_topic_at_concurrency_16_runs_16_at_once_and_releases_none() {
    // the runner's pool holds 16 (+ spare) instances; a Python instance makes
    // 14 core instances, which a pool sized for Rust (8 per slot) could not hold
    let project = Project::new(
        "concurrency = 16",
        "[[topic]]\nname = \"py\"\nhandler = \"py_probe.wasm\"\nconcurrency = 16\nmax_attempts = 1\n",
    );
    add_handler(&project, "py_probe.wasm", PY_PROBE);
    let queue = project.queue().await;
    let jobs: Vec<hourglass::redis::NewJob> = (0..500)
        .map(|i| hourglass::redis::NewJob {
            id: Some(format!("p{i}")),
            payload: br#"{"sleep_ms": 50}"#.to_vec(),
            due_at_ms: hourglass::clock::now_ms(),
            max_attempts: 1,
            ..Default::default()
        })
        .collect();
    queue
        .enqueue(&queue.keys("py"), &jobs, hourglass::clock::now_ms())
        .await
        .unwrap();
    let mut runner = Running::start(project.config()).await;
    // watch how many Python instances are alive while the backlog drains
    // (sampled every 5 ms, finer than `eventually`'s 20 ms, to see the peak)
    let most = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let sampler = tokio::spawn({
        let (instances, most) = (runner.instances.clone(), most.clone());
        async move {
            let mut every = tokio::time::interval(Duration::from_millis(5));
            loop {
                every.tick().await;
                most.fetch_max(instances.now(), std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    // a deadline, not a speed claim: 500 × 50 ms over 16 is about 2 s, and
    // Python instances start slowly on two shared cores
    let events = runner
        .after_drained(&queue, &["py"], Duration::from_secs(120))
        .await;
    sampler.abort();
    let most = most.load(std::sync::atomic::Ordering::Relaxed);
    let released = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Released))
        .count();
    assert_eq!(released, 0, "no job was released for want of an instance");
    let acked = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Acked))
        .count();
    assert_eq!(acked, 500);
    assert_eq!(most, 16, "16 ran at once");
    runner.stop().await;
}
