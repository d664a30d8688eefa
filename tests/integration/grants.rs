//! Capabilities, deny by default: a handler reads no file and no environment
//! variable unless queues.toml grants it to its topic.

use std::time::Duration;

use hourglass::events::{Event, EventKind};

use crate::util::{Project, Running, enqueue};

const WAIT: Duration = Duration::from_secs(20);

/// A variable cargo sets for every test run, so the test needs no unsafe set_var.
const VAR: &str = "CARGO_PKG_NAME";

fn topics(data: &str) -> String {
    format!(
        r#"
[defaults]
max_attempts = 1

[[topic]]
name = "bare"
handler = "probe.wasm"

[[topic]]
name = "reader"
handler = "probe.wasm"
grants = {{ env = ["{VAR}"], dirs = [{{ host = "{data}", guest = "/data" }}] }}

[[topic]]
name = "writer"
handler = "probe.wasm"

[topic.grants]
dirs = [{{ host = "{data}", guest = "/data", write = true }}]
"#
    )
}

/// How the job ended: `Ok(())` if acked, else the dead letter's reason.
async fn outcome(runner: &mut Running, topic: &str, id: &str) -> Result<(), String> {
    let events = runner.until_settled(topic, id, WAIT).await;
    let last: &Event = events
        .iter()
        .rev()
        .find(|e| e.id == id && e.topic == topic)
        .unwrap();
    match &last.kind {
        EventKind::Acked => Ok(()),
        EventKind::Dead { reason } => Err(reason.clone()),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_and_environment_are_refused_without_a_grant_and_reachable_with_one() {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("in.txt"), "hello from the host").unwrap();
    let project = Project::new("concurrency = 4", &topics(data.path().to_str().unwrap()));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;
    let read = r#"{"read":"/data/in.txt"}"#;
    let env = format!(r#"{{"env":"{VAR}"}}"#);
    let write = r#"{"write":"/data/out.txt"}"#;

    // no grant: nothing there
    let id = enqueue(&queue, "bare", read, 0, 0).await;
    let why = outcome(&mut runner, "bare", &id).await.unwrap_err();
    assert!(
        why.contains("read /data/in.txt") && why.contains("No such file"),
        "{why}"
    );
    let id = enqueue(&queue, "bare", &env, 0, 0).await;
    let why = outcome(&mut runner, "bare", &id).await.unwrap_err();
    assert!(
        why.contains(&format!("env {VAR}")) && why.contains("not found"),
        "{why}"
    );
    assert!(
        std::env::var(VAR).is_ok(),
        "the runner's own environment has it"
    );

    // read-only grant: read and env work, writing is refused
    let id = enqueue(&queue, "reader", read, 0, 0).await;
    assert_eq!(outcome(&mut runner, "reader", &id).await, Ok(()));
    let id = enqueue(&queue, "reader", &env, 0, 0).await;
    assert_eq!(outcome(&mut runner, "reader", &id).await, Ok(()));
    let id = enqueue(&queue, "reader", write, 0, 0).await;
    let why = outcome(&mut runner, "reader", &id).await.unwrap_err();
    assert!(why.contains("write /data/out.txt"), "{why}");
    assert!(!data.path().join("out.txt").exists());

    // read-write grant: the file appears on the host; the env stays private
    let id = enqueue(&queue, "writer", write, 0, 0).await;
    assert_eq!(outcome(&mut runner, "writer", &id).await, Ok(()));
    assert_eq!(
        std::fs::read_to_string(data.path().join("out.txt")).unwrap(),
        id,
        "the guest wrote its job id"
    );
    let id = enqueue(&queue, "writer", &env, 0, 0).await;
    let why = outcome(&mut runner, "writer", &id).await.unwrap_err();
    assert!(
        why.contains(&format!("env {VAR}")) && why.contains("not found"),
        "the variable must be missing, not some other failure: {why}"
    );
    runner.stop().await;
}

#[test]
fn a_grant_of_a_missing_directory_or_unset_variable_is_a_config_error() {
    let project = Project::new(
        "",
        r#"
[[topic]]
name = "p"
handler = "probe.wasm"
grants = { dirs = [{ host = "no/such/dir", guest = "/data" }] }
"#,
    );
    let err = hourglass::Config::load(&project.config_path())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("grants.dirs") && err.contains("not a directory"),
        "{err}"
    );
    project.write_config(
        "",
        r#"
[[topic]]
name = "p"
handler = "probe.wasm"
grants = { env = ["HOURGLASS_SURELY_UNSET_VARIABLE"] }
"#,
    );
    let err = hourglass::Config::load(&project.config_path())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("grants.env") && err.contains("not set"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_network_without_a_grant_and_no_way_out_of_a_granted_directory() {
    let data = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "host secret").unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        data.path().join("link.txt"),
    )
    .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let project = Project::new("concurrency = 4", &topics(data.path().to_str().unwrap()));
    let mut runner = Running::start(project.config()).await;
    let queue = project.queue().await;

    // raw sockets: refused, and nothing reached the listener
    let id = enqueue(
        &queue,
        "reader",
        &format!(r#"{{"connect":"{addr}"}}"#),
        0,
        0,
    )
    .await;
    let why = outcome(&mut runner, "reader", &id).await.unwrap_err();
    assert!(why.contains(&format!("connect {addr}")), "{why}");
    assert!(listener.accept().is_err(), "a connection reached the host");

    // a granted directory does not lead out: not by .., not by a symlink
    let relative = outside
        .path()
        .strip_prefix("/")
        .unwrap()
        .display()
        .to_string();
    let depth = data.path().components().count();
    let up = "../".repeat(depth);
    for path in [
        format!("/data/{up}{relative}/secret.txt"),
        "/data/link.txt".to_owned(),
    ] {
        let id = enqueue(&queue, "reader", &format!(r#"{{"read":"{path}"}}"#), 0, 0).await;
        let why = outcome(&mut runner, "reader", &id).await.unwrap_err();
        assert!(why.contains(&format!("read {path}")), "{why}");
        assert!(!why.contains("host secret"), "{why}");
    }
    runner.stop().await;
}
