//! The API's OpenAPI description: generated from the handlers, committed as
//! `docs/openapi.json` (this test fails when they differ; run it with
//! `HOURGLASS_WRITE_OPENAPI=1` to write the file), served without a token at
//! `/api/openapi.json`, and valid by a third party's validator
//! (`openapi-spec-validator` from PyPI).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{Project, Running, TOKEN};

fn committed() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json")
}

#[test]
fn the_committed_description_is_the_generated_one() {
    let generated = hourglass::http::openapi_json();
    if std::env::var_os("HOURGLASS_WRITE_OPENAPI").is_some() {
        std::fs::write(committed(), &generated).unwrap();
    }
    let on_disk = std::fs::read_to_string(committed()).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/openapi.json differs from what the handlers describe: run \
         `HOURGLASS_WRITE_OPENAPI=1 cargo nextest run -E 'test(/openapi::/)'` and commit it"
    );
    // every route of the router is described, each method once
    let value: serde_json::Value = serde_json::from_str(&generated).unwrap();
    let paths = value["paths"].as_object().unwrap();
    let operations: usize = paths.values().map(|p| p.as_object().unwrap().len()).sum();
    assert_eq!(operations, 45, "{:?}", paths.keys().collect::<Vec<_>>());
    assert_eq!(value["openapi"], "3.1.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_without_a_token_and_valid() {
    let project = Project::new(
        "",
        &format!(
            "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n\n\
             [http]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n"
        ),
    );
    let runner = Running::start(project.config()).await;
    let addr = runner.http.expect("[http] is served").to_string();
    let answer =
        test_support::http_client::call(&addr, "GET", "/api/openapi.json", None, None).await;
    runner.stop().await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.header("content-type"), Some("application/json"));
    assert_eq!(answer.body, hourglass::http::openapi_json());

    let venv = crate::producers::venv();
    let out = Command::new(venv.join("bin/openapi-spec-validator"))
        .arg(committed())
        .output()
        .expect("openapi-spec-validator runs");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// schemathesis (from PyPI) reads the description and sends what it
/// allows, and much it does not, to a live runner: no answer may be a
/// server error (5xx but the documented 503) or break the description.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_and_no_answer_outside_the_description() {
    let project = Project::new(
        "",
        &format!(
            "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\nresults = {{}}\n\n\
             [http]\nlisten = \"127.0.0.1:0\"\ntoken = \"{TOKEN}\"\n"
        ),
    );
    let runner = Running::start(project.config()).await;
    let base = format!("http://{}/api", runner.http.expect("[http] is served"));
    let venv = crate::producers::venv();
    let report = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(venv.join("bin/schemathesis"))
        .arg("run")
        .arg(committed())
        .args(["--url", &base, "-H"])
        .arg(format!("Authorization: Bearer {TOKEN}"))
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,\
             response_schema_conformance,response_headers_conformance",
            "--max-examples",
            "30",
            "--seed",
            "44",
            "--generation-deterministic",
            "--report-dir",
        ])
        .arg(report.path())
        .current_dir(report.path())
        .output()
        .await
        .expect("schemathesis runs");
    runner.stop().await;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "schemathesis found:\n{text}");
    println!("{text}");
}
