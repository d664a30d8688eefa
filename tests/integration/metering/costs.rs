//! What each attempt cost, shown: peak memory and its histogram, `inspect` and
//! the dead letter, usage per account.

use crate::util::{Api, Project, Running, TOKEN, enqueue, hourglass};
use hourglass::events::EventKind;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_peak_memory_is_what_the_instance_grew_to_and_the_histogram_moves() {
    let project = Project::new(
        "",
        &format!(
            "[[topic]]\nname = \"membomb\"\nhandler = \"membomb.wasm\"\nmemory = \"64MiB\"\n\n\
             [http]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n"
        ),
    );
    let mut running = Running::start(project.config()).await;
    let api = Api(running.http.unwrap().to_string());
    let queue = project.queue().await;

    let none = enqueue(&queue, "membomb", r#"{"grow_mib":0}"#, 0, 0).await;
    let events = running.until_settled("membomb", &none, WAIT).await;
    let base = usage(&events, "membomb", &none).memory_peak;
    let grown = enqueue(&queue, "membomb", r#"{"grow_mib":40}"#, 0, 0).await;
    let events = running.until_settled("membomb", &grown, WAIT).await;
    let peak = usage(&events, "membomb", &grown).memory_peak;
    assert!(
        base > 0 && base < 8 << 20,
        "a Rust handler starts with about 1 MiB: {base}"
    );
    assert_eq!(
        peak - base,
        40 << 20,
        "growing by 40 MiB: peak {peak}, at start {base}"
    );

    let text = api.get("/metrics").await.body;
    let peaks = buckets(&text, "hourglass_attempt_memory_peak_bytes", "membomb");
    let mib = f64::from(1u32 << 20);
    assert_eq!(at(&peaks, 32.0 * mib), 1, "the small attempt: {peaks:?}");
    assert_eq!(at(&peaks, 64.0 * mib), 2, "and the 40 MiB one: {peaks:?}");
    let cpu = buckets(&text, "hourglass_attempt_cpu_seconds", "membomb");
    assert_eq!(cpu.last().unwrap().1, 2, "{cpu:?}");
    assert!(
        text.contains("hourglass_cpu_seconds_total{topic=\"membomb\""),
        "{text}"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_and_the_dead_letter_show_each_attempts_cost() {
    let project = Project::new(
        "",
        "[[topic]]\nname = \"flaky\"\nhandler = \"flaky.wasm\"\nmax_attempts = 2\n\
         backoff = { base = \"3s\", jitter = 0.0 }\n",
    );
    let mut running = Running::start(project.config()).await;
    let queue = project.queue().await;
    let id = enqueue(&queue, "flaky", r#"{"fail_first":5}"#, 0, 0).await;
    running
        .until(WAIT, |seen| {
            seen.iter()
                .any(|e| e.id == id && matches!(e.kind, EventKind::Retried { .. }))
        })
        .await;
    // between attempts: the first one's cost, with the job
    let out = hourglass(&project, &["inspect", "flaky", &id, "--json"]);
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let first = &view["last_failure"]["attempts"];
    assert_eq!(first.as_array().map(Vec::len), Some(1), "{view}");
    assert_eq!(first[0]["attempt"], 1);
    assert!(first[0]["memory_peak"].as_u64().unwrap() > 0, "{view}");
    assert!(first[0]["wall_us"].as_u64().unwrap() > 0, "{view}");

    let events = running.until_settled("flaky", &id, WAIT).await;
    let second = usage(&events, "flaky", &id);
    let out = hourglass(&project, &["inspect", "flaky", &id, "--json"]);
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let costs = view["dead"]["costs"]
        .as_array()
        .expect("the dead letter keeps them");
    assert_eq!(costs.len(), 2, "{view}");
    assert_eq!(costs[1]["cpu_us"], second.cpu_us);
    assert_eq!(costs[1]["memory_peak"], second.memory_peak);

    let text = hourglass(&project, &["inspect", "flaky", &id]);
    let text = String::from_utf8_lossy(&text.stdout);
    // the header, then each attempt's line (its error under it)
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("history"))
        .filter(|l| {
            let l = l.trim_start();
            l.starts_with("history") || l.starts_with(|c: char| c.is_ascii_digit())
        })
        .take(3)
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(
        rows[0].contains("cpu") && rows[0].contains("memory"),
        "{text}"
    );
    assert!(
        rows[1].trim_start().starts_with('1') && rows[1].contains(" ms"),
        "{text}"
    );
    assert!(
        rows[2].trim_start().starts_with('2') && rows[2].contains("MiB"),
        "{text}"
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_per_account_is_the_sum_of_what_each_attempt_recorded() {
    use std::collections::{BTreeMap, HashMap};

    use hourglass::redis::{Enqueued, NewJob};

    const ACCOUNTS: [&str; 3] = ["acme", "globex", "initech"];
    let project = Project::new(
        "",
        &format!(
            "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n\n\
             [http]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n"
        ),
    );
    let mut running = Running::start(project.config()).await;
    let api = Api(running.http.unwrap().to_string());
    let queue = project.queue().await;
    let keys = queue.keys("echo");
    // 1,000 tagged jobs over three accounts, and 50 untagged ones
    let mut account_of: HashMap<String, &str> = HashMap::new();
    for batch in 0..11 {
        let jobs: Vec<NewJob> = (0..100)
            .map(|i| NewJob {
                payload: b"{}".to_vec(),
                due_at_ms: hourglass::clock::now_ms(),
                account: (batch < 10).then(|| ACCOUNTS[(batch * 100 + i) % 3].to_owned()),
                ..Default::default()
            })
            .take(if batch < 10 { 100 } else { 50 })
            .collect();
        let answers = queue
            .enqueue(&keys, &jobs, hourglass::clock::now_ms())
            .await
            .unwrap();
        for (job, answer) in jobs.iter().zip(answers) {
            let Enqueued::New(id) = answer else {
                panic!("{answer:?}")
            };
            if let Some(a) = &job.account {
                account_of.insert(id, ACCOUNTS.iter().find(|x| *x == a).unwrap());
            }
        }
    }
    let events = running
        .until(WAIT, |seen| {
            seen.iter().filter(|e| e.kind == EventKind::Acked).count() == 1050
        })
        .await;
    // what each attempt recorded, summed per account here
    let mut expected: BTreeMap<&str, (u64, u64, u64)> = BTreeMap::new();
    for e in &events {
        if let EventKind::Ran { usage } = &e.kind
            && let Some(account) = account_of.get(&e.id)
        {
            let sum = expected.entry(account).or_default();
            sum.0 += 1;
            sum.1 += usage.cpu_us;
            sum.2 += usage.wall_us;
        }
    }
    assert_eq!(expected.values().map(|s| s.0).sum::<u64>(), 1000);
    // the runner adds its sums with its heartbeat (every 2 s)
    let reported = |v: &serde_json::Value| -> BTreeMap<String, (u64, u64, u64)> {
        v["accounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                let n = |k: &str| a[k].as_u64().unwrap();
                (
                    a["account"].as_str().unwrap().to_owned(),
                    (n("attempts"), n("cpu_us"), n("wall_us")),
                )
            })
            .collect()
    };
    let want: BTreeMap<String, (u64, u64, u64)> =
        expected.iter().map(|(a, s)| (a.to_string(), *s)).collect();
    api.until("/api/usage?since=1h", |v| reported(v) == want)
        .await;
    let one = api.get("/api/usage?account=globex").await.json();
    assert_eq!(one["accounts"].as_array().unwrap().len(), 1, "{one}");
    assert_eq!(one["accounts"][0]["attempts"], want["globex"].0);
    let bad = api.get("/api/usage?since=soon").await;
    assert_eq!(
        (bad.status, bad.json()["field"].clone()),
        (400, "since".into())
    );
    running.stop().await;

    // the CLI reads the same sums
    let out = hourglass(&project, &["usage", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut cli: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let sum = cli
            .entry(v["account"].as_str().unwrap().to_owned())
            .or_default();
        sum.0 += v["attempts"].as_u64().unwrap();
        sum.1 += v["cpu_us"].as_u64().unwrap();
        sum.2 += v["wall_us"].as_u64().unwrap();
    }
    assert_eq!(cli, want);
    let text = hourglass(&project, &["usage"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("acme ") && l.contains(" s ")),
        "{text}"
    );
    // a bad account is refused before anything is written
    let refused = hourglass(
        &project,
        &["enqueue", "echo", "{}", "--account", "two words"],
    );
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--account: account \"two words\""),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    // acked jobs leave no account behind
    let mut redis = redis::Client::open(project.endpoint.urls()[0].as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let left: u64 = redis::cmd("HLEN")
        .arg(&keys.account)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(left, 0);
}
