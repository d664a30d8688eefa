//! The runtime image built with buildah and run from its files: as its user,
//! its health check, stopped by SIGTERM.

use crate::util::{Project, TOKEN, hourglass_bin};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::*;

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
