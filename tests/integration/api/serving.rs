//! Serving the API: `hourglass serve` with only `[redis]` and `[http]`, tokens
//! never shown, an open server on loopback only, a new token applied live.

use crate::util::{Project, RedisServer, Running, TOKEN, eventually, hourglass_bin};
use std::time::Duration;
use test_support::http_client::call;

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hourglass_serve_needs_only_redis_and_http() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let port = test_support::free_port();
    let config = dir.path().join("queues.toml");
    std::fs::write(
        &config,
        format!(
            "[redis]\nurl = {:?}\nnamespace = \"test\"\n\n[http]\nlisten = \"127.0.0.1:{port}\"\n",
            redis.url()
        ),
    )
    .unwrap();
    let mut serve = std::process::Command::new(hourglass_bin())
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let addr = format!("127.0.0.1:{port}");
    eventually(
        Duration::from_secs(20),
        "hourglass serve listening",
        || async {
            tokio::net::TcpStream::connect(&addr)
                .await
                .map_err(|e| e.to_string())
        },
    )
    .await;
    // no token on loopback: open; any valid topic name (the file lists none)
    let made = call(
        &addr,
        "POST",
        "/api/topics/mail/jobs",
        None,
        Some(r#"{"id":"m1","payload":"hi"}"#),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let job = call(&addr, "GET", "/api/topics/mail/jobs/m1", None, None)
        .await
        .json();
    assert_eq!(job["state"], "ready");
    refused(
        &call(
            &addr,
            "POST",
            "/api/topics/no%20spaces/jobs",
            None,
            Some(r#"{"payload":"x"}"#),
        )
        .await,
        400,
        "topic",
    );
    let ready = call(&addr, "GET", "/readyz", None, None).await.json();
    assert_eq!(ready["ready"], true, "no handlers needed: {ready}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(serve.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(serve.wait().unwrap().success());
}

#[test]
fn a_token_never_shows_in_debug_output_and_an_open_server_stays_on_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("queues.toml");
    let parse = |http: &str| {
        hourglass::Config::parse_for(
            &path,
            &format!("[http]\n{http}\n"),
            hourglass::config::Check::Producer,
        )
    };
    let config = parse(&format!("listen = \"127.0.0.1:9090\"\ntoken = \"{TOKEN}\"")).unwrap();
    assert!(!format!("{config:?}").contains(TOKEN));
    let open = parse("listen = \"0.0.0.0:9090\"").unwrap_err().to_string();
    assert!(
        open.contains("field `listen`") && open.contains("token"),
        "{open}"
    );
    let short = parse("listen = \"127.0.0.1:9090\"\ntoken = \"short\"")
        .unwrap_err()
        .to_string();
    assert!(short.contains("field `token`"), "{short}");
    let bad = parse("listen = \"localhost\"").unwrap_err().to_string();
    assert!(
        bad.contains("field `listen`") && bad.contains(":2:"),
        "{bad}"
    );
    let unset = parse("listen = \"127.0.0.1:9090\"\ntoken = \"${HOURGLASS_TEST_UNSET_TOKEN}\"")
        .unwrap_err()
        .to_string();
    assert!(unset.contains("HOURGLASS_TEST_UNSET_TOKEN"), "{unset}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_token_applies_live_and_the_address_waits_for_a_restart() {
    let project = Project::new("concurrency = 2", TOPICS);
    let mut running = Running::start(project.config()).await;
    let addr = running.http.unwrap().to_string();
    let read = |token: &'static str| {
        let addr = addr.clone();
        async move {
            call(&addr, "GET", "/api/topics", Some(token), None)
                .await
                .status
        }
    };
    assert_eq!(read(TOKEN).await, 200);
    let next = "the-next-token-0123456789";
    let topics = TOPICS
        .replace(TOKEN, next)
        .replace("127.0.0.1:0", "127.0.0.1:1");
    project.write_config("concurrency = 2", &format!("{topics}public_read = true\n"));
    running
        .notice(Duration::from_secs(20), |n| {
            matches!(n, hourglass::Notice::ConfigApplied)
        })
        .await;
    assert_eq!(read(TOKEN).await, 401, "the old token is refused");
    assert_eq!(read(next).await, 200);
    // public_read: reads without a token, changes still need one
    assert_eq!(
        call(&addr, "GET", "/api/topics", None, None).await.status,
        200
    );
    let change = call(&addr, "POST", "/api/topics/echo/pause", None, Some("")).await;
    assert_eq!(change.status, 401);
    // the address is restart-only: still served where it was
    assert_eq!(call(&addr, "GET", "/healthz", None, None).await.status, 200);
    running.stop().await;
}
