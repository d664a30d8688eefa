//! The scale route and its gauges say what Redis holds and follow the attempt
//! time.

use crate::util::{Api, Project, RunnerProcess, TOKEN, eventually, hourglass, metric};
use hourglass::clock::now_ms;
use hourglass::redis::Load;
use hourglass::redis::scale::{Capacity, HORIZON_MS, suggest};
use serde_json::Value;
use std::time::Duration;

use super::*;

/// `hourglass serve` (no runner) with `[http]` on a port of its own.
struct Serve {
    _child: tokio::process::Child,
    api: Api,
}

/// `[http]` on a free port appended to a copy of the project's queues.toml
/// named `name` (in the same folder): the file and the API's address.
fn with_http(project: &Project, name: &str) -> (std::path::PathBuf, String) {
    let port = test_support::free_port();
    let text = std::fs::read_to_string(project.config_path()).unwrap();
    let path = project.dir.path().join(name);
    std::fs::write(
        &path,
        format!("{text}\n[http]\nlisten = \"127.0.0.1:{port}\"\ntoken = \"{TOKEN}\"\n"),
    )
    .unwrap();
    (path, format!("127.0.0.1:{port}"))
}

async fn serve(project: &Project) -> Serve {
    let (config, addr) = with_http(project, "serve.toml");
    let child = tokio::process::Command::new(crate::util::hourglass_bin())
        .args(["serve", "--config"])
        .arg(config)
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(60), "hourglass serve listens", || {
        let addr = addr.clone();
        async move {
            tokio::net::TcpStream::connect(&addr)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    })
    .await;
    let api = Api(addr);
    Serve { _child: child, api }
}

