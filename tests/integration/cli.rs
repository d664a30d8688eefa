//! The `hourglass` binary: errors a person can act on, exit codes, enqueue.

use std::time::Duration;

use crate::util::{Project, RUNNER_LOG, RunnerProcess, hourglass, hourglass_bin};

#[test]
fn run_takes_its_number_of_threads_and_refuses_none() {
    let project = Project::new("", "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n");
    // one fewer and one more than the two cores here: neither is the default
    for threads in [1, 3] {
        let runner = RunnerProcess::launch_with(
            hourglass_bin(),
            &project,
            RUNNER_LOG,
            &["--threads", &threads.to_string()],
        );
        // the runtime's own count of its workers
        let running = runner.wait_for("hourglass running", Duration::from_secs(180));
        assert!(
            running
                .split_whitespace()
                .any(|field| field == format!("threads={threads}")),
            "--threads {threads}: {running}"
        );
        runner.kill();
    }
    for bad in ["0", "many", "5000"] {
        let out = hourglass(&project, &["run", "--threads", bad]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains("--threads"), "{bad}: {stderr}");
    }
}

#[test]
fn a_bad_queues_toml_fails_with_file_line_and_field() {
    let project = Project::new(
        "",
        "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\ntimeout = \"soon\"\n",
    );
    for command in [&["check"][..], &["run"][..]] {
        let out = hourglass(&project, command);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {stderr}");
        // util::Project writes 8 lines of [redis] and [runner] first: the topic starts on line 9
        assert!(
            stderr.contains("queues.toml:12:11:"),
            "{command:?}: {stderr}"
        );
        assert!(stderr.contains("soon"), "{command:?}: {stderr}");
    }
}

