//! Versions that hold jobs, and upgrades by others than the CLI: a version
//! live jobs' journals pin them to survives `keep_versions` (in Redis and
//! on disk, the log naming the jobs) and goes once it holds none; a
//! promotion under `journaled = "replay"` moves the jobs whose check passes,
//! with the count in the verdict; the upgrade route of the API, its bad
//! input, and the versions route's live jobs per version.

use std::time::Duration;

use hourglass::clock::now_ms;
use serde_json::{Value, json};
use test_support::components::{CHECKOUT, CHECKOUT_V2, CHECKOUT_V3, CHECKOUT_V4};
use test_support::{HttpServer, Reply};

use crate::util::{Api, Project, RunnerProcess, Running, TOKEN, eventually, hash_of, hourglass};

const WAIT: Duration = Duration::from_secs(120);

fn topic(shop: &HttpServer, extra: &str) -> String {
    format!(
        "[[topic]]\nname = \"checkout\"\nhandler = \"checkout.wasm\"\nconcurrency = 4\n\
         timeout = \"20s\"\ngrants = {{ http = [\"{}\"] }}\n{extra}\n",
        shop.url()
    )
}

fn asleep(shop: &HttpServer, n: usize) -> String {
    format!(
        r#"{{"order": {n}, "shop": "{}", "sleep_ms": 3600000}}"#,
        shop.url()
    )
}

