//! Tenant keys operated with a real runner: the CLI and the API (pause,
//! resume, weight, `stats --by-key`, inspect, `/metrics`, bad input), and a
//! follow-up taking its parent's key.

use std::time::Duration;

use hourglass::clock::now_ms;

use crate::fairness::{jobs_of, put};
use crate::util::{Api, Project, Running, eventually, hourglass};

/// The CLI and the API: enqueue with a key, inspect shows it, pause and
/// resume a key, weights, `stats --by-key`, and bad input refused clearly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_operated_over_the_cli_and_the_api() {
    let project = Project::new(
        "",
        &format!(
            "[[topic]]\nname = \"exports\"\nhandler = \"echo.wasm\"\nfairness = {{ by = \"key\" }}\n\n\
             [[topic]]\nname = \"plain\"\nhandler = \"echo.wasm\"\n\n\
             [http]\nlisten = \"127.0.0.1:0\"\ntoken = \"{}\"\n",
            crate::util::TOKEN
        ),
    );
    // bad input, before anything runs
    for (args, says) in [
        (
            &["enqueue", "exports", "{}", "--key", ""][..],
            "--key: key is empty",
        ),
        (
            &["enqueue", "exports", "{}", "--key", "a b"][..],
            "only letters",
        ),
        (
            &["key", "weight", "exports", "acme", "0"][..],
            "0 is not in 1..=10000",
        ),
        (
            &["key", "weight", "exports", "acme", "-2"][..],
            "unexpected argument",
        ),
        (&["key", "pause", "plain", "acme"][..], "has no `fairness`"),
    ] {
        let out = hourglass(&project, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let mut runner = Running::start(project.config()).await;
    let api = Api(runner.http.expect("[http] is served").to_string());
    let out = hourglass(&project, &["key", "pause", "exports", "acme"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = hourglass(
        &project,
        &["enqueue", "exports", "{}", "--id", "a1", "--key", "acme"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let posted = api
        .post(
            "/api/topics/exports/jobs",
            r#"{"id":"b1","payload":{},"key":"bolt"}"#,
        )
        .await;
    assert_eq!(posted.status, 201, "{}", posted.body);
    let bad = api
        .post("/api/topics/exports/jobs", r#"{"payload":{},"key":""}"#)
        .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains(r#""field":"key""#), "{}", bad.body);
    runner
        .until_settled("exports", "b1", Duration::from_secs(20))
        .await;
    // acme is paused: its job waits, listed as queued and paused
    let inspect = hourglass(&project, &["inspect", "exports", "a1"]);
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(
        text.contains("key") && text.contains("acme") && text.contains("ready"),
        "{text}"
    );
    let stats = hourglass(&project, &["stats", "--by-key", "exports", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    let acme = json["top"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key"] == "acme")
        .cloned();
    assert_eq!(
        acme.as_ref()
            .map(|a| (a["queued"].clone(), a["paused"].clone())),
        Some((1.into(), true.into())),
        "{json}"
    );
    let listed = api.get("/api/topics/exports/keys?top=5").await;
    assert!(
        listed.status == 200 && listed.body.contains("acme"),
        "{}",
        listed.body
    );
    let put_weight = |body: &'static str| {
        test_support::http_client::call(
            &api.0,
            "PUT",
            "/api/topics/exports/keys/acme/weight",
            Some(crate::util::TOKEN),
            Some(body),
        )
    };
    let weight = put_weight(r#"{"weight":0}"#).await;
    assert_eq!(weight.status, 400, "{}", weight.body);
    assert!(
        weight.body.contains(r#""field":"weight""#),
        "{}",
        weight.body
    );
    let weight = put_weight(r#"{"weight":3}"#).await;
    assert_eq!(weight.status, 200, "{}", weight.body);
    let conflict = api.post("/api/topics/plain/keys/acme/pause", "").await;
    assert_eq!(conflict.status, 409, "{}", conflict.body);
    let metrics = api.get("/metrics").await;
    assert!(
        metrics
            .body
            .contains(r#"hourglass_key_queued{topic="exports",key="acme"} 1"#),
        "{}",
        metrics.body
    );
    assert!(metrics.body.contains(r#"key="other""#), "{}", metrics.body);
    // resumed over the API: the job runs
    let resumed = api.post("/api/topics/exports/keys/acme/resume", "").await;
    assert_eq!(resumed.status, 200, "{}", resumed.body);
    runner
        .until_settled("exports", "a1", Duration::from_secs(20))
        .await;
    eventually(Duration::from_secs(5), "acme's queue empty", || async {
        let s = project.queue().await;
        let st = s
            .tenants()
            .stats(&s.keys("exports"), now_ms(), 5)
            .await
            .unwrap();
        if st.queued == 0 {
            Ok(())
        } else {
            Err(format!("{st:?}"))
        }
    })
    .await;
    runner.stop().await;
}

/// Work a tenant's job starts is that tenant's: a follow-up takes its
/// parent's key (parked in the outbox with it, version 6), unless the
/// handler names one (`enqueue-keyed`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_takes_its_parents_key() {
    let project = Project::new(
        "",
        "[defaults]\nmax_attempts = 1\n\n[[topic]]\nname = \"orders\"\nhandler = \"probe.wasm\"\n\
         fairness = { by = \"key\" }\nmay_enqueue = [\"mail\"]\n\n\
         [[topic]]\nname = \"mail\"\nhandler = \"probe.wasm\"\nfairness = { by = \"key\" }\n",
    );
    let queue = project.queue().await;
    // the follow-up waits in a paused topic, to be looked at
    queue
        .admin()
        .set_paused(&queue.keys("mail"), true)
        .await
        .unwrap();
    let mut runner = Running::start(project.config()).await;
    let payload = r#"{"follow_ups":[{"topic":"mail","payload":"{}","id":"m-1"},
        {"topic":"mail","payload":"{}","id":"m-2","key":"globex"}]}"#;
    put(&queue, "orders", &jobs_of("acme", 1, payload, now_ms())).await;
    runner
        .until_settled("orders", "acme-00000", Duration::from_secs(20))
        .await;
    for (id, key) in [("m-1", "acme"), ("m-2", "globex")] {
        let view = eventually(
            Duration::from_secs(10),
            "the follow-up enqueued",
            || async {
                match queue
                    .inspect(&queue.keys("mail"), id, now_ms())
                    .await
                    .unwrap()
                {
                    Some(v) => Ok(v),
                    None => Err("not yet".to_owned()),
                }
            },
        )
        .await;
        assert_eq!(view.key.as_deref(), Some(key), "{id}");
    }
    runner.stop().await;
}