#[test]
fn check_accepts_good_handlers_and_rejects_a_broken_one() {
    let project = Project::new("", "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n");
    let out = hourglass(&project, &["check"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok, 1 topic\n"));
    std::fs::write(
        project.dir.path().join("handlers/echo.wasm"),
        b"\0asm garbage",
    )
    .unwrap();
    let out = hourglass(&project, &["check"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("echo.wasm") && stderr.contains("not a valid WebAssembly component"),
        "{stderr}"
    );
}

#[test]
fn check_says_which_topics_give_up_isolation() {
    let project = Project::new(
        "",
        "[[topic]]\nname = \"shared\"\nhandler = \"echo.wasm\"\nreuse = { jobs = 500, idle = \"30s\" }\n\n\
         [[topic]]\nname = \"isolated\"\nhandler = \"echo.wasm\"\n",
    );
    let out = hourglass(&project, &["check"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let warnings: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("NOT isolated"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stdout}");
    assert!(
        warnings[0].contains("up to 500 jobs each, idle 30s"),
        "{stdout}"
    );
    // the warning follows the topic that reuses, before the next topic
    let line = |start: &str| {
        stdout
            .lines()
            .position(|l| l.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no line starts with {start:?}: {stdout}"))
    };
    let (shared, isolated) = (line("shared "), line("isolated "));
    let warning = stdout
        .lines()
        .position(|l| l.contains("NOT isolated"))
        .unwrap();
    assert!(shared < warning && warning < isolated, "{stdout}");
}

#[test]
fn enqueue_reports_new_and_duplicate_and_rejects_bad_input() {
    let project = Project::new("", "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n");
    let out = hourglass(
        &project,
        &["enqueue", "echo", "hi", "--id", "a-1", "--delay", "10m"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("enqueued echo/a-1"));
    let out = hourglass(&project, &["enqueue", "echo", "hi", "--id", "a-1"]);
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("duplicate: echo/a-1"));
    for bad in [
        &["enqueue", "nope", "hi"][..],
        &["enqueue", "echo", "hi", "--delay", "10 fortnights"][..],
        &["enqueue", "echo", "hi", "--at", "tomorrow"][..],
        &["enqueue", "echo", "@/does/not/exist"][..],
    ] {
        let out = hourglass(&project, bad);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = hourglass(&project, &["stats"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let row = stdout.lines().find(|l| l.starts_with("echo")).unwrap();
    // scheduled, ready, running, dead, suspended, expired; no runner: no rates, no lateness
    assert_eq!(
        row.split_whitespace().collect::<Vec<_>>(),
        ["echo", "1", "0", "0", "0", "0", "0", "-", "-", "-"],
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_state_attempts_last_error_and_the_handler_version() {
    let project = Project::new(
        "",
        "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n\n\
         [[topic]]\nname = \"panic\"\nhandler = \"panic.wasm\"\nmax_attempts = 1\n",
    );
    let out = hourglass(
        &project,
        &["enqueue", "echo", "later", "--id", "j-1", "--delay", "10m"],
    );
    assert!(out.status.success());
    let out = hourglass(&project, &["inspect", "echo", "j-1"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("scheduled, due") && text.contains("(in 9m"),
        "{text}"
    );
    assert!(
        text.contains("0 started") && text.contains("5 bytes: later"),
        "{text}"
    );
    // a JSON payload reads as written, quotes unescaped; a control
    // character is escaped
    let out = hourglass(
        &project,
        &[
            "enqueue",
            "echo",
            "{\"order\":1042,\"note\":\"a\tb\"}",
            "--id",
            "j-2",
            "--delay",
            "10m",
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let out = hourglass(&project, &["inspect", "echo", "j-2"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(r#"bytes: {"order":1042,"note":"a\tb"}"#),
        "{text}"
    );
    // dead retry and purge show TOPIC first, as they take it
    let out = hourglass(&project, &["dead", "retry", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("hourglass dead retry [OPTIONS] <TOPIC> <IDS>...")
            && help.contains("hourglass dead retry [OPTIONS] <TOPIC> --all"),
        "{help}"
    );
    let out = hourglass(&project, &["dead", "purge", "--help"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("hourglass dead purge <TOPIC> --all"),
        "{out:?}"
    );

    let out = hourglass(&project, &["inspect", "echo", "nope"]);
    assert_eq!(out.status.code(), Some(3), "no such job: its own status");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no job \"nope\""));
    let too_long = "~".repeat(520);
    let out = hourglass(&project, &["inspect", "echo", &too_long]);
    assert_eq!(out.status.code(), Some(2), "a malformed id is bad input");
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 to 512 bytes"));

    // a job that dies: the dead letter names the reason and the handler version
    let mut runner = crate::util::Running::start(project.config()).await;
    let queue = project.queue().await;
    let id = crate::util::enqueue(&queue, "panic", "x", 0, 0).await;
    runner
        .until_settled("panic", &id, std::time::Duration::from_secs(20))
        .await;
    runner.stop().await;
    let out = hourglass(&project, &["inspect", "panic", &id, "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["state"], "dead", "{json}");
    assert_eq!(json["attempts"], 1);
    let reason = json["dead"]["reason"].as_str().unwrap();
    assert!(reason.contains("handler panicked"), "{reason}");
    assert_eq!(
        json["dead"]["handler"].as_str(),
        Some(crate::util::hash_of(test_support::components::PANIC).as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_names_each_attempts_handler_and_the_files_no_topic_uses() {
    let project = Project::new("", "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n");
    let runner = crate::util::RunnerProcess::start(&project);
    let queue = project.queue().await;
    crate::util::enqueue(&queue, "echo", "hi", 0, 0).await;
    runner.wait_for("attempt 1/", std::time::Duration::from_secs(30));
    let text = runner.kill();
    let hash = crate::util::hash_of(test_support::components::ECHO);
    let line = text.lines().find(|l| l.contains("attempt 1/")).unwrap();
    assert!(line.contains(&format!("handler=\"{hash}\"")), "{line}");
    // the other components in handlers/ serve no topic: said once each
    for (name, _) in test_support::components::ALL
        .iter()
        .filter(|(n, _)| *n != "echo")
    {
        let said = text
            .lines()
            .filter(|l| {
                l.contains("uses this file: ignored") && l.contains(&format!("{name}.wasm"))
            })
            .count();
        assert_eq!(said, 1, "{name}.wasm:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_needs_only_the_redis_table() {
    let project = Project::new("", "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n");
    // the runner's file on a host without the handlers: producing still works
    std::fs::remove_dir_all(project.dir.path().join("handlers")).unwrap();
    let out = hourglass(&project, &["enqueue", "echo", "hi", "--id", "p-1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = hourglass(&project, &["inspect", "echo", "p-1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // ... while a runner's check still wants them
    assert_eq!(hourglass(&project, &["check"]).status.code(), Some(2));

    // a producer's own file: [redis] alone, any topic name
    let url = &project.endpoint.urls()[0];
    std::fs::write(
        project.config_path(),
        format!("[redis]\nurl = \"{url}\"\nnamespace = \"test\"\n"),
    )
    .unwrap();
    let out = hourglass(&project, &["enqueue", "reports", "{}", "--id", "r-1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let queue = project.queue().await;
    let job = queue
        .inspect(&queue.keys("reports"), "r-1", hourglass::clock::now_ms())
        .await
        .unwrap();
    assert!(job.is_some(), "the job is in Redis");
    // a name that cannot be a topic is still refused
    let out = hourglass(&project, &["enqueue", "no spaces", "{}"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn schedules_list_their_next_fire_times_and_bad_ones_name_the_field() {
    let topic = "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n\n";
    let project = Project::new(
        "",
        &format!(
            "{topic}[[schedule]]\nname = \"nightly\"\ntopic = \"echo\"\ncron = \"0 3 * * *\"\ntimezone = \"Europe/Berlin\"\n"
        ),
    );
    let out = hourglass(&project, &["schedules", "--next", "2"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("nightly -> topic echo"), "{stdout}");
    assert_eq!(stdout.matches("03:00:00 CE").count(), 2, "{stdout}");
    for (bad, field) in [
        ("cron = \"0 3 * *\"", "field `cron`"),
        ("cron = \"0 25 * * *\"", "field `cron`"),
        (
            "cron = \"0 3 * * *\"\ntimezone = \"Mars/Olympus\"",
            "field `timezone`",
        ),
        ("every = \"soon\"", "field `every`"),
        ("every = \"1s\"\ncron = \"* * * * *\"", "exactly one of"),
    ] {
        project.write_config(
            "",
            &format!("{topic}[[schedule]]\nname = \"s\"\ntopic = \"echo\"\n{bad}\n"),
        );
        let out = hourglass(&project, &["check"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(
            stderr.contains(field) && stderr.contains("queues.toml:1"),
            "{bad}: {stderr}"
        );
    }
    project.write_config(
        "",
        &format!("{topic}[[schedule]]\nname = \"s\"\ntopic = \"nope\"\nevery = \"1m\"\n"),
    );
    let stderr = String::from_utf8_lossy(&hourglass(&project, &["check"]).stderr).into_owned();
    assert!(stderr.contains("field `topic`"), "{stderr}");
}

/// `hourglass check --config <project>` with `perfmap` set or not: its
/// output, and the perf map it left (removed), if any.
fn check_with_perfmap(
    project: &Project,
    perfmap: Option<&str>,
) -> (std::process::Output, Option<String>) {
    let mut cmd = std::process::Command::new(crate::util::hourglass_bin());
    cmd.args(["check", "--config"]).arg(project.config_path());
    cmd.env_remove(hourglass::wasm::PERFMAP_ENV);
    if let Some(value) = perfmap {
        cmd.env(hourglass::wasm::PERFMAP_ENV, value);
    }
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let map = std::path::PathBuf::from(format!("/tmp/perf-{}.map", child.id()));
    let out = child.wait_with_output().unwrap();
    let text = std::fs::read_to_string(&map).ok();
    let _ = std::fs::remove_file(&map);
    (out, text)
}

#[test]
fn hourglass_perfmap_names_the_handlers_functions_for_perf() {
    let project = Project::new("", "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n");
    let (out, map) = check_with_perfmap(&project, Some("1"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let map = map.expect("HOURGLASS_PERFMAP=1: no /tmp/perf-<pid>.map written");
    // perf's map format: start address, size, name; the handler's functions are named
    assert!(
        map.lines().any(|l| l
            .split(' ')
            .nth(2)
            .is_some_and(|name| name.starts_with("wasm["))),
        "no handler function in the perf map:\n{}",
        map.lines().take(20).collect::<Vec<_>>().join("\n")
    );
    for unset in [None, Some("0")] {
        let (out, map) = check_with_perfmap(&project, unset);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(map.is_none(), "{unset:?}: a perf map was written");
    }
}
