//! Handlers in Python and JavaScript: the probes on each SDK (built by
//! test-support exactly as `hourglass build` builds a project) ack, retry
//! with a delay, fail, record an exception's type and message, start
//! follow-ups, log with their attempt's tags and call out over HTTP; bare
//! components' exceptions are read from their stderr; the pool runs a
//! Python topic at full concurrency and refuses at load what cannot fit;
//! the Python and JavaScript examples; `hourglass new`, `build` and `check`
//! for each language in a folder outside the repository.

use std::time::Duration;

use hourglass::events::EventKind;
use test_support::components::{JS_SDK_PROBE, NOTIFY, PY_PROBE, PY_RAW_PROBE, REFUND};
use test_support::{HttpServer, Reply};

use crate::util::{
    Project, RunnerProcess, Running, add_handler, enqueue, hourglass, of, retry_reasons, settled,
    starts,
};

const WAIT: Duration = Duration::from_secs(60);

/// Each SDK's probe: (topic, component file, component, the exception type
/// its "raise" plan throws, the plan key that throws).
const PROBES: [(&str, &str, &str, &str, &str); 2] = [
    ("py", "py_probe.wasm", PY_PROBE, "ValueError", "raise"),
    (
        "js",
        "js_sdk_probe.wasm",
        JS_SDK_PROBE,
        "RangeError",
        "throw",
    ),
];

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

