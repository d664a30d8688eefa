//! Fixtures shared by several modules: the probe's sandbox and input, a
//! spinning thread (`Spinner`), fan-in flows, topics in Python and JavaScript,
//! ends and results, a served handler (`Served`), dead letters.

use hourglass::clock::now_ms;
use hourglass::redis::{NewJob, Queue};

use super::process::*;
use super::project::*;
use super::running::*;
use std::time::Duration;
use tokio::sync::oneshot;

/// The flow `id` once it is done (every job ended), waited for: a job's end
/// reaches its flow through the outbox's delivery right after its ack, not
/// in the ack's step, so on a loaded machine a moment after the ack event.
pub async fn flow_done(
    queue: &hourglass::redis::Queue,
    id: &str,
) -> hourglass::redis::flow::FlowView {
    eventually(
        Duration::from_secs(20),
        &format!("flow {id} done"),
        || async {
            match queue.flows().show(id).await.unwrap() {
                Some(flow) if flow.done_ms.is_some() => Ok(flow),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

/// A sandbox for running the probe through `Runtime::run` directly: no
/// grants, 64 MiB, 30 s.
pub fn probe_sandbox() -> hourglass::wasm::Sandbox {
    use hourglass::config::{Grants, HttpLimits};
    let grants = std::sync::Arc::new(Grants::default());
    hourglass::wasm::Sandbox {
        result_max: 64 << 10,
        reuse: None,
        journal: Default::default(),
        logs: 64 << 10,
        timeout: Duration::from_secs(30),
        cpu: None,
        memory: 64 << 20,
        grants: grants.clone(),
        may_enqueue: Vec::new().into(),
        max_payload: 1 << 20,
        http: std::sync::Arc::new(hourglass::wasm::HttpPolicy::new(
            grants,
            HttpLimits::default(),
        )),
    }
}

/// A first attempt of a job of topic `probe` carrying `payload`.
pub fn probe_input(payload: &str) -> hourglass::wasm::JobInput {
    hourglass::wasm::JobInput {
        parent_result: None,
        trace: None,
        pass_through: None,
        journal: None,
        upstream: Default::default(),
        topic: "probe".into(),
        id: "probe-1".into(),
        attempt: 1,
        payload: payload.as_bytes().to_vec(),
        max_attempts: 1,
        enqueued_at_ms: 0,
        due_at_ms: 0,
    }
}

/// A thread spinning on CPU `cpu` until dropped: load on purpose.
pub struct Spinner(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Spinner {
    /// Spin all the time.
    pub fn on(cpu: usize) -> Spinner {
        Spinner::bursts(cpu, Duration::MAX, Duration::ZERO)
    }

    /// Spin for `on`, sleep for `off`, again and again: each wake-up takes
    /// the CPU from what runs there (the scheduler favours a thread that
    /// slept), so work on that CPU is interrupted every `on + off`.
    pub fn bursts(cpu: usize, on: Duration, off: Duration) -> Spinner {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, (tx, rx)) = (stop.clone(), std::sync::mpsc::channel());
        std::thread::spawn(move || {
            let tid = nix::unistd::gettid().as_raw().to_string();
            crate::util::taskset(&["-p", "-c", &cpu.to_string(), &tid]);
            tx.send(()).unwrap();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let start = std::time::Instant::now();
                while start.elapsed() < on && !flag.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
                if !off.is_zero() {
                    std::thread::sleep(off);
                }
            }
        });
        rx.recv().expect("the spinner is pinned");
        Spinner(stop)
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Run `taskset ARGS` (util-linux: set a thread's or a process's CPUs) and
/// insist it worked. With `-a` (every thread of a process) a thread may end
/// between taskset listing it and setting it ("No such process"): that one
/// is tried again, a few times.
pub fn taskset(args: &[&str]) {
    for _ in 0..5 {
        let out = std::process::Command::new("taskset")
            .args(args)
            .output()
            .expect("taskset (util-linux) runs");
        if out.status.success() {
            return;
        }
        let raced = String::from_utf8_lossy(&out.stderr).contains("No such process");
        assert!(raced, "taskset {args:?}: {out:?}");
    }
    panic!("taskset {args:?}: a thread ended under it five times running");
}

/// The ids of the threads of process `pid` named `name` (`/proc/<pid>/task/*/comm`).
pub fn threads_named(pid: u32, name: &str) -> Vec<i32> {
    let mut tids = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = task.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() == name {
            tids.push(dir.file_name().unwrap().to_str().unwrap().parse().unwrap());
        }
    }
    tids
}

/// Threads of another process held stopped (each by ptrace, alone: the rest
/// of its process runs on) until this is dropped. To kill the process
/// meanwhile, signal it, drop this, then wait for it (its end waits for its
/// tracer to see the stopped threads end).
pub struct Stopped {
    resume: Option<std::sync::mpsc::Sender<()>>,
    tracer: Option<std::thread::JoinHandle<()>>,
}

/// Stop threads `tids` (see [`Stopped`]); returns once every one is stopped.
/// Needs CAP_SYS_PTRACE (root here), or the test fails saying so.
pub fn stop_threads(tids: &[i32]) -> Stopped {
    use nix::sys::{ptrace, wait};
    use nix::unistd::Pid;
    assert!(!tids.is_empty(), "no threads to stop");
    let (stopped_tx, stopped_rx) = std::sync::mpsc::channel();
    let (resume, resume_rx) = std::sync::mpsc::channel::<()>();
    let tids = tids.to_vec();
    // ptrace requests come from the thread that attached: one thread does all
    let tracer = std::thread::spawn(move || {
        for &tid in &tids {
            let pid = Pid::from_raw(tid);
            ptrace::seize(pid, ptrace::Options::empty()).unwrap_or_else(|e| {
                panic!("ptrace cannot attach to thread {tid}: {e} (the test needs CAP_SYS_PTRACE)")
            });
            ptrace::interrupt(pid).unwrap();
            wait::waitpid(pid, Some(wait::WaitPidFlag::__WALL)).unwrap();
        }
        stopped_tx.send(()).unwrap();
        let _ = resume_rx.recv();
        for &tid in &tids {
            let pid = Pid::from_raw(tid);
            if ptrace::detach(pid, None).is_err() {
                // killed meanwhile: its process is reaped once its tracer
                // has seen each traced thread end
                let _ = wait::waitpid(pid, Some(wait::WaitPidFlag::__WALL));
            }
        }
    });
    if stopped_rx.recv().is_err() {
        let why = tracer
            .join()
            .expect_err("the tracer stopped without stopping the threads");
        std::panic::resume_unwind(why);
    }
    Stopped {
        resume: Some(resume),
        tracer: Some(tracer),
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        drop(self.resume.take());
        if let Some(t) = self.tracer.take() {
            let _ = t.join();
        }
    }
}

/// Create flow `id`: `children` jobs `c<i>` in topic `child` (payload
/// `child(i)`), then `p` in topic `parent` (payload `parent`) requiring them all.
pub async fn fan_in(
    queue: &Queue,
    id: &str,
    children: usize,
    child: impl Fn(usize) -> serde_json::Value,
    parent: serde_json::Value,
) {
    use hourglass::redis::flow::{Dep, FlowJob, FlowSpec, Policy};
    let mut jobs: Vec<FlowJob> = (0..children)
        .map(|i| FlowJob {
            name: format!("c{i}"),
            topic: "child".into(),
            payload: child(i).to_string().into_bytes(),
            ..Default::default()
        })
        .collect();
    jobs.push(FlowJob {
        name: "p".into(),
        topic: "parent".into(),
        payload: parent.to_string().into_bytes(),
        after: (0..children)
            .map(|i| Dep {
                name: format!("c{i}"),
                policy: Policy::Require,
            })
            .collect(),
        max_attempts: 0,
    });
    let spec = FlowSpec {
        id: Some(id.into()),
        jobs,
        fail_fast: false,
    };
    let plan = spec.plan(|| unreachable!()).unwrap();
    queue.flows().create(&plan, now_ms()).await.unwrap();
}

/// Wait until at least `n` jobs of flow `id` have ended (a Redis error
/// counts as not yet).
pub async fn until_flow_ended(queue: &Queue, id: &str, n: usize, within: Duration) {
    eventually(within, &format!("{n} jobs of flow {id} ended"), || async {
        match queue.flows().show(id).await {
            Ok(Some(flow)) => match flow.jobs.iter().filter(|j| j.ended.is_some()).count() {
                ended if ended >= n => Ok(()),
                ended => Err(format!("{ended} ended")),
            },
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// The `echo_deps` result of a [`fan_in`] parent: every child acked, `c<i>`
/// with result `i`, in order.
pub fn assert_fan_in_result(end: &hourglass::redis::JobEnd, children: usize) {
    let result = end.result.as_deref().unwrap_or_else(|| panic!("{end:?}"));
    let result: serde_json::Value = serde_json::from_slice(result).unwrap();
    let deps = result["deps"].as_array().unwrap();
    assert_eq!(deps.len(), children);
    for (i, d) in deps.iter().enumerate() {
        assert_eq!(
            (&d["ended"], &d["result"]),
            (&serde_json::json!("acked"), &serde_json::json!(i)),
            "{d}"
        );
    }
}

/// A project with the topics of `toml` and two more, `py` and `js`, run by
/// the Python and JavaScript probes (their results kept an hour).
pub fn with_python_and_javascript(mut toml: String) -> Project {
    use test_support::components::{JS_SDK_PROBE, PY_PROBE};
    for (name, wasm) in [("py", "py.wasm"), ("js", "js.wasm")] {
        toml.push_str(&format!(
            "[[topic]]\nname = \"{name}\"\nhandler = \"{wasm}\"\nresults = {{ keep = \"1h\" }}\n\n"
        ));
    }
    let project = Project::new("concurrency = 4", &toml);
    add_handler(&project, "py.wasm", PY_PROBE);
    add_handler(&project, "js.wasm", JS_SDK_PROBE);
    project
}

/// Topics `names` run by the probe, keeping results an hour (up to 1 MiB),
/// one attempt each by default.
pub fn probe_topics(names: &[&str]) -> String {
    let mut out = String::from("[defaults]\nmax_attempts = 1\n\n");
    for name in names {
        out.push_str(&format!(
            "[[topic]]\nname = \"{name}\"\nhandler = \"probe.wasm\"\nresults = {{ keep = \"1h\", max = \"1MiB\" }}\n\n"
        ));
    }
    out
}

/// The kept end of `topic`/`id` (it must have ended).
pub async fn end_of(queue: &Queue, topic: &str, id: &str) -> hourglass::redis::JobEnd {
    match queue.standing(&queue.keys(topic), id).await.unwrap() {
        hourglass::redis::Standing::Ended(end) => end,
        other => panic!("{topic}/{id} has not ended: {other:?}"),
    }
}

/// An end's result, as JSON.
pub fn result_json(end: &hourglass::redis::JobEnd) -> serde_json::Value {
    let result = end.result.as_deref();
    serde_json::from_slice(result.unwrap_or_else(|| panic!("no result: {end:?}"))).unwrap()
}

/// `hourglass serve` in the test's process: the API, console and metrics of
/// `project`'s `[http]` over its Redis, with no runner claiming jobs.
pub struct Served {
    /// Where it answers.
    pub addr: String,
    _stop: oneshot::Sender<()>,
}

impl Served {
    pub async fn start(project: &Project) -> Served {
        let config = project.config();
        let listen = config.http.as_ref().expect("[http] is configured").listen;
        let ops = hourglass::http::Ops::without_jobs(project.queue().await, config).unwrap();
        let listener = hourglass::http::bind(listen).await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(hourglass::http::serve(listener, ops, async {
            let _ = stopped.await;
        }));
        Served { addr, _stop: stop }
    }
}

/// Dead-letter `n` jobs of `topic` straight through the pipeline (no
/// handler runs): ids `<prefix><i:06>`, reason `failed: boom <i % 7>`, in
/// batches of 1,000, each batch dying at one millisecond (`at_ms` + its
/// number): newest first, the last batch, and within one, ids descending.
pub async fn dead_letters(queue: &Queue, topic: &str, prefix: &str, n: usize, at_ms: u64) {
    use hourglass::redis::{Burial, DeadInfo};
    let keys = queue.keys(topic);
    let retention = hourglass::config::DeadLetter {
        keep: u64::MAX / 2,
        max_age: Duration::from_secs(365 * 86_400),
    };
    for (batch, start) in (0..n).step_by(1000).enumerate() {
        let end = (start + 1000).min(n);
        let jobs: Vec<NewJob> = (start..end)
            .map(|i| NewJob {
                id: Some(format!("{prefix}{i:06}")),
                payload: b"{}".to_vec(),
                due_at_ms: 0,
                ..Default::default()
            })
            .collect();
        queue.enqueue(&keys, &jobs, at_ms).await.unwrap();
        let died = at_ms + batch as u64;
        let claimed = queue
            .pipeline()
            .claim(&keys, died, died + 600_000, 1000)
            .await
            .unwrap();
        let burials: Vec<Burial> = claimed
            .jobs
            .into_iter()
            .map(|job| {
                let i: usize = job.id[prefix.len()..].parse().unwrap();
                Burial {
                    id: job.id,
                    attempt: job.attempt,
                    info: DeadInfo {
                        reason: format!("failed: boom {}", i % 7),
                        attempts: 1,
                        failed_at_ms: died,
                        handler: Some("0123456789abcdef".into()),
                        costs: Vec::new(),
                        expires_at_ms: None,
                    },
                    end: None,
                    notice: None,
                    expired: None,
                    logs: String::new(),
                }
            })
            .collect();
        let refused = queue
            .pipeline()
            .bury(&keys, &burials, retention, died, Default::default())
            .await
            .unwrap();
        assert!(refused.is_empty(), "{refused:?}");
    }
}
