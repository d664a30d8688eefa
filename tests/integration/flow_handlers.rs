//! Flows a handler creates (`follow-up.enqueue-flow`): parked with its
//! ack and created once, in Rust, Python and JavaScript; an attempt that
//! does not ack creates none; a bad flow is refused to the handler.

use std::time::Duration;

use hourglass::redis::Queue;
use serde_json::{Value, json};

use crate::util::{Project, Running, end_of, enqueue, result_json, settled, starts};

const WAIT: Duration = Duration::from_secs(60);

/// The flow id a maker job acked with.
async fn made(queue: &Queue, topic: &str, id: &str) -> String {
    let end = end_of(queue, topic, id).await;
    result_json(&end)["flow"].as_str().unwrap().to_owned()
}

/// Two children with results, then a parent that echoes them.
fn album(topic: &str, id: Option<&str>) -> Value {
    let mut flow = json!({"jobs": [
        {"name": "c1", "topic": topic, "payload": {"result": 1}},
        {"name": "c2", "topic": topic, "payload": {"result": 2}},
        {"name": "p", "topic": topic, "payload": {"echo_deps": true}, "after": ["c1", "c2"]},
    ]});
    if let Some(id) = id {
        flow["id"] = id.into();
    }
    flow
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_creates_a_flow_with_its_ack_in_rust_python_and_javascript() {
    use test_support::components::{JS_SDK_PROBE, PY_PROBE};
    let work = |name: &str| {
        format!(
            "[[topic]]\nname = \"{name}\"\nhandler = \"probe.wasm\"\nresults = {{ keep = \"1h\" }}\n\n"
        )
    };
    let mut toml = String::from("[defaults]\nmax_attempts = 1\n\n");
    toml += &work("work");
    toml += &work("rs_work");
    for (name, wasm, target, attempts) in [
        ("rs", "probe.wasm", "rs_work", 2),
        ("py", "py.wasm", "work", 1),
        ("js", "js.wasm", "work", 1),
    ] {
        toml += &format!(
            "[[topic]]\nname = \"{name}\"\nhandler = \"{wasm}\"\nmay_enqueue = [\"{target}\"]\nmax_attempts = {attempts}\nresults = {{ keep = \"1h\" }}\n\n"
        );
    }
    let project = Project::new("concurrency = 4", &toml);
    crate::util::add_handler(&project, "py.wasm", PY_PROBE);
    crate::util::add_handler(&project, "js.wasm", JS_SDK_PROBE);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    // Rust: a generated id, and the first attempt retries after creating
    // its flow: only the acked attempt's flow exists
    let rs = json!({"flow": album("rs_work", None), "retry_first": 1});
    let rs = enqueue(&queue, "rs", &rs.to_string(), 0, 0).await;
    let py = json!({"flow": album("work", Some("from-py"))});
    let py = enqueue(&queue, "py", &py.to_string(), 0, 0).await;
    let js = json!({"flow": album("work", Some("from-js"))});
    let js = enqueue(&queue, "js", &js.to_string(), 0, 0).await;
    let final_ = |seen: &[hourglass::events::Event], topic: &str, p: &dyn Fn(&str) -> bool| {
        seen.iter()
            .any(|e| e.topic == topic && p(&e.id) && crate::util::is_final(&e.kind))
    };
    let mut events = runner
        .until(WAIT, |seen| {
            final_(seen, "rs_work", &|id| id.ends_with("/p"))
                && final_(seen, "work", &|id| id == "from-py/p")
                && final_(seen, "work", &|id| id == "from-js/p")
        })
        .await;
    events.extend(
        runner
            .after_drained(&queue, &["rs_work", "work"], WAIT)
            .await,
    );
    let rs_flow = made(&queue, "rs", &rs).await;
    for (lang, id) in [("py", py), ("js", js)] {
        assert_eq!(made(&queue, lang, &id).await, format!("from-{lang}"));
    }
    for (topic, flow) in [
        ("rs_work", rs_flow.as_str()),
        ("work", "from-py"),
        ("work", "from-js"),
    ] {
        let p = format!("{flow}/p");
        assert_eq!(starts(&events, topic, &p), 1, "{p}: {events:#?}");
        assert_eq!(settled(&events, topic, &p), Ok(()));
        let deps = result_json(&end_of(&queue, topic, &p).await)["deps"].clone();
        let results: Vec<&Value> = deps
            .as_array()
            .unwrap()
            .iter()
            .map(|d| &d["result"])
            .collect();
        assert_eq!(results, [&json!(1), &json!(2)], "{flow}");
    }
    // the retried attempt's flow was never created: three jobs ran in rs_work
    let rs_started = events
        .iter()
        .filter(|e| {
            e.topic == "rs_work" && matches!(e.kind, hourglass::events::EventKind::Started { .. })
        })
        .count();
    assert_eq!(rs_started, 3, "{events:#?}");
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_flow_is_refused_to_the_handler_and_nothing_is_created() {
    let toml = "[defaults]\nmax_attempts = 1\n\n\
        [[topic]]\nname = \"maker\"\nhandler = \"probe.wasm\"\nmay_enqueue = [\"work\"]\n\n\
        [[topic]]\nname = \"work\"\nhandler = \"probe.wasm\"\n\n\
        [[topic]]\nname = \"other\"\nhandler = \"probe.wasm\"\n";
    let project = Project::new("concurrency = 2", toml);
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let cycle = json!({"flow": {"id": "loop", "jobs": [
        {"name": "a", "topic": "work", "after": ["b"]},
        {"name": "b", "topic": "work", "after": ["a"]}]}});
    let elsewhere = json!({"flow": {"jobs": [{"name": "a", "topic": "other"}]}});
    let mut reasons = Vec::new();
    for plan in [cycle, elsewhere] {
        let id = enqueue(&queue, "maker", &plan.to_string(), 0, 0).await;
        let events = runner.until_settled("maker", &id, WAIT).await;
        reasons.push(settled(&events, "maker", &id).unwrap_err());
    }
    assert!(
        reasons[0].contains("flow loop: a cycle: a → b → a"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].contains("topic \"maker\" may not enqueue to \"other\""),
        "{reasons:?}"
    );
    assert!(queue.flows().show("loop").await.unwrap().is_none());
    runner.stop().await;
}