#[test]
fn what_cannot_fit_an_instance_is_refused_at_load_and_by_check() {
    // a pool allowing 8 core instances per instance cannot hold Python's 14
    let small = hourglass::wasm::PerInstance {
        core_instances: 8,
        ..hourglass::wasm::PER_INSTANCE
    };
    // (compiled once for the run: the limits are checked after compiling)
    let cache = Some(crate::util::shared_compile_cache());
    let runtime = hourglass::wasm::Runtime::with_limits(2, small, cache).unwrap();
    let error = runtime
        .load(std::path::Path::new(PY_PROBE))
        .err()
        .expect("refused");
    let text = error.to_string();
    assert!(
        matches!(error, hourglass::wasm::LoadError::Unfit { .. }),
        "{text}"
    );
    assert!(
        text.contains("core module instances") && text.contains('8'),
        "{text}"
    );
    // the real pool holds it
    let runtime = hourglass::wasm::Runtime::new(2, cache).unwrap();
    runtime.load(std::path::Path::new(PY_PROBE)).unwrap();

    // a topic whose memory limit is below what the handler starts with
    let project = Project::new(
        "",
        "[[topic]]\nname = \"py\"\nhandler = \"py_probe.wasm\"\nmemory = \"8MiB\"\n",
    );
    add_handler(&project, "py_probe.wasm", PY_PROBE);
    let out = hourglass(&project, &["check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("topic \"py\"") && stderr.contains("memory limit of 8 MiB"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_examples_refund_in_python_and_notify_in_javascript() {
    let project = Project::new(
        "",
        "[defaults]\nbackoff = { base = \"50ms\" }\n\n\
         [[topic]]\nname = \"refund\"\nhandler = \"refund.wasm\"\nmay_enqueue = [\"notify\"]\n\
         results = { keep = \"1h\" }\n\n\
         [[topic]]\nname = \"notify\"\nhandler = \"notify.wasm\"\n",
    );
    add_handler(&project, "refund.wasm", REFUND);
    add_handler(&project, "notify.wasm", NOTIFY);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let refund = enqueue(
        &queue,
        "refund",
        r#"{"order_id": 1042, "customer": "ada", "amount_cents": 1999}"#,
        0,
        0,
    )
    .await;
    let nothing = enqueue(
        &queue,
        "refund",
        r#"{"order_id": 7, "customer": "bob", "amount_cents": 0}"#,
        0,
        0,
    )
    .await;
    let big = enqueue(
        &queue,
        "refund",
        r#"{"order_id": 8, "customer": "cy", "amount_cents": 900000}"#,
        0,
        0,
    )
    .await;
    let sms = enqueue(
        &queue,
        "notify",
        r#"{"customer": "dee", "message": "hi", "channel": "sms"}"#,
        0,
        0,
    )
    .await;
    let events = runner
        .after_drained(&queue, &["refund", "notify"], WAIT)
        .await;
    assert_eq!(settled(&events, "refund", &refund), Ok(()));
    // the refund's result, for whoever waits on it
    let waited = queue
        .wait_for(&queue.keys("refund"), &refund, WAIT)
        .await
        .unwrap();
    let hourglass::redis::Waited::Ended(end) = waited else {
        panic!("{waited:?}")
    };
    let result: serde_json::Value = serde_json::from_slice(end.result.as_deref().unwrap()).unwrap();
    assert_eq!(
        result,
        serde_json::json!({ "refund_id": "rf-1042", "amount_cents": 1999 })
    );
    assert_eq!(
        settled(&events, "notify", "refund-1042"),
        Ok(()),
        "the refund's follow-up told the customer"
    );
    let reason = settled(&events, "refund", &nothing).unwrap_err();
    assert!(reason.contains("nothing to refund"), "{reason}");
    let reason = settled(&events, "refund", &big).unwrap_err();
    assert!(reason.contains("a person decides"), "{reason}");
    assert_eq!(
        retry_reasons(&events, "notify", &sms),
        vec!["sms gateway busy"]
    );
    assert_eq!(settled(&events, "notify", &sms), Ok(()));
    runner.stop().await;
}

#[test]
fn new_build_and_check_work_for_each_language_outside_the_repository() {
    let dir = tempfile::tempdir().unwrap();
    let run = |cwd: &std::path::Path, args: &[&str]| {
        let out = std::process::Command::new(crate::util::hourglass_bin())
            .args(args)
            .current_dir(cwd)
            // the default: each project installs its own toolchain
            .env_remove(hourglass_builder::TOOLCHAINS_ENV)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    for (lang, name, component) in [
        ("rust", "resize-image", "resize_image.wasm"),
        ("python", "send-mail", "send_mail.wasm"),
        ("js", "deliver-hook", "deliver_hook.wasm"),
    ] {
        let (code, text) = run(dir.path(), &["new", name, "--lang", lang]);
        assert_eq!(code, Some(0), "{lang}: {text}");
        let project = dir.path().join(name);
        let (code, text) = run(&project, &["build", "."]);
        assert_eq!(code, Some(0), "{lang}: {text}");
        assert!(
            project.join("handlers").join(component).is_file(),
            "{lang}: {text}"
        );
        let (code, text) = run(&project, &["check"]);
        assert_eq!(code, Some(0), "{lang}: {text}");
        assert!(text.contains("ok, 1 topic"), "{lang}: {text}");
    }
    let manifest = std::fs::read_to_string(dir.path().join("resize-image/Cargo.toml")).unwrap();
    assert!(manifest.contains("hourglass-sdk = { path = "), "{manifest}");
    // a second time is refused, and so are a bad name, a missing SDK, a folder that is no project
    assert_eq!(run(dir.path(), &["new", "resize-image"]).0, Some(2));
    assert_eq!(
        run(dir.path(), &["new", "Bad Name", "--lang", "python"]).0,
        Some(2)
    );
    let (code, text) = run(dir.path(), &["new", "other", "--sdk", "/nonexistent"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("--sdk"), "{text}");
    let (code, text) = run(dir.path(), &["build", "."]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("is not a handler project"), "{text}");
    // a crate that builds a component without the contract is never placed
    let odd = dir.path().join("not-a-handler");
    std::fs::create_dir_all(odd.join("src")).unwrap();
    std::fs::write(
        odd.join("Cargo.toml"),
        "[package]\nname = \"not-a-handler\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
         [lib]\ncrate-type = [\"cdylib\"]\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(odd.join("src/lib.rs"), "pub fn nothing() {}\n").unwrap();
    let (code, text) = run(&odd, &["build", "."]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("does not implement the hourglass handler contract"),
        "{text}"
    );
    assert!(!odd.join("handlers/not_a_handler.wasm").exists(), "{text}");
    let (code, _) = run(
        dir.path(),
        &["new", "gitty", "--sdk", "https://example.com/hourglass.git"],
    );
    assert_eq!(code, Some(0));
    let manifest = std::fs::read_to_string(dir.path().join("gitty/Cargo.toml")).unwrap();
    assert!(
        manifest.contains(r#"hourglass-sdk = { git = "https://example.com/hourglass.git" }"#),
        "{manifest}"
    );
}

#[test]
fn the_demo_configuration_checks_with_every_example_handler() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let demo = std::fs::read_to_string(repo.join("queues.toml")).unwrap();
    // the demo's own redis-server is not needed to check; the run's compile
    // cache is (the demo's is .hourglass/cache in the project folder, which
    // would compile the Python and JavaScript examples again in each run)
    let demo = demo.replacen(
        "\n[runner]\n",
        &format!(
            "\n[runner]\ncompile_cache = {:?}\n",
            crate::util::shared_compile_cache()
        ),
        1,
    );
    assert!(
        demo.contains("compile_cache"),
        "the demo has a [runner] table"
    );
    let project = Project::new("", "");
    std::fs::write(project.config_path(), &demo).unwrap();
    add_handler(&project, "refund.wasm", REFUND);
    add_handler(&project, "notify.wasm", NOTIFY);
    let out = hourglass(&project, &["check"]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    for topic in ["order_cancel", "webhook", "checkout", "refund", "notify"] {
        assert!(text.contains(topic), "{topic}: {text}");
    }
}

/// The resident memory of process `pid`, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib / 1024.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_gives_back_what_loading_big_handlers_took_right_after_it_starts() {
    let project = Project::new(
        "concurrency = 4",
        "[[topic]]\nname = \"py\"\nhandler = \"py_probe.wasm\"\n\n\
         [[topic]]\nname = \"js\"\nhandler = \"js_sdk_probe.wasm\"\n",
    );
    add_handler(&project, "py_probe.wasm", PY_PROBE);
    add_handler(&project, "js_sdk_probe.wasm", JS_SDK_PROBE);
    // the compile cache filled first, as a deploy's `hourglass check` does
    let checked = hourglass(&project, &["check"]);
    assert!(checked.status.success(), "{checked:?}");
    let runner = RunnerProcess::start(&project);
    // the two sleeps are the measurement, not waits for a signal: memory
    // held 3 s after the start against 15 s later
    tokio::time::sleep(Duration::from_secs(3)).await;
    let soon = rss_mib(runner.id());
    // a thread that loaded a handler and still holds what it freed ends
    // within 10 s of its last use (tokio's default keep-alive)
    tokio::time::sleep(Duration::from_secs(15)).await;
    let settled = rss_mib(runner.id());
    eprintln!("runner RSS 3 s after start {soon:.0} MiB, 18 s after {settled:.0} MiB");
    assert!(
        soon <= settled * 1.1 + 4.0,
        "3 s after the start the runner held {soon:.0} MiB and 15 s later {settled:.0} MiB: \
         memory freed by loading the handlers was held back"
    );
}
