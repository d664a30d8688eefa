//! The dashboard shows a canary beside the stable version and promotes it.

use crate::util::{Api, Project, Running, deploy, eventually, hash_of};
use test_support::browser::{Browser, click};
use test_support::components::{ECHO, PROBE};
use test_support::fantoccini::{Client, Locator};

use super::*;

/// The text of the first element `css` finds, once `wanted` holds for it.
async fn until_text(c: &Client, css: &str, wanted: impl Fn(&str) -> bool) -> String {
    eventually(WAIT, &format!("the text of {css}"), || async {
        let text = match c.find(Locator::Css(css)).await {
            Ok(e) => e.text().await.ok(),
            Err(_) => None,
        };
        match text {
            Some(text) if wanted(&text) => Ok(text),
            text => {
                let page = c.source().await.unwrap_or_default();
                Err(format!("text {text:?}; page:\n{page}"))
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_a_canary_beside_the_stable_version_and_promotes_it() {
    let topics = "[[topic]]\nname = \"pay\"\nhandler = \"pay.wasm\"\n\
        rollout = { canary = \"25%\", for = \"1h\", min_attempts = 1000 }\n\n\
        [http]\nlisten = \"127.0.0.1:0\"\n";
    let project = Project::new("concurrency = 2", topics);
    let pay = project.handler("pay.wasm");
    deploy(&pay, &std::fs::read(ECHO).unwrap());
    let (echo, probe) = (hash_of(ECHO), hash_of(PROBE));
    let running = Running::start(project.config()).await;
    let addr = running.http.unwrap().to_string();
    let api = Api(addr.clone());
    api.until("/api/topics/pay/rollout", |v| {
        v["rollout"]["stable"] == echo.as_str()
    })
    .await;
    deploy(&pay, &std::fs::read(PROBE).unwrap());
    api.until("/api/topics/pay/rollout", |v| {
        v["rollout"]["canary"]["version"] == probe.as_str()
    })
    .await;

    let browser = Browser::start().await;
    let c = &browser.client;
    c.goto(&format!("http://{addr}/")).await.unwrap();
    until_text(c, "tr[data-topic=pay] td.name", |t| t == "pay").await;
    click(c, "tr[data-topic=pay] a.versions").await;
    let versions = until_text(c, "#rollout tr.version", |t| t.contains(&probe)).await;
    assert!(
        versions.contains(&echo),
        "stable beside the canary: {versions}"
    );
    let share = until_text(c, "#rollout tr.share", |t| !t.is_empty()).await;
    assert!(share.contains("75%") && share.contains("25%"), "{share}");
    let policy = until_text(c, "#rollout-notes li.policy", |t| !t.is_empty()).await;
    assert!(policy.contains("canary 25% for 1 h"), "{policy}");
    until_text(c, &format!("#versions tr[data-version='{probe}']"), |t| {
        t.contains("canary")
    })
    .await;
    let png = c.screenshot().await.unwrap();
    let dir = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
        .join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("dashboard-versions.png"), &png).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");

    // promote asks first; then the canary is the stable version
    click(c, "#rollout-promote").await;
    c.accept_alert().await.unwrap();
    until_text(c, "#rollout-notes li.verdict", |t| {
        t.contains(&probe) && t.contains("promoted by api")
    })
    .await;
    until_text(c, &format!("#versions tr[data-version='{probe}']"), |t| {
        t.contains("stable")
    })
    .await;
    let status = api.get("/api/topics/pay/rollout").await.json();
    assert_eq!(status["rollout"]["stable"], probe.as_str(), "{status:#}");
    assert!(
        c.find(Locator::Css("#rollout-promote")).await.is_err(),
        "no canary: no promote button"
    );
    browser.close().await;
    running.stop().await;
}
