//! The connection's security against real servers: AUTH with a password and
//! with an ACL user (the password from the environment), TLS with a private
//! CA, mutual TLS. A misconfiguration fails at once, without the password.

use std::time::Duration;

use test_support::tls::write_certificates;

use crate::util::{Project, RedisServer, Running, hourglass, hourglass_within};

const TOPICS: &str = "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n";

/// Enqueue through the CLI and see the runner ack it: the whole path works.
async fn a_job_runs(project: &Project) {
    let mut runner = Running::start(project.config()).await;
    let out = hourglass(
        project,
        &["enqueue", "echo", "over a secured connection", "--id", "s1"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    runner
        .until_settled("echo", "s1", Duration::from_secs(20))
        .await;
    runner.stop().await;
}

/// `hourglass run` must refuse, saying why, without the secret, and exit:
/// given a deadline, so one retried forever fails here instead of hanging.
async fn run_refuses(project: &Project, why: &str, secret: &str) {
    // a deadline, not a speed claim: a refusal is immediate, a retry loop never ends
    let out = hourglass_within(project, &["run"], Duration::from_secs(20)).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.to_lowercase().contains(why),
        "expected {why:?} in: {stderr}"
    );
    assert!(!stderr.contains(secret), "the password leaked: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_with_a_password_and_with_an_acl_user_from_the_environment() {
    let redis = RedisServer::start_with(&[
        "--requirepass",
        "s3cret-pw",
        "--user",
        "alice",
        "on",
        // the password is the value of CARGO_PKG_NAME, which cargo sets for tests
        ">hourglass",
        "~*",
        "&*",
        "+@all",
    ]);
    let port = redis.port;
    let with_password =
        Project::with_redis(format!("redis://:s3cret-pw@127.0.0.1:{port}/0"), "", TOPICS);
    a_job_runs(&with_password).await;
    let acl_user = Project::with_redis_lines(
        &format!("redis://alice:${{CARGO_PKG_NAME}}@127.0.0.1:{port}/0"),
        "",
        "",
        TOPICS,
    );
    a_job_runs(&acl_user).await;

    let wrong = Project::with_redis(format!("redis://:wrong-pw@127.0.0.1:{port}/0"), "", TOPICS);
    run_refuses(&wrong, "authentication", "wrong-pw").await;
    let none = Project::with_redis(format!("redis://127.0.0.1:{port}/0"), "", TOPICS);
    run_refuses(&none, "noauth", "s3cret-pw").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_ca_and_mutual_tls_with_a_client_certificate() {
    let certs = tempfile::tempdir().unwrap();
    write_certificates(certs.path());
    let file = |name: &str| certs.path().join(name).display().to_string();

    let server = RedisServer::tls(certs.path(), false, &[]);
    let url = format!("rediss://127.0.0.1:{}/0", server.port);
    let trusted = Project::with_redis_lines(
        &url,
        &format!("tls_ca = \"{}\"\n", file("ca.crt")),
        "",
        TOPICS,
    );
    a_job_runs(&trusted).await;
    let untrusted = Project::with_redis_lines(&url, "", "", TOPICS);
    run_refuses(&untrusted, "certificate", "no-secret-in-this-url").await;

    let mutual = RedisServer::tls(certs.path(), true, &["--requirepass", "m-pw"]);
    let url = format!("rediss://:m-pw@localhost:{}/0", mutual.port);
    let with_cert = Project::with_redis_lines(
        &url,
        &format!(
            "tls_ca = \"{}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n",
            file("ca.crt"),
            file("client.crt"),
            file("client.key")
        ),
        "",
        TOPICS,
    );
    a_job_runs(&with_cert).await;
    let without_cert = Project::with_redis_lines(
        &url,
        &format!("tls_ca = \"{}\"\n", file("ca.crt")),
        "",
        TOPICS,
    );
    run_refuses(&without_cert, "certificate", "m-pw").await;
}

#[test]
fn tls_settings_without_rediss_or_with_half_a_client_certificate_are_config_errors() {
    let certs = tempfile::tempdir().unwrap();
    write_certificates(certs.path());
    let file = |name: &str| certs.path().join(name).display().to_string();
    let plain = Project::with_redis_lines(
        "redis://127.0.0.1:1/0",
        &format!("tls_ca = \"{}\"\n", file("ca.crt")),
        "",
        TOPICS,
    );
    let err = hourglass::Config::load(&plain.config_path())
        .unwrap_err()
        .to_string();
    assert!(err.contains("need rediss://"), "{err}");
    let half = Project::with_redis_lines(
        "rediss://127.0.0.1:1/0",
        &format!("tls_cert = \"{}\"\n", file("client.crt")),
        "",
        TOPICS,
    );
    let err = hourglass::Config::load(&half.config_path())
        .unwrap_err()
        .to_string();
    assert!(err.contains("needs both"), "{err}");
}
