//! Measures beside the drain: a fresh instance's cost, lateness spread
//! over time, and a `/metrics` scrape.

use std::time::{Duration, Instant};

use super::*;

/// The no-op job of `component` run n times, each in a fresh instance (or,
/// with `reuse`, in one instance reused for up to 1,000 jobs), no Redis: host
/// cost per job. Compiled handlers are kept in `cache` when given.
pub async fn instance(
    component: &str,
    n: usize,
    reuse: bool,
    cache: Option<&std::path::Path>,
) -> anyhow::Result<serde_json::Value> {
    let runtime = Runtime::new(72, cache)?;
    let handler = runtime.load(std::path::Path::new(component))?;
    let sandbox = Sandbox {
        logs: 0,
        result_max: 64 << 10,
        reuse: reuse.then_some(hourglass::config::Reuse {
            jobs: 1_000,
            idle: Duration::from_secs(60),
        }),
        timeout: Duration::from_secs(30),
        cpu: None,
        memory: 64 << 20,
        grants: Default::default(),
        may_enqueue: Vec::new().into(),
        max_payload: 1 << 20,
        http: Default::default(),
        journal: Default::default(),
    };
    let input = |i: usize| JobInput {
        parent_result: None,
        trace: None,
        pass_through: None,
        journal: None,
        upstream: Default::default(),
        topic: TOPIC.into(),
        id: i.to_string(),
        attempt: 1,
        payload: b"{}".to_vec(),
        max_attempts: 5,
        enqueued_at_ms: 0,
        due_at_ms: 0,
    };
    for i in 0..n.min(100) {
        // warm up, and make sure what is timed is a job that acks
        let attempted = runtime.run(&handler, input(i), &sandbox).await;
        anyhow::ensure!(
            matches!(attempted.finish, hourglass::wasm::Finish::Ack(_)),
            "{component}: the no-op did not ack: {:?}",
            attempted.finish
        );
    }
    let t0 = Instant::now();
    for i in 0..n {
        runtime.run(&handler, input(i), &sandbox).await;
    }
    Ok(serde_json::json!({ "us_per_job": t0.elapsed().as_secs_f64() * 1e6 / n as f64 }))
}

/// n immediate no-op jobs spread over `topics` topics, processed by one runner
/// with the default configuration (plus `redis_lines` in `[redis]`), against
/// one server or a cluster: jobs/s.
pub async fn spread(
    endpoint: &Endpoint,
    topics: usize,
    n: usize,
    redis_lines: &str,
) -> anyhow::Result<f64> {
    let target = if endpoint.servers.is_cluster() {
        format!("cluster = {:?}", endpoint.urls())
    } else {
        format!("url = {:?}", endpoint.urls()[0])
    };
    let names: Vec<String> = (0..topics).map(|t| format!("t{t}")).collect();
    let mut toml = format!("[redis]\n{target}\nnamespace = \"spread\"\n{redis_lines}\n\n");
    for name in &names {
        toml.push_str(&format!(
            "[[topic]]\nname = \"{name}\"\nhandler = \"echo.wasm\"\n\n"
        ));
    }
    let dir = echo_project(&toml)?;
    let path = dir.path().join("queues.toml");
    let q = Queue::open(endpoint, "spread").await?;
    for name in &names {
        enqueue_all(&q, &q.keys(name), &jobs(n / topics, |_| 0, b"{}")).await?;
    }
    let runner = Runner::start(Config::load(&path)?).await?;
    let t0 = Instant::now();
    let bg = Background::start(runner);
    loop {
        let mut left = 0;
        for name in &names {
            let s = q.stats(&q.keys(name), now_ms()).await?;
            left += s.ready + s.scheduled + s.running;
        }
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    bg.stop().await?;
    Ok((n / topics * topics) as f64 / secs)
}

/// 100 topics with jobs waiting and dead letters, a runner serving `[http]`:
/// the latency of a `/metrics` scrape that reads Redis (the once-a-second
/// refresh) and of one served from the cache, and of `GET /api/topics` (the
/// dashboard's main call).
pub async fn scrape(url: &str, topics: usize, samples: usize) -> anyhow::Result<serde_json::Value> {
    let mut text = format!(
        "[redis]\nurl = \"{url}\"\nnamespace = \"bench\"\n\n[http]\nlisten = \"127.0.0.1:0\"\n\n"
    );
    for t in 0..topics {
        text.push_str(&format!(
            "[[topic]]\nname = \"t{t}\"\nhandler = \"echo.wasm\"\n\n"
        ));
    }
    let dir = echo_project(&text)?;
    let config = Config::load(&dir.path().join("queues.toml"))?;
    let listen = config.http.as_ref().expect("[http]").listen;
    // work for the gauges to count: jobs due tomorrow in every topic
    let q = Queue::connect(url, "bench").await?;
    let tomorrow = now_ms() + 86_400_000;
    for t in 0..topics {
        enqueue_all(
            &q,
            &q.keys(&format!("t{t}")),
            &jobs(100, |_| tomorrow, b"{}"),
        )
        .await?;
    }
    let runner = Runner::start(config).await?;
    let listener = hourglass::http::bind(listen).await?;
    let addr = listener.local_addr()?.to_string();
    let (stop_http, http_stopped) = oneshot::channel::<()>();
    tokio::spawn(hourglass::http::serve(listener, runner.ops(), async {
        let _ = http_stopped.await;
    }));
    let bg = Background::start(runner);
    let timed = |path: &'static str| {
        let addr = addr.clone();
        async move {
            let t = Instant::now();
            let answer = test_support::http_client::call(&addr, "GET", path, None, None).await;
            anyhow::ensure!(answer.status == 200, "{path}: {}", answer.status);
            Ok::<f64, anyhow::Error>(t.elapsed().as_secs_f64() * 1000.0)
        }
    };
    let (mut fresh, mut cached, mut api) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..samples {
        tokio::time::sleep(Duration::from_millis(1_050)).await;
        fresh.push(timed("/metrics").await?);
        cached.push(timed("/metrics").await?);
        api.push(timed("/api/topics").await?);
    }
    let _ = stop_http.send(());
    bg.stop().await?;
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(serde_json::json!({
        "topics": topics,
        "scrape_fresh_ms": median(&mut fresh),
        "scrape_cached_ms": median(&mut cached),
        "api_topics_ms": median(&mut api),
    }))
}
