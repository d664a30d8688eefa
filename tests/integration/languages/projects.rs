//! Projects in every language: what cannot fit refused, the examples, `new`,
//! `build` and `check` outside the repository, the demo's configuration, memory
//! given back after loading.

use crate::util::{
    Project, RunnerProcess, Running, add_handler, enqueue, hourglass, retry_reasons, settled,
};
use std::time::Duration;
use test_support::components::{JS_SDK_PROBE, NOTIFY, PY_PROBE, REFUND};

use super::*;

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
