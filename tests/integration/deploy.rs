//! The deployment files: `deploy/queues.toml` (what the compose file runs)
//! passes `check` with the example handlers, the systemd unit passes
//! `systemd-analyze verify`, the Dockerfile's health check answers against a
//! real runner, and the Dockerfile, compose file and queues.toml agree. The
//! Dockerfile's runtime stage is built and run with podman: no registry is
//! reachable here to pull its Debian base, so the base is assembled from this
//! machine and the stage's other instructions are the Dockerfile's own.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::util::{Project, RunnerProcess, TOKEN, hourglass_bin};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The example handlers the Dockerfile's demo stage builds (`-p NAME`).
fn dockerfile_handlers() -> Vec<String> {
    let dockerfile = read("Dockerfile");
    let mut names: Vec<String> = dockerfile
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        // cargo's `-p CRATE` (not `mkdir -p /a/path`)
        .filter(|w| {
            w[0] == "-p"
                && w[1] != "hourglass"
                && w[1].chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .map(|w| w[1].to_owned())
        .collect();
    names.dedup();
    names
}

#[test]
fn the_compose_queues_toml_passes_check_with_the_handlers_the_image_holds() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(repo("deploy/queues.toml"), dir.path().join("queues.toml")).unwrap();
    let handlers = dir.path().join("handlers");
    std::fs::create_dir(&handlers).unwrap();
    let built = dockerfile_handlers();
    assert!(built.contains(&"echo".to_owned()), "{built:?}");
    for name in &built {
        let (_, path) = test_support::components::ALL
            .iter()
            .find(|(n, _)| *n == name.as_str())
            .unwrap_or_else(|| panic!("the Dockerfile builds {name}, not an example handler"));
        std::fs::copy(path, handlers.join(format!("{name}.wasm"))).unwrap();
    }
    let config = dir.path().join("queues.toml");
    let check = |token: Option<&str>| {
        let mut cmd = Command::new(hourglass_bin());
        cmd.args(["check", "--config"])
            .arg(&config)
            .env_remove("HOURGLASS_TOKEN");
        if let Some(t) = token {
            cmd.env("HOURGLASS_TOKEN", t);
        }
        cmd.output().unwrap()
    };
    let ok = check(Some(TOKEN));
    assert!(
        ok.status.success(),
        "deploy/queues.toml fails check with the image's handlers: {}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let missing = check(None);
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        !missing.status.success() && stderr.contains("${HOURGLASS_TOKEN} is not set"),
        "{stderr}"
    );

    // the compose file runs that file, on the port the image exposes and checks
    let compose = read("deploy/compose.yaml");
    let dockerfile = read("Dockerfile");
    assert!(compose.contains("target: demo") && dockerfile.contains("AS demo"));
    assert!(
        dockerfile.contains("COPY --chown=hourglass deploy/queues.toml /srv/hourglass/queues.toml")
    );
    assert!(read("deploy/queues.toml").contains("listen = \"0.0.0.0:9090\""));
    assert!(compose.contains("\"9090:9090\"") && dockerfile.contains("EXPOSE 9090"));
    assert!(compose.contains("noeviction") && compose.contains("--appendonly"));
}

/// Every base image named in full (`registry/namespace/name:tag`): buildah
/// and podman refuse a short name such as `debian:bookworm-slim` before
/// they reach any network unless the machine configures a search registry.
#[test]
fn every_base_image_of_the_dockerfile_is_named_in_full() {
    let dockerfile = read("Dockerfile");
    let mut stages: Vec<&str> = Vec::new();
    for line in dockerfile.lines().filter(|l| l.starts_with("FROM ")) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let image = words[1];
        if !stages.contains(&image) {
            let registry = image.split('/').next().unwrap_or("");
            assert!(
                image.matches('/').count() >= 2 && registry.contains('.'),
                "{line:?}: name the image in full, e.g. docker.io/library/{image}"
            );
        }
        if let [_, _, as_, name] = words[..]
            && as_.eq_ignore_ascii_case("as")
        {
            stages.push(name);
        }
    }
    assert!(stages.len() >= 2, "the Dockerfile's stages: {stages:?}");
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    let unit = read("deploy/hourglass.service");
    assert!(unit.contains("ExecStart=/usr/local/bin/hourglass run"));
    // verify checks that ExecStart's binary exists: point it at the one built here
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hourglass.service");
    std::fs::write(
        &path,
        unit.replace(
            "/usr/local/bin/hourglass",
            hourglass_bin().to_str().unwrap(),
        ),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run systemd-analyze ({e}); install it: apt-get install systemd")
        });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dockerfile_health_check_answers_against_a_running_runner() {
    let dockerfile = read("Dockerfile");
    let line = dockerfile
        .lines()
        .find(|l| l.contains("CMD [\"bash\", \"-c\""))
        .expect("a HEALTHCHECK command");
    // the exec form's third string, JSON-unescaped
    let start = line.find("\"-c\", ").unwrap() + "\"-c\", ".len();
    let script: String = serde_json::from_str(line[start..].trim_end_matches(']')).unwrap();
    let port = test_support::free_port();
    let project = Project::new("", "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n");
    let mut text = std::fs::read_to_string(project.config_path()).unwrap();
    text.push_str(&format!("\n[http]\nlisten = \"127.0.0.1:{port}\"\n"));
    crate::util::deploy(&project.config_path(), text.as_bytes());
    let probe = |script: &str| {
        Command::new("bash")
            .args(["-c", &script.replace("9090", &port.to_string())])
            .status()
            .unwrap()
            .success()
    };
    assert!(!probe(&script), "no runner yet: the health check fails");
    let runner = RunnerProcess::start(&project);
    crate::util::eventually(Duration::from_secs(30), "the health check passes", || {
        let ok = probe(&script);
        async move {
            if ok {
                Ok(())
            } else {
                Err("failing".to_owned())
            }
        }
    })
    .await;
    runner.kill();
}

mod image;