fn topic<'a>(view: &'a Value, name: &str) -> &'a Value {
    view["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic"] == name)
        .unwrap_or_else(|| panic!("no topic {name} in {view:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scale_route_and_gauges_say_what_redis_holds_and_follow_the_attempt_time() {
    let topics = r#"
[[topic]]
name = "work"
handler = "probe.wasm"
concurrency = 1

[[topic]]
name = "fair"
handler = "probe.wasm"
fairness = { by = "key" }
key_concurrency = 1
"#;
    let project = Project::new("concurrency = 8", topics);
    let queue = project.queue().await;
    let now = now_ms();
    let spin = r#"{"spin_ms":100}"#;
    let work = queue.keys("work");
    // due 10 s ago, due now, in 30 s, in 5 minutes
    queue
        .enqueue(&work, &jobs("old", 5, now - 10_000, spin, None), now)
        .await
        .unwrap();
    queue
        .enqueue(&work, &jobs("now", 25, now, spin, None), now)
        .await
        .unwrap();
    queue
        .enqueue(&work, &jobs("soon", 20, now + 30_000, spin, None), now)
        .await
        .unwrap();
    queue
        .enqueue(&work, &jobs("later", 10, now + 300_000, spin, None), now)
        .await
        .unwrap();
    let fair = queue.keys("fair");
    queue
        .enqueue(
            &fair,
            &jobs("a", 5, now, r#"{"spin_ms":1500}"#, Some("acme")),
            now,
        )
        .await
        .unwrap();
    queue
        .enqueue(
            &fair,
            &jobs("b", 3, now, r#"{"spin_ms":1500}"#, Some("globex")),
            now,
        )
        .await
        .unwrap();

    let server = serve(&project).await;
    let view = server.api.get("/api/scale").await;
    assert_eq!(view.status, 200, "{}", view.body);
    let view = view.json();
    let w = topic(&view, "work");
    assert_eq!(w["ready"], 30, "{w:#}");
    assert_eq!(w["due_soon"], 20, "{w:#}");
    assert_eq!(w["running"], 0, "{w:#}");
    assert_eq!(w["concurrency"], 1, "{w:#}");
    assert!(
        w["oldest_ready_age_ms"].as_u64().unwrap() >= 10_000,
        "{w:#}"
    );
    assert_eq!(w["attempt_us"], Value::Null, "no runner has run it");
    assert_eq!(
        w["suggested_runners"], 1,
        "unmeasured work asks for one runner"
    );
    let f = topic(&view, "fair");
    assert_eq!(f["ready"], 8, "{f:#}");
    // due jobs reach their key's queue at a claim: no runner, no backlog per key yet
    assert_eq!(f["keys"]["keys_with_jobs"], 0, "{f:#}");
    assert_eq!(view["suggested_runners"], 1, "{view:#}");
    assert_eq!(view["runners"], 0);
    let one = server.api.get("/api/topics/work/scale").await.json();
    assert_eq!(one["ready"], 30, "{one:#}");
    assert_eq!(
        server.api.get("/api/topics/nope/scale").await.status,
        404,
        "an unknown topic"
    );
    let text = server.api.get("/metrics").await.body;
    assert_eq!(
        metric(
            &text,
            "hourglass_scale_due_next_minute",
            &["topic=\"work\""]
        ),
        20.0
    );
    assert_eq!(
        metric(
            &text,
            "hourglass_scale_suggested_runners",
            &["topic=\"work\""]
        ),
        1.0
    );
    assert_eq!(metric(&text, "hourglass_scale_fleet_runners", &[]), 1.0);
    assert!(
        metric(
            &text,
            "hourglass_scale_oldest_ready_age_seconds",
            &["topic=\"work\""]
        ) >= 10.0
    );

    // a runner runs the 100 ms jobs one at a time: its heartbeats carry the
    // attempt time, and the suggestion follows it
    queue
        .enqueue(&work, &jobs("more", 3000, now, spin, None), now)
        .await
        .unwrap();
    // the runner's own API (queues.toml), beside the one of `serve`
    let (runner_config, runner_addr) = with_http(&project, "runner.toml");
    std::fs::rename(&runner_config, project.config_path()).unwrap();
    let runner = RunnerProcess::start(&project);
    // claimed into their keys' queues, one at a time per key: the backlog per key
    let f = server
        .api
        .until("/api/topics/fair/scale", |t| {
            let sums: Vec<u64> = t["keys"]["top"]
                .as_array()
                .map(|top| {
                    top.iter()
                        .map(|k| {
                            k["queued"].as_u64().unwrap_or(0) + k["running"].as_u64().unwrap_or(0)
                        })
                        .collect()
                })
                .unwrap_or_default();
            sums == [5, 3]
        })
        .await;
    let top: Vec<(String, u64)> = f["keys"]["top"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let n = |f: &str| k[f].as_u64().unwrap();
            (
                k["key"].as_str().unwrap().to_owned(),
                n("queued") + n("running"),
            )
        })
        .collect();
    assert_eq!(
        top,
        [("acme".to_owned(), 5), ("globex".to_owned(), 3)],
        "{f:#}"
    );
    assert_eq!(
        (
            f["keys"]["other"].as_u64(),
            f["keys"]["keys_with_jobs"].as_u64()
        ),
        (Some(0), Some(2)),
        "{f:#}"
    );
    let measured = server
        .api
        .until("/api/topics/work/scale", |t| {
            t["attempt_us"].is_u64() && t["running"] == 1
        })
        .await;
    let attempt_us = measured["attempt_us"].as_u64().unwrap();
    assert!(
        attempt_us >= 100_000,
        "an attempt spins 100 ms of wall time: {attempt_us} us"
    );
    // an independent measure: the runner's own histogram of attempt times
    let text = Api(runner_addr).get("/metrics").await.body;
    let sum = metric(
        &text,
        "hourglass_attempt_duration_seconds_sum",
        &["topic=\"work\""],
    );
    let count = metric(
        &text,
        "hourglass_attempt_duration_seconds_count",
        &["topic=\"work\""],
    );
    let mean_us = sum / count * 1e6;
    assert!(
        count > 0.0 && (0.5..2.0).contains(&(attempt_us as f64 / mean_us)),
        "heartbeat {attempt_us} us against the histogram's mean {mean_us:.0} us over {count} attempts"
    );
    let load: Load = Load {
        ready: measured["ready"].as_u64().unwrap(),
        oldest_ready_age_ms: measured["oldest_ready_age_ms"].as_u64(),
        running: measured["running"].as_u64().unwrap(),
        suspended: measured["suspended"].as_u64().unwrap(),
        due_soon: measured["due_soon"].as_u64().unwrap(),
        paused: false,
    };
    let expected = suggest(
        &load,
        Capacity {
            concurrency: 1,
            rate_per_s: None,
        },
        Some(attempt_us),
        HORIZON_MS,
    );
    assert_eq!(measured["suggested_runners"], expected, "{measured:#}");
    assert!(
        expected >= 4,
        "about 3,000 jobs of 100 ms through one slot need several runners in a minute: {measured:#}"
    );
    // paused, its ready jobs need no runner: what runs is all that counts
    let paused = hourglass(&project, &["pause", "work"]);
    assert!(paused.status.success());
    let quiet = server
        .api
        .until("/api/topics/work/scale", |t| {
            t["paused"] == true && t["running"] == 0
        })
        .await;
    assert_eq!(quiet["suggested_runners"], 0, "{quiet:#}");
    runner.kill();
}
