//! A live runner keeps its jobs however late its attempts run: the only
//! thread of its pool (where attempts run) stopped by ptrace for well over
//! a job's lease (timeout + lease_margin) while its own thread claims,
//! commits and extends; each job then runs once, its story one attempt,
//! nothing requeued. A runner killed while its attempts wait stops keeping
//! them: another runner runs them (not 3 minutes later, the most an
//! extension may keep a lease).

use std::time::{Duration, Instant};

use hourglass::redis::{AttemptOutcome, JobEnd, JobState, Queue, Standing};

use crate::util::{
    Project, RUNNER_LOG, RunnerProcess, enqueue, eventually, hourglass_bin, stop_threads,
    threads_named,
};

const TOPICS: &str = "[[topic]]\nname = \"t\"\nhandler = \"probe.wasm\"\ntimeout = \"1s\"\n\
     max_attempts = 5\nresults = { keep = \"1h\" }\n";

/// Wait for each of `ids` to end; their ends.
async fn ends(queue: &Queue, ids: &[String], within: Duration) -> Vec<JobEnd> {
    let keys = queue.keys("t");
    let mut out = Vec::new();
    for id in ids {
        let end = eventually(within, &format!("job {id} ended"), || async {
            match queue.standing(&keys, id).await.unwrap() {
                Standing::Ended(end) => Ok(end),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        out.push(end);
    }
    out
}

/// Wait until each of `ids` is leased; their attempt counts.
async fn leased(queue: &Queue, ids: &[String]) -> Vec<u32> {
    let keys = queue.keys("t");
    let mut out = Vec::new();
    for id in ids {
        let n = eventually(Duration::from_secs(30), "claimed", || async {
            match queue.inspect(&keys, id, 0).await.unwrap() {
                Some(v) if matches!(v.state, JobState::Running(_)) => Ok(v.attempts),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        out.push(n);
    }
    out
}

/// Each end's attempts: number and outcome.
fn stories(ends: &[JobEnd]) -> Vec<Vec<(u32, Option<AttemptOutcome>)>> {
    ends.iter()
        .map(|e| e.history.iter().map(|a| (a.attempt, a.outcome)).collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attempts_that_wait_past_their_lease_on_a_live_runner_run_once() {
    let project = Project::new(
        "concurrency = 8\nlease_margin = \"300ms\"\nlight_cpu = \"0ms\"",
        TOPICS,
    );
    let args = ["--threads", "1"];
    let runner = RunnerProcess::launch_with(hourglass_bin(), &project, RUNNER_LOG, &args);
    runner.wait_for("hourglass running", Duration::from_secs(180));
    let queue = project.queue().await;
    // the first attempt compiles and warms what later ones reuse
    let warm = enqueue(&queue, "t", "{}", 0, 0).await;
    ends(&queue, &[warm], Duration::from_secs(60)).await;

    let pool = threads_named(runner.id(), "hourglass-pool");
    let stopped = stop_threads(&pool);
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(enqueue(&queue, "t", "{}", 0, 0).await);
    }
    assert_eq!(leased(&queue, &ids).await, [1; 4]);
    // the leases ran 1.3 s from the claim; the runner's housekeeping looks
    // once a second: 3.5 s is past both
    let since = Instant::now();
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let still = leased(&queue, &ids).await;
    drop(stopped);
    let waited = since.elapsed();
    assert_eq!(
        still, [1; 4],
        "after {waited:?} stopped, each job still held by its first attempt"
    );
    let first = ends(&queue, &ids, Duration::from_secs(60)).await;
    let once = vec![(1, Some(AttemptOutcome::Ack))];
    assert_eq!(stories(&first), vec![once; 4], "each ran once");
    let log = runner.log();
    assert!(
        !log.contains("lease expired") && !log.contains("lost its lease"),
        "{log}"
    );

    // killed while its attempts wait: nobody keeps their leases, another
    // runner runs them
    let stopped = stop_threads(&threads_named(runner.id(), "hourglass-pool"));
    let mut late = Vec::new();
    for _ in 0..2 {
        late.push(enqueue(&queue, "t", "{}", 0, 0).await);
    }
    assert_eq!(leased(&queue, &late).await, [1; 2]);
    let pid = nix::unistd::Pid::from_raw(runner.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    drop(stopped);
    runner.kill();
    let killed = Instant::now();
    let other = RunnerProcess::start(&project);
    let second = ends(&queue, &late, Duration::from_secs(60)).await;
    let taken = killed.elapsed();
    let again = vec![
        (1, Some(AttemptOutcome::LeaseExpired)),
        (2, Some(AttemptOutcome::Ack)),
    ];
    assert_eq!(stories(&second), vec![again; 2]);
    // not a speed claim: kept by nobody, they are not held for the 180 s
    // an extension may keep a lease (leases.rs: OVERRUN)
    assert!(taken < Duration::from_secs(90), "{taken:?}");
    other.kill();
}
