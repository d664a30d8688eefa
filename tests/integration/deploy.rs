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

/// podman as it runs in this sandbox: rootful, with runc (crun cannot set
/// up this machine's hybrid cgroups) and limits the sandbox lets it set.
fn podman(args: &[&str]) -> std::process::Output {
    Command::new("podman")
        .args(["--runtime", "runc"])
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run podman ({e}): the image test builds and runs the Dockerfile's \
                 runtime stage; install it: scripts/setup --test (podman runc slirp4netns)"
            )
        })
}

fn podman_ok(args: &[&str]) -> String {
    let out = podman(args);
    assert!(
        out.status.success(),
        "podman {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Copy the shared libraries `file` loads into `root`, at the same paths
/// (and `file` itself if `with_file`).
fn with_libraries(root: &Path, file: &Path, with_file: bool) {
    let mut files = if with_file {
        vec![file.to_path_buf()]
    } else {
        vec![]
    };
    let ldd = Command::new("ldd").arg(file).output().expect("ldd");
    for word in String::from_utf8_lossy(&ldd.stdout).split_whitespace() {
        if word.starts_with('/') {
            files.push(PathBuf::from(word));
        }
    }
    for f in files {
        let to = root.join(f.strip_prefix("/").unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&f, &to).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    }
}

/// The Dockerfile's runtime stage, its two instructions that need the
/// Debian base (apt-get and useradd, then the binary from the build stage)
/// replaced by what they make, assembled from this machine: no registry is
/// reachable here to pull `debian:bookworm-slim` or `rust`. Everything else
/// (user, workdir, volume, environment, port, health check, stop signal,
/// entry point and command) is the Dockerfile's own text.
fn runtime_stage(dockerfile: &str) -> String {
    let start = dockerfile
        .find("FROM docker.io/library/debian:bookworm-slim AS runtime")
        .expect("a runtime stage FROM docker.io/library/debian:bookworm-slim");
    let stage = &dockerfile[start..];
    let stage = &stage[..stage.find("\nFROM ").unwrap_or(stage.len())];
    // instructions as written (with their continuation lines), comments dropped
    let mut instructions: Vec<String> = Vec::new();
    let mut open = false;
    for line in stage.lines() {
        let line = line.trim_end();
        if line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if open {
            let last = instructions.last_mut().unwrap();
            last.push('\n');
            last.push_str(line);
        } else {
            instructions.push(line.to_owned());
        }
        open = line.ends_with('\\');
    }
    let mut out = String::new();
    for instruction in instructions {
        if instruction.starts_with("FROM ") {
            out.push_str("FROM scratch\nCOPY rootfs/ /\n");
        } else if instruction.starts_with("RUN ") {
            for made in [
                "useradd --system --uid 10001 --home-dir /srv/hourglass --create-home hourglass",
                "install -d -o hourglass -g hourglass /srv/hourglass/.hourglass",
            ] {
                assert!(
                    instruction.contains(made),
                    "the runtime stage's RUN: {made}"
                );
            }
            out.push_str("COPY --chown=10001:10001 home/ /srv/hourglass/\n");
        } else if instruction.starts_with("COPY --from=build ") {
            assert!(
                instruction.ends_with(" /usr/local/bin/hourglass"),
                "{instruction}"
            );
            out.push_str("COPY hourglass /usr/local/bin/hourglass\n");
        } else {
            out.push_str(&instruction);
            out.push('\n');
        }
    }
    out
}

/// The image and container, removed on drop.
struct Podman {
    image: String,
    container: String,
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", "-v", &self.container]);
        let _ = podman(&["rmi", "-f", &self.image]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_image_runs_as_its_user_passes_its_health_check_and_stops_on_sigterm() {
    let stage = runtime_stage(&read("Dockerfile"));
    let context = tempfile::tempdir().unwrap();
    let ctx = context.path();
    // the base: what the health check runs (bash, head, grep) with their
    // libraries, the user and group useradd makes, and its home
    let rootfs = ctx.join("rootfs");
    for tool in ["/bin/bash", "/usr/bin/head", "/bin/grep"] {
        with_libraries(&rootfs, Path::new(tool), true);
    }
    with_libraries(&rootfs, hourglass_bin(), false);
    std::fs::create_dir_all(rootfs.join("etc")).unwrap();
    std::fs::write(
        rootfs.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/bash\nhourglass:x:10001:10001::/srv/hourglass:/usr/sbin/nologin\n",
    )
    .unwrap();
    std::fs::write(rootfs.join("etc/group"), "root:x:0:\nhourglass:x:10001:\n").unwrap();
    std::fs::create_dir_all(ctx.join("home/.hourglass")).unwrap();
    // the binary as a release build ships it: without debug information
    let strip = Command::new("objcopy")
        .arg("--strip-debug")
        .arg(hourglass_bin())
        .arg(ctx.join("hourglass"))
        .status()
        .expect("objcopy (binutils)");
    assert!(strip.success());
    std::fs::write(ctx.join("Containerfile"), &stage).unwrap();

    let tag = format!("localhost/hourglass-test:{}", std::process::id());
    let name = format!("hourglass-test-{}", std::process::id());
    let _cleanup = Podman {
        image: tag.clone(),
        container: name.clone(),
    };
    let building = std::time::Instant::now();
    podman_ok(&[
        "build",
        "--quiet",
        "--format",
        "docker",
        "-t",
        &tag,
        "-f",
        ctx.join("Containerfile").to_str().unwrap(),
        ctx.to_str().unwrap(),
    ]);
    let built = building.elapsed();
    assert_eq!(
        podman_ok(&["image", "inspect", "--format", "{{.Config.User}}", &tag]),
        "hourglass"
    );
    let size = podman_ok(&["image", "inspect", "--format", "{{.Size}}", &tag]);
    println!("image built in {built:.1?}, {size} bytes");

    // mounted as the Dockerfile's header says: queues.toml and handlers/;
    // the container reaches this machine's loopback (the test's Redis) as 10.0.2.2
    let redis = crate::util::RedisServer::start();
    let port = redis
        .url()
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_owned();
    let project = Project::with_redis(
        redis.url(),
        "",
        "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n",
    );
    let mounted = tempfile::tempdir().unwrap();
    std::fs::write(
        mounted.path().join("queues.toml"),
        format!(
            "[redis]\nurl = \"redis://10.0.2.2:{port}\"\nnamespace = \"test\"\n\n\
             [http]\nlisten = \"0.0.0.0:9090\"\ntoken = \"{TOKEN}\"\n\n\
             [[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n"
        ),
    )
    .unwrap();
    let queues = format!(
        "{}:/srv/hourglass/queues.toml:ro",
        mounted.path().join("queues.toml").display()
    );
    let handlers = format!(
        "{}:/srv/hourglass/handlers:ro",
        project.dir.path().join("handlers").display()
    );
    podman_ok(&[
        "run",
        "-d",
        "--name",
        &name,
        "--network",
        "slirp4netns:allow_host_loopback=true",
        "--ulimit",
        "nofile=4096:4096",
        "--ulimit",
        "nproc=4096:4096",
        "-v",
        &queues,
        "-v",
        &handlers,
        &tag,
    ]);
    let logs = || {
        let out = podman(&["logs", &name]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    crate::util::eventually(
        Duration::from_secs(180),
        "the image's health check passes",
        || {
            let healthy = podman(&["healthcheck", "run", &name]).status.success();
            let running = podman_ok(&["inspect", "--format", "{{.State.Running}}", &name]);
            let seen = logs();
            assert_eq!(running, "true", "the container exited: {seen}");
            async move { if healthy { Ok(()) } else { Err(seen) } }
        },
    )
    .await;

    // it runs jobs enqueued through its own API (from inside, with bash's
    // /dev/tcp and head, what its health check uses), as its user
    let queue = project.queue().await;
    let id = "via-api".to_owned();
    let body = format!(r#"{{"id":"{id}","payload":{{"from":"the API"}}}}"#);
    let request = format!(
        "exec 3<>/dev/tcp/127.0.0.1/9090 && printf 'POST /api/topics/echo/jobs HTTP/1.0\\r\\n\
         Authorization: Bearer {TOKEN}\\r\\nContent-Type: application/json\\r\\n\
         Content-Length: {}\\r\\n\\r\\n%s' '{body}' >&3 && head -c 4096 <&3",
        body.len()
    );
    let answer = podman_ok(&["exec", &name, "bash", "-c", &request]);
    assert!(
        answer.starts_with("HTTP/1.0 201") && answer.contains(r#""status":"new""#),
        "{answer}"
    );
    crate::util::eventually(
        Duration::from_secs(60),
        "the job ran in the container",
        || {
            let queue = queue.clone();
            let id = id.clone();
            async move {
                match queue
                    .inspect(&queue.keys("echo"), &id, hourglass::clock::now_ms())
                    .await
                {
                    Ok(None) => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        },
    )
    .await;
    assert_eq!(
        queue
            .stats(&queue.keys("echo"), hourglass::clock::now_ms())
            .await
            .unwrap()
            .dead,
        0
    );
    let pid = podman_ok(&["inspect", "--format", "{{.State.Pid}}", &name]);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(uid.split_whitespace().nth(1), Some("10001"), "{uid}");

    // its state (compile cache, kept versions) on the image's volume, the user's
    let mounts = podman_ok(&[
        "inspect",
        "--format",
        "{{range .Mounts}}{{.Source}}={{.Destination}} {{end}}",
        &name,
    ]);
    let volume = mounts
        .split_whitespace()
        .find_map(|m| m.strip_suffix("=/srv/hourglass/.hourglass"))
        .unwrap_or_else(|| panic!("no volume at /srv/hourglass/.hourglass: {mounts}"));
    for kept in ["cache", "versions"] {
        let meta = std::fs::metadata(Path::new(volume).join(kept))
            .unwrap_or_else(|e| panic!("{kept} on the volume: {e}"));
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 10001, "{kept}");
    }

    // podman stop sends the STOPSIGNAL: a graceful stop, exit status 0
    podman_ok(&["stop", "-t", "60", &name]);
    assert_eq!(
        podman_ok(&["inspect", "--format", "{{.State.ExitCode}}", &name]),
        "0",
        "{}",
        logs()
    );
    assert!(logs().contains("shutting down"), "{}", logs());
}
