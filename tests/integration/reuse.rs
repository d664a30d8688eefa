//! Instance reuse (`reuse = { jobs, idle }`): what one job leaves in a
//! reused instance the next job sees, and in a fresh instance it does not
//! (both sides, in Rust, Python and JavaScript); a reused instance serves at
//! most `jobs` jobs, is dropped after a trap, a CPU limit, a time limit and
//! once idle past `idle`, and never serves a second handler version. A
//! handler's memory images, what a fresh instance's memory starts from,
//! are made as it loads.
//!
//! The probes count the jobs their instance ran (a global variable) and ack
//! with `{"served": n}` when asked.

use std::time::Duration;

use hourglass::Notice;
use hourglass::redis::{EndState, JobEnd, NewJob, Queue, Waited};
use serde_json::Value;
use test_support::components::{JS_SDK_PROBE, PROBE, PY_PROBE};

use crate::util::{Project, Running, add_handler, deploy, hash_of};

const WAIT: Duration = Duration::from_secs(120);

/// One job with `payload` on `topic` (one attempt), waited for: its end.
async fn end_of(queue: &Queue, topic: &str, payload: &str) -> JobEnd {
    let keys = queue.keys(topic);
    let id = format!("{:016x}", rand::random::<u64>());
    let job = NewJob {
        id: Some(id.clone()),
        payload: payload.as_bytes().to_vec(),
        max_attempts: 1,
        ..Default::default()
    };
    queue
        .enqueue(&keys, &[job], hourglass::clock::now_ms())
        .await
        .unwrap();
    match queue.wait_for(&keys, &id, WAIT).await.unwrap() {
        Waited::Ended(end) => end,
        other => panic!("job {id} on {topic} did not end: {other:?}"),
    }
}

/// The `served` count a job's end acked with, or why it did not ack.
fn served_of(end: JobEnd) -> Result<u64, String> {
    if end.state != EndState::Acked {
        return Err(end.reason.unwrap_or_default());
    }
    let result: Value = serde_json::from_slice(&end.result.expect("acked with a result")).unwrap();
    Ok(result["served"].as_u64().expect("a served count"))
}

/// One job with `payload` on `topic`: the `served` count it acked with,
/// or why it did not ack.
async fn run_one(queue: &Queue, topic: &str, payload: &str) -> Result<u64, String> {
    served_of(end_of(queue, topic, payload).await)
}

