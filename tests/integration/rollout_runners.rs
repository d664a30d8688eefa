//! Runners whose handler folders differ: a file's version the topic already
//! knows (replaced, retired) starts no canary, so two runners do not flip a
//! topic between their files every window; a runner told to serve a version
//! it lacks claims nothing of the topic and says so (a warning once, the
//! `hourglass_version_missing` gauge, its entry in `hourglass runners`)
//! until it has the file. And `keep_versions` has one meaning: a job pinned
//! to a version its topic no longer keeps does not run on it, even where
//! another topic keeps the file.

use std::time::Duration;

use test_support::components::{ECHO, NOOP, PROBE};

use crate::util::{
    Api, Project, RedisServer, RunnerProcess, TOKEN, deploy, eventually, hash_of, hourglass,
};

const WAIT: Duration = Duration::from_secs(60);

/// Topic `pay` under a short rollout policy, with the API on `port`.
fn project(redis: &RedisServer, port: u16) -> Project {
    let project = Project::with_redis(
        redis.url(),
        "concurrency = 2",
        &format!(
            "[[topic]]\nname = \"pay\"\nhandler = \"pay.wasm\"\n\
             rollout = {{ canary = \"50%\", for = \"1s\", min_attempts = 1 }}\n\n\
             [http]\nlisten = \"127.0.0.1:{port}\"\ntoken = \"{TOKEN}\"\n"
        ),
    );
    deploy(&project.handler("pay.wasm"), &std::fs::read(ECHO).unwrap());
    project
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_with_an_older_file_starts_no_canary_and_says_it_lacks_the_stable_version() {
    let redis = RedisServer::start();
    let (port_b, port_c) = (test_support::free_port(), test_support::free_port());
    let (b, c) = (project(&redis, port_b), project(&redis, port_c));
    let (v1, v2) = (hash_of(ECHO), hash_of(NOOP));
    let log = "info,hourglass=info,wasmtime=warn,cranelift=warn";
    let _runner_b = RunnerProcess::launch(&b, log);
    let mut runner_c = RunnerProcess::launch(&c, log);
    let queue = b.queue().await;
    let keys = queue.keys("pay");
    let state = || {
        let (queue, keys) = (queue.clone(), keys.clone());
        async move { queue.rollouts().get(&keys).await.unwrap() }
    };
    eventually(WAIT, "v1 stable", || async {
        match state().await.stable {
            Some(s) if s == v1 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // v2 on b only: new to the topic, so it starts a canary; promoted by hand
    deploy(&b.handler("pay.wasm"), &std::fs::read(NOOP).unwrap());
    eventually(WAIT, "v2 a canary", || async {
        match state().await.canary {
            Some(c) if c.version == v2 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // the status names the window's end for what it is, and --json carries
    // the policy, as the API does
    let status = hourglass(&b, &["rollout", "pay"]);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("verdict due at"), "{text}");
    let json: serde_json::Value =
        serde_json::from_slice(&hourglass(&b, &["rollout", "pay", "--json"]).stdout).unwrap();
    assert_eq!(json["policy"]["canary"], 0.5, "{json}");
    assert_eq!(json["policy"]["window_ms"], 1000, "{json}");
    let promoted = hourglass(&b, &["rollout", "pay", "promote"]);
    assert!(promoted.status.success(), "{promoted:?}");
    // c still holds v1, a version the topic knows as replaced: over several
    // of its reports (every 250 ms) and two of the policy's windows, no
    // canary of v1 and v2 stays stable
    for _ in 0..12 {
        let now = state().await;
        assert_eq!(now.stable.as_deref(), Some(v2.as_str()), "{now:?}");
        assert!(
            now.canary.is_none(),
            "a replaced version started a canary: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // c lacks v2: it claims nothing of `pay`, and says so once, in its
    // metrics and in its runners entry
    runner_c
        .logged(
            &format!("its stable version is {v2}, which this runner does not have"),
            WAIT,
        )
        .await;
    let c_api = Api(format!("127.0.0.1:{port_c}"));
    let gauge =
        format!("hourglass_version_missing{{topic=\"pay\",version=\"{v2}\",role=\"stable\"}} 1");
    eventually(WAIT, "the gauge", || async {
        let body = c_api.get("/metrics").await.body;
        if body.lines().any(|l| l == gauge) {
            Ok(())
        } else {
            Err(body)
        }
    })
    .await;
    let c_missing = || async {
        let out = hourglass(&c, &["runners", "--json"]);
        assert!(out.status.success(), "{out:?}");
        // one JSON object per runner and line
        let text = String::from_utf8_lossy(&hourglass(&c, &["runners"]).stdout).into_owned();
        let missing: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .flat_map(|r| r["missing"].as_array().cloned().unwrap_or_default())
            .collect();
        (missing, text)
    };
    eventually(WAIT, "c's runners entry names what it lacks", || async {
        let (missing, text) = c_missing().await;
        let named = missing
            .iter()
            .any(|m| m["topic"] == "pay" && m["version"] == v2.as_str() && m["role"] == "stable");
        if named && text.contains("lacks") {
            Ok(())
        } else {
            Err(format!("{missing:?}\n{text}"))
        }
    })
    .await;
    // given the file, c serves again and the gauge and the entry clear
    deploy(&c.handler("pay.wasm"), &std::fs::read(NOOP).unwrap());
    eventually(WAIT, "nothing lacking", || async {
        let (missing, _) = c_missing().await;
        let body = c_api.get("/metrics").await.body;
        if missing.is_empty() && !body.contains("hourglass_version_missing{") {
            Ok(())
        } else {
            Err(format!("{missing:?}"))
        }
    })
    .await;
    let settled = state().await;
    assert!(settled.canary.is_none(), "{settled:?}");
    assert_eq!(settled.stable.as_deref(), Some(v2.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_pinned_to_a_version_its_topic_no_longer_keeps_does_not_run_on_it() {
    // `keep_versions` has one meaning: the versions a topic's catalogue
    // lists. Topic `other` still keeps echo's file on this runner; `pay`
    // has moved two versions past it.
    let project = Project::new(
        "concurrency = 2\nkeep_versions = 2",
        "[[topic]]\nname = \"pay\"\nhandler = \"pay.wasm\"\nmax_attempts = 1\n\n\
         [[topic]]\nname = \"other\"\nhandler = \"other.wasm\"\n",
    );
    let (pay, other) = (project.handler("pay.wasm"), project.handler("other.wasm"));
    deploy(&pay, &std::fs::read(ECHO).unwrap());
    deploy(&other, &std::fs::read(ECHO).unwrap());
    let echo = hash_of(ECHO);
    let mut runner = crate::util::Running::start(project.config()).await;
    let queue = project.queue().await;
    let keys = queue.keys("pay");
    let listed = |keys: hourglass::redis::TopicKeys| {
        let queue = queue.clone();
        async move { queue.rollouts().kept_versions(&keys).await.unwrap() }
    };
    // until pay's catalogue keeps `version`
    let kept = |version: String| {
        let (listed, keys) = (&listed, keys.clone());
        async move {
            eventually(WAIT, "the version kept by pay", || async {
                let l = listed(keys.clone()).await;
                if l.contains(&version) {
                    Ok(())
                } else {
                    Err(format!("{version} not in {l:?}"))
                }
            })
            .await
        }
    };
    kept(echo.clone()).await;
    // a job pinned to echo, held back while pay moves on
    queue.admin().set_paused(&keys, true).await.unwrap();
    let job = hourglass::redis::NewJob {
        id: Some("pinned".into()),
        payload: b"{}".to_vec(),
        version: Some(echo.clone()),
        ..Default::default()
    };
    queue
        .enqueue(&keys, &[job], hourglass::clock::now_ms())
        .await
        .unwrap();
    for component in [NOOP, PROBE] {
        deploy(&pay, &std::fs::read(component).unwrap());
        kept(hash_of(component)).await;
    }
    let now_listed = listed(keys.clone()).await;
    assert!(
        !now_listed.contains(&echo),
        "pay no longer keeps echo: {now_listed:?}"
    );
    assert!(
        listed(queue.keys("other")).await.contains(&echo),
        "other still does"
    );
    // `enqueue --version` says the same
    let refused = hourglass(&project, &["enqueue", "pay", "{}", "--version", &echo]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    queue.admin().set_paused(&keys, false).await.unwrap();
    let events = runner.until_settled("pay", "pinned", WAIT).await;
    let dead = events.iter().find_map(|e| match &e.kind {
        hourglass::events::EventKind::Dead { reason } if e.id == "pinned" => Some(reason.clone()),
        _ => None,
    });
    let reason = dead.unwrap_or_else(|| panic!("not run on echo, dead-lettered: {events:?}"));
    assert!(reason.contains("no longer keeps version"), "{reason}");
    runner.stop().await;
}