/// Enqueue `n` sleeping checkouts and wait until all are suspended; their ids.
async fn sleepers(queue: &hourglass::redis::Queue, shop: &HttpServer, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(crate::util::enqueue(queue, "checkout", &asleep(shop, i), 0, 0).await);
    }
    let keys = queue.keys("checkout");
    eventually(WAIT, "the jobs suspended", || async {
        let s = queue
            .stats(&keys, now_ms())
            .await
            .map_err(|e| e.to_string())?;
        if s.suspended == n as u64 && s.running == 0 {
            Ok(())
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;
    ids
}

/// The versions the topic keeps in Redis, once `wanted` holds of them.
async fn kept_until(
    queue: &hourglass::redis::Queue,
    what: &str,
    wanted: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let keys = queue.keys("checkout");
    eventually(WAIT, what, || async {
        let kept = queue
            .rollouts()
            .kept_versions(&keys)
            .await
            .map_err(|e| e.to_string())?;
        if wanted(&kept) {
            Ok(kept)
        } else {
            Err(format!("{kept:?}"))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_holding_jobs_survives_keep_versions_and_goes_once_it_holds_none() {
    let shop = HttpServer::start(vec![Reply::status(200, "ch_1")]);
    let project = Project::new("concurrency = 4\nkeep_versions = 2", &topic(&shop, ""));
    let file = project.handler("checkout.wasm");
    crate::util::deploy(&file, &std::fs::read(CHECKOUT).unwrap());
    let [v1, v2, v3, v4] = [CHECKOUT, CHECKOUT_V2, CHECKOUT_V3, CHECKOUT_V4].map(hash_of);
    let mut runner = RunnerProcess::start(&project);
    let queue = project.queue().await;
    let ids = sleepers(&queue, &shop, 3).await;
    for (component, version) in [(CHECKOUT_V2, &v2), (CHECKOUT_V3, &v3)] {
        crate::util::deploy(&file, &std::fs::read(component).unwrap());
        kept_until(&queue, "the new version kept", |k| k.contains(version)).await;
    }
    let line = runner
        .logged(
            &format!("version {v1} is kept beyond keep_versions (2)"),
            WAIT,
        )
        .await;
    let mut named = ids.clone();
    named.sort();
    assert!(
        line.contains(&format!(
            "3 live jobs ({}) are pinned to it by their journals",
            named.join(", ")
        )),
        "{line}"
    );
    let kept = kept_until(&queue, "three versions", |k| k.len() == 3).await;
    assert!(kept.contains(&v1), "{kept:?}");
    let listed: Value =
        serde_json::from_slice(&hourglass(&project, &["versions", "checkout", "--json"]).stdout)
            .unwrap();
    let v1_listed = listed["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["version"] == v1.as_str())
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(v1_listed["live_jobs"], 3, "{listed}");
    let text = String::from_utf8(hourglass(&project, &["versions", "checkout"]).stdout).unwrap();
    assert!(text.contains("LIVE JOBS"), "{text}");
    let kept_file = project
        .dir
        .path()
        .join(format!(".hourglass/versions/{v1}.wasm"));
    assert!(kept_file.is_file(), "v1's file is kept on disk too");
    // they finish on v1, not dead-lettered for a version the topic forgot
    let keys = queue.keys("checkout");
    for id in &ids {
        queue.wake(&keys, id, now_ms()).await.unwrap();
    }
    eventually(WAIT, "the jobs acked", || async {
        let s = queue
            .stats(&keys, now_ms())
            .await
            .map_err(|e| e.to_string())?;
        if s.scheduled + s.ready + s.running + s.dead == 0 {
            Ok(())
        } else {
            Err(format!("{s:?}"))
        }
    })
    .await;
    assert_eq!(queue.stats(&keys, now_ms()).await.unwrap().dead, 0);
    assert_eq!(
        shop.received()
            .iter()
            .filter(|r| r.path.starts_with("/email?"))
            .count(),
        3
    );
    // holding nothing now, v1 goes with the next deploy
    crate::util::deploy(&file, &std::fs::read(CHECKOUT_V4).unwrap());
    let kept = kept_until(&queue, "v1 forgotten", |k| {
        k.contains(&v4) && !k.contains(&v1)
    })
    .await;
    assert_eq!(kept.len(), 2, "{kept:?}");
    eventually(WAIT, "v1's file forgotten", || async {
        match kept_file.exists() {
            false => Ok(()),
            true => Err("still there".to_owned()),
        }
    })
    .await;
    runner.assert_alive();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promotion_under_journaled_replay_moves_the_jobs_whose_check_passes() {
    let shop = HttpServer::start(vec![Reply::status(200, "ch_1")]);
    let policy =
        r#"rollout = { canary = "50%", for = "1h", min_attempts = 100000, journaled = "replay" }"#;
    let project = Project::new("concurrency = 4", &topic(&shop, policy));
    let file = project.handler("checkout.wasm");
    crate::util::deploy(&file, &std::fs::read(CHECKOUT).unwrap());
    let (v1, v2) = (hash_of(CHECKOUT), hash_of(CHECKOUT_V2));
    let queue = project.queue().await;
    let running = Running::start(project.config()).await;
    let ids = sleepers(&queue, &shop, 5).await;
    crate::util::deploy(&file, &std::fs::read(CHECKOUT_V2).unwrap());
    let keys = queue.keys("checkout");
    eventually(WAIT, "the canary", || async {
        let r = queue
            .rollouts()
            .get(&keys)
            .await
            .map_err(|e| e.to_string())?;
        match r.canary {
            Some(c) if c.version == v2 => Ok(()),
            _ => Err(format!("{r:?}")),
        }
    })
    .await;
    let before = shop.received().len();
    let out = hourglass(&project, &["rollout", "checkout", "promote"]);
    assert!(out.status.success(), "{out:?}");
    let verdict = eventually(WAIT, "the moved count in the verdict", || async {
        let r = queue
            .rollouts()
            .get(&keys)
            .await
            .map_err(|e| e.to_string())?;
        match r.last {
            Some(v) if v.moved.is_some() => Ok(v),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(
        (verdict.moved, verdict.left),
        (Some(5), Some(0)),
        "{verdict:?}"
    );
    assert_eq!(shop.received().len(), before, "the checks sent nothing");
    for id in &ids {
        let pinned = queue.journal(&keys, id).await.unwrap().0.unwrap().version;
        assert_eq!(pinned.as_deref(), Some(v2.as_str()), "{id} moved from {v1}");
    }
    let shown: Value =
        serde_json::from_slice(&hourglass(&project, &["rollout", "checkout", "--json"]).stdout)
            .unwrap();
    assert_eq!(shown["rollout"]["last"]["moved"], 5, "{shown}");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_upgrades_journaled_jobs_and_names_the_field_of_bad_input() {
    let shop = HttpServer::start(vec![Reply::status(200, "ch_1")]);
    let http = format!("\n[http]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n");
    let project = Project::new("concurrency = 4", &format!("{}{http}", topic(&shop, "")));
    let file = project.handler("checkout.wasm");
    crate::util::deploy(&file, &std::fs::read(CHECKOUT).unwrap());
    let v2 = hash_of(CHECKOUT_V2);
    let queue = project.queue().await;
    let running = Running::start(project.config()).await;
    let api = Api(running.http.unwrap().to_string());
    let ids = sleepers(&queue, &shop, 3).await;
    crate::util::deploy(&file, &std::fs::read(CHECKOUT_V2).unwrap());
    kept_until(&queue, "v2 kept", |k| k.contains(&v2)).await;
    let path = "/api/topics/checkout/upgrade";
    for (body, status, field) in [
        (json!({}), 400, "to"),
        (json!({"to": "not-a-version", "all": true}), 400, "to"),
        (json!({"to": v2}), 400, "ids"),
        (json!({"to": v2, "all": true, "ids": ["x"]}), 400, "ids"),
        (json!({"to": v2, "all": true, "bogus": 1}), 400, "bogus"),
        (json!({"to": "0123456789abcdef", "all": true}), 409, "to"),
    ] {
        let answer = api.post(path, &body.to_string()).await;
        assert_eq!(answer.status, status, "{body}: {}", answer.body);
        assert_eq!(answer.json()["field"], field, "{body}: {}", answer.body);
    }
    let answer = api
        .post(
            "/api/topics/nope/upgrade",
            &json!({"to": v2, "all": true}).to_string(),
        )
        .await;
    assert_eq!(answer.status, 404, "{}", answer.body);
    let dry = api
        .post(
            path,
            &json!({"to": v2, "all": true, "dry_run": true}).to_string(),
        )
        .await;
    assert_eq!(dry.status, 200, "{}", dry.body);
    assert_eq!(
        dry.json()["moved"].as_array().unwrap().len(),
        3,
        "{}",
        dry.body
    );
    let versions = api.get("/api/topics/checkout/versions").await.json();
    let held: Vec<(String, u64)> = versions["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_str().unwrap().to_owned(),
                v["live_jobs"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(held.contains(&(hash_of(CHECKOUT), 3)), "{versions}");
    assert!(held.contains(&(v2.clone(), 0)), "{versions}");
    assert_eq!(versions["patches"], json!([]));
    let moved = api
        .post(path, &json!({"to": v2, "ids": [ids[0]]}).to_string())
        .await;
    assert_eq!(moved.status, 200, "{}", moved.body);
    assert_eq!(moved.json()["moved"][0]["id"], ids[0].as_str());
    let versions = api.get("/api/topics/checkout/versions").await.json();
    let live = |v: &str| {
        versions["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["version"] == v)
            .map(|k| k["live_jobs"].clone())
    };
    assert_eq!(live(&v2), Some(json!(1)), "{versions}");
    assert_eq!(live(&hash_of(CHECKOUT)), Some(json!(2)), "{versions}");
    running.stop().await;
}