/// The served counts of `n` jobs run one after the other on `topic`.
async fn counts(queue: &Queue, topic: &str, n: usize) -> Vec<u64> {
    let mut seen = Vec::new();
    for _ in 0..n {
        seen.push(
            run_one(queue, topic, r#"{"served":true}"#)
                .await
                .unwrap_or_else(|why| panic!("a served job on {topic} failed: {why}")),
        );
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_instance_keeps_what_jobs_leave_a_fresh_one_does_not() {
    let mut topics = String::new();
    for (name, handler) in [("rust", "probe.wasm"), ("py", "py.wasm"), ("js", "js.wasm")] {
        topics.push_str(&format!(
            "[[topic]]\nname = \"{name}-fresh\"\nhandler = \"{handler}\"\nconcurrency = 1\nresults = {{ keep = \"10m\" }}\n\n\
             [[topic]]\nname = \"{name}-reused\"\nhandler = \"{handler}\"\nconcurrency = 1\nresults = {{ keep = \"10m\" }}\nreuse = {{ jobs = 3 }}\n\n"
        ));
    }
    let project = Project::new("concurrency = 6", &topics);
    add_handler(&project, "py.wasm", PY_PROBE);
    add_handler(&project, "js.wasm", JS_SDK_PROBE);
    let running = Running::start(project.config()).await;
    let queue = project.queue().await;
    for lang in ["rust", "py", "js"] {
        // per-job isolation: every job starts in a new instance
        assert_eq!(
            counts(&queue, &format!("{lang}-fresh"), 4).await,
            [1, 1, 1, 1],
            "{lang}: a topic without reuse"
        );
        // reuse: the same instance for 3 jobs, then a new one
        assert_eq!(
            counts(&queue, &format!("{lang}-reused"), 7).await,
            [1, 2, 3, 1, 2, 3, 1],
            "{lang}: a topic with reuse = {{ jobs = 3 }}"
        );
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_instance_goes_after_a_trap_a_limit_idleness_and_a_new_version() {
    let topics = "[[topic]]\nname = \"reused\"\nhandler = \"probe.wasm\"\nconcurrency = 1\n\
                  timeout = \"2s\"\ncpu = \"300ms\"\nresults = { keep = \"10m\" }\n\
                  reuse = { jobs = 1000, idle = \"1s\" }\n";
    let project = Project::new("concurrency = 2", topics);
    let mut running = Running::start(project.config()).await;
    let queue = project.queue().await;
    let served = r#"{"served":true}"#;
    assert_eq!(counts(&queue, "reused", 2).await, [1, 2]);

    // each ends the instance: a trap; the CPU limit (checked by the epoch
    // callback); the time limit on a guest waiting in a host call (the timer
    // cuts it off)
    for (payload, reason) in [
        (r#"{"then":"panic"}"#, "asked to panic"),
        (r#"{"spin_ms":5000}"#, "CPU limit"),
        (r#"{"sleep_ms":10000}"#, "time limit"),
    ] {
        let why = run_one(&queue, "reused", payload).await;
        assert!(why.as_ref().is_err_and(|w| w.contains(reason)), "{why:?}");
        assert_eq!(
            counts(&queue, "reused", 2).await,
            [1, 2],
            "after a job that ended with {reason:?}"
        );
    }

    // idle past `idle`
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(counts(&queue, "reused", 1).await, [1], "after 2.5 s idle");

    // a new version: its first job gets a new instance, the old one is not used again
    let path = project.handler("probe.wasm");
    let old = hash_of(path.to_str().unwrap());
    assert_eq!(run_one(&queue, "reused", served).await, Ok(2));
    deploy(
        &path,
        &crate::util::variant(&std::fs::read(PROBE).unwrap(), "second version"),
    );
    let new = hash_of(path.to_str().unwrap());
    assert_ne!(old, new);
    // compiling it may take a while on a loaded machine: until it serves,
    // the old version (and its instance) does
    running
        .notice(
            WAIT,
            |n| matches!(n, Notice::Loaded { hash, .. } if *hash == new),
        )
        .await;
    let mut seen = Vec::new();
    for _ in 0..200 {
        let end = end_of(&queue, "reused", served).await;
        let version = end.version.clone().expect("the version that ran it");
        seen.push((version.clone(), served_of(end).unwrap()));
        if version == new {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (first_new, count) = seen.last().unwrap();
    let tail = &seen[seen.len().saturating_sub(3)..];
    assert_eq!(
        first_new,
        &new,
        "the new version never served in {} jobs (the last: {tail:?})",
        seen.len()
    );
    assert_eq!(
        *count, 1,
        "the new version's first job ran in a new instance: {seen:?}"
    );
    // every job before it ran on the old version, in its one instance
    for (n, (version, count)) in seen[..seen.len() - 1].iter().enumerate() {
        assert_eq!(version, &old);
        assert_eq!(*count, 3 + n as u64, "{seen:?}");
    }
    running.stop().await;
}

/// The file descriptors of this process that are wasmtime's memory images
/// (each a memfd named `wasm-memory-image`).
fn memory_images() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().contains("wasm-memory-image"))
        .count()
}

/// A fresh instance's memory comes from its handler's memory images; they
/// are made as the handler loads, not by its first instance, so that no
/// job pays for them or fails on them (the memfd's seals once failed a
/// first Python job as a trap under a loaded CI run).
#[test]
fn a_handlers_memory_images_are_made_as_it_loads() {
    let runtime = hourglass::wasm::Runtime::new(1, Some(crate::util::shared_compile_cache()))
        .expect("a runtime");
    for (name, path) in [("Rust", PROBE), ("Python", PY_PROBE)] {
        let before = memory_images();
        let _loaded = runtime
            .load(std::path::Path::new(path))
            .unwrap_or_else(|e| panic!("{name} probe does not load: {e}"));
        let made = memory_images() - before;
        assert!(made >= 1, "{name}: no memory image made by loading {path}");
        eprintln!("{name}: memory images made at load: {made}");
    }
}
