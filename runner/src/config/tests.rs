use std::path::Path;

use super::*;

/// `[redis]`: Sentinel and durability.
mod redis;

pub(super) fn with_handler(toml: &str) -> (tempfile::TempDir, Result<Config, ConfigError>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("handlers")).unwrap();
    std::fs::write(dir.path().join("handlers/echo.wasm"), b"").unwrap();
    let path = dir.path().join("queues.toml");
    let result = Config::parse(&path, toml);
    (dir, result)
}

pub(super) fn error_at(result: Result<Config, ConfigError>) -> (usize, String) {
    match result {
        Err(ConfigError::Invalid { line, message, .. }) => (line, message),
        other => panic!("expected an invalid config, got {other:?}"),
    }
}

#[test]
fn defaults_apply_and_topics_override() {
    let (_d, c) = with_handler(
        "[defaults]\nmax_attempts = 7\ntimeout = \"2s\"\ncpu = \"500ms\"\n\n[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\n\n\
         [[topic]]\nname = \"b\"\nhandler = \"echo.wasm\"\ntimeout = \"250ms\"\npriority = 3\ncpu = \"100ms\"\n",
    );
    let c = c.unwrap();
    assert_eq!(c.topics[0].max_attempts, 7);
    assert_eq!(c.topics[0].cpu, Some(Duration::from_millis(500)));
    assert_eq!(c.topics[1].cpu, Some(Duration::from_millis(100)));
    assert_eq!(c.topics[0].timeout, Duration::from_secs(2));
    assert_eq!(c.topics[1].timeout, Duration::from_millis(250));
    assert_eq!(c.topics[1].priority, 3);
    assert_eq!(c.redis.namespace, "hourglass");
}

#[test]
fn reuse_is_off_unless_asked_and_takes_defaults() {
    let (_d, c) = with_handler(
        "[defaults]\nreuse = { jobs = 50 }\n\n[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\n\n\
         [[topic]]\nname = \"b\"\nhandler = \"echo.wasm\"\nreuse = { idle = \"5s\" }\n",
    );
    let c = c.unwrap();
    let reuse = |jobs, idle| {
        Some(Reuse {
            jobs,
            idle: Duration::from_secs(idle),
        })
    };
    assert_eq!(c.topics[0].reuse, reuse(50, 60));
    // a topic's own table replaces the default's, field defaults filling the rest
    assert_eq!(c.topics[1].reuse, reuse(1000, 5));
    let (_d, c) = with_handler("[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\n");
    assert_eq!(c.unwrap().topics[0].reuse, None);
}

#[test]
fn the_journal_records_steps_unless_asked_and_takes_defaults() {
    let (_d, c) = with_handler(
        "[defaults]\njournal = \"effects\"\njournal_max = \"1MiB\"\n\n[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\n\n\
         [[topic]]\nname = \"b\"\nhandler = \"echo.wasm\"\njournal = \"steps\"\non_divergence = \"live\"\n",
    );
    let c = c.unwrap();
    let (a, b) = (&c.topics[0].journal, &c.topics[1].journal);
    assert!(a.effects && !b.effects);
    assert_eq!((a.max, b.max), (1 << 20, 1 << 20));
    assert_eq!(
        (a.on_divergence, b.on_divergence),
        (OnDivergence::Fail, OnDivergence::Live)
    );
    let (_d, c) = with_handler("[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\n");
    assert_eq!(c.unwrap().topics[0].journal, JournalPolicy::default());
}

#[test]
fn an_effects_journal_with_reuse_is_refused_at_its_line() {
    let (_d, r) = with_handler(
        "[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\nreuse = { jobs = 5 }\njournal = \"effects\"\n",
    );
    let (line, message) = error_at(r);
    assert_eq!(line, 5, "{message}");
    assert!(message.contains("fresh instance per attempt"), "{message}");
}

#[test]
fn unknown_key_names_its_line() {
    let (_d, r) = with_handler("[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\npriorty = 3\n");
    let (line, message) = error_at(r);
    assert_eq!(line, 4);
    assert!(message.contains("priorty"), "{message}");
}

#[test]
fn light_cpu_is_50_us_unless_set_and_zero_puts_every_attempt_on_the_pool() {
    let topic = "[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\n";
    let (_d, c) = with_handler(topic);
    assert_eq!(c.unwrap().runner.light_cpu, Duration::from_micros(50));
    let (_d, c) = with_handler(&format!("[runner]\nlight_cpu = \"0s\"\n{topic}"));
    assert_eq!(c.unwrap().runner.light_cpu, Duration::ZERO);
    let (_d, r) = with_handler(&format!("[runner]\nlight_cpu = \"quick\"\n{topic}"));
    let (line, message) = error_at(r);
    assert_eq!(line, 2);
    assert!(message.starts_with("field `light_cpu`: "), "{message}");
    assert!(message.contains("quick"), "{message}");
}

#[test]
fn bad_duration_names_its_line_and_value() {
    let (_d, r) =
        with_handler("[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\ntimeout = \"5 parsecs\"\n");
    let (line, message) = error_at(r);
    assert_eq!(line, 4);
    assert!(message.contains("5 parsecs"), "{message}");
    assert!(message.starts_with("field `timeout`: "), "{message}");
    let (_d, r) = with_handler(
        "[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\nbackoff = { base = \"soon\" }\n",
    );
    let (line, message) = error_at(r);
    assert_eq!(line, 4);
    assert!(message.starts_with("field `backoff.base`: "), "{message}");
}

#[test]
fn missing_handler_file_names_the_field() {
    let (_d, r) = with_handler("[[topic]]\nname = \"a\"\nhandler = \"nope.wasm\"\n");
    let (line, message) = error_at(r);
    assert_eq!(line, 3);
    assert!(
        message.contains("handler") && message.contains("nope.wasm"),
        "{message}"
    );
}

#[test]
fn duplicate_topics_and_unknown_follow_up_targets_are_rejected() {
    let (_d, r) = with_handler(
        "[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\n[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\n",
    );
    assert_eq!(error_at(r).0, 5);
    let (_d, r) = with_handler(
        "[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\nmay_enqueue = [\"ghost\"]\n",
    );
    assert!(error_at(r).1.contains("ghost"));
}

#[test]
fn topic_names_cannot_break_hash_tags() {
    let (_d, r) = with_handler("[[topic]]\nname = \"a}b\"\nhandler = \"echo.wasm\"\n");
    assert_eq!(error_at(r).0, 2);
}

#[test]
fn error_display_starts_with_file_line_column() {
    let err = Config::parse(Path::new("/x/queues.toml"), "[runner]\nconcurency = 3\n").unwrap_err();
    assert!(err.to_string().starts_with("/x/queues.toml:2:1: "), "{err}");
}

#[test]
fn settings_that_need_a_restart_are_named() {
    let (_d, old) = with_handler("[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\n");
    let (_e, new) = with_handler(
        "[redis]\nnamespace = \"other\"\n[runner]\nconcurrency = 7\nshutdown_grace = \"1s\"\n\n\
         [[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\npriority = 4\n",
    );
    let (old, mut new) = (old.unwrap(), new.unwrap());
    // the handlers folder differs only because each test has its own temp dir
    new.runner.handlers_dir = old.runner.handlers_dir.clone();
    new.runner.compile_cache = old.runner.compile_cache.clone();
    new.runner.versions_dir = old.runner.versions_dir.clone();
    assert_eq!(
        old.restart_needed(&new),
        ["[redis]", "[runner] concurrency"],
        "grace and priority apply live"
    );
}

mod fuzz {
    use proptest::prelude::*;

    use super::*;

    const VALID: &str = "[redis]\nurl = \"redis://127.0.0.1:6379/0\"\n\n[runner]\nconcurrency = 8\n\n\
        [defaults]\ntimeout = \"5s\"\nbackoff = { base = \"1s\", factor = 2.0 }\n\n\
        [[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\npriority = 3\nmemory = \"16MiB\"\n";

    /// Any error names a real place in the text.
    fn check(text: &str) {
        let (_d, result) = with_handler(text);
        if let Err(ConfigError::Invalid { line, column, .. }) = result {
            let lines = text.split('\n').count();
            assert!(line >= 1 && line <= lines.max(1), "line {line} of {lines}");
            assert!(column >= 1);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn arbitrary_text_is_an_error_with_a_place_never_a_panic(text in ".{0,400}") {
            check(&text);
        }

        #[test]
        fn a_valid_file_with_a_line_damaged_still_answers_clearly(
            line in 0usize..18,
            junk in "[ -~]{0,40}",
        ) {
            let mut lines: Vec<&str> = VALID.lines().collect();
            let at = line.min(lines.len() - 1);
            lines[at] = &junk;
            check(&lines.join("\n"));
        }

        #[test]
        fn durations_and_sizes_never_panic(text in ".{0,40}") {
            let _ = parse_duration(&text);
            let _ = parse_size(&text);
        }
    }
}

#[test]
fn nonsense_numbers_are_errors_at_their_line_not_silent_clamps() {
    for (field, value, expect) in [
        ("concurrency", "0", "at least 1"),
        ("max_attempts", "0", "at least 1"),
        ("timeout", "\"0s\"", "longer than zero"),
        ("cpu", "\"0s\"", "longer than zero"),
        ("cpu", "\"soon\"", "invalid duration"),
        ("backoff", "{ factor = 0.5 }", "growth factor"),
        ("backoff", "{ jitter = 5.0 }", "between 0.0 and 1.0"),
        ("memory", "\"64KiB\"", "between 1MiB"),
        ("memory", "\"8GiB\"", "4GiB"),
        ("reuse", "{ jobs = 0 }", "at least 1"),
        ("reuse", "{ idle = \"0s\" }", "longer than zero"),
        ("reuse", "{ job = 5 }", "unknown field"),
        ("journal", "\"everything\"", "expected `steps` or `effects`"),
        ("journal_max", "\"1KiB\"", "between 64KiB and 64MiB"),
        ("on_divergence", "\"ignore\"", "expected `fail` or `live`"),
    ] {
        let text = format!("[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\n{field} = {value}\n");
        let (line, message) = error_at(with_handler(&text).1);
        assert_eq!(line, 4, "{field} = {value}: {message}");
        assert!(message.contains(expect), "{field} = {value}: {message}");
    }
}

#[test]
fn http_grants_and_limits_resolve_with_defaults_under_the_topic() {
    let (_d, c) = with_handler(
        "[defaults]\nhttp = { connect_timeout = \"2s\", max_concurrent = 2 }\n\n[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\n\
         grants = { http = [\"https://api.example.com\", \"http://127.0.0.1:8080\"] }\nhttp = { max_concurrent = 3 }\n\n\
         [[topic]]\nname = \"b\"\nhandler = \"echo.wasm\"\n",
    );
    let c = c.unwrap();
    let a = &c.topics[0];
    assert_eq!(
        a.grants
            .http
            .iter()
            .map(|g| g.to_string())
            .collect::<Vec<_>>(),
        ["https://api.example.com:443", "http://127.0.0.1:8080"]
    );
    assert_eq!(a.http.connect_timeout, Duration::from_secs(2));
    assert_eq!(a.http.max_concurrent, 3);
    assert_eq!(
        a.http.first_byte_timeout,
        HttpLimits::default().first_byte_timeout
    );
    assert!(
        c.topics[1].grants.http.is_empty(),
        "nothing granted by default"
    );
    assert_eq!(c.topics[1].http.max_concurrent, 2);
}

#[test]
fn a_malformed_http_grant_names_its_line_and_field() {
    let (_d, r) = with_handler(
        "[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\n\n[topic.grants]\nhttp = [\n  \"https://ok.example.com\",\n  \"https://api.example.com/v1\",\n]\n",
    );
    let (line, message) = error_at(r);
    assert_eq!(line, 8);
    assert!(
        message.contains("field `grants.http`") && message.contains("not a path"),
        "{message}"
    );
}

#[test]
fn http_limits_out_of_range_and_bad_ca_files_are_errors() {
    let (_d, r) = with_handler(
        "[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\nhttp = { max_response = \"2GiB\" }\n",
    );
    let (line, message) = error_at(r);
    assert_eq!(line, 4);
    assert!(message.contains("http.max_response"), "{message}");
    let (_d, r) = with_handler(
        "[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\nhttp = { tls_ca = \"handlers/echo.wasm\" }\n",
    );
    let (line, message) = error_at(r);
    assert_eq!(line, 4);
    assert!(
        message.contains("http.tls_ca") && message.contains("no PEM certificate"),
        "{message}"
    );
    let (_d, r) = with_handler(
        "[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\nhttp = { max_concurrent = 0 }\n",
    );
    assert_eq!(error_at(r).0, 4);
}

#[test]
fn a_rollout_policy_is_read_with_its_defaults_and_inherited_from_defaults() {
    let (_d, c) = with_handler(
        "[defaults]\nrollout = { canary = \"10%\" }\n\n[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\n\n\
         [[topic]]\nname = \"b\"\nhandler = \"echo.wasm\"\n\
         rollout = { canary = \"2.5%\", for = \"30s\", min_attempts = 7, max_failure_rate = 0.5, margin = 0.1 }\n",
    );
    let c = c.unwrap();
    let a = c.topic("a").unwrap().rollout.unwrap();
    assert_eq!(
        (
            a.canary,
            a.window,
            a.min_attempts,
            a.max_failure_rate,
            a.margin
        ),
        (0.1, std::time::Duration::from_secs(300), 50, 0.2, 0.05)
    );
    let b = c.topic("b").unwrap().rollout.unwrap();
    assert_eq!(
        (
            b.canary,
            b.window,
            b.min_attempts,
            b.max_failure_rate,
            b.margin
        ),
        (0.025, std::time::Duration::from_secs(30), 7, 0.5, 0.1)
    );
    assert_eq!(c.runner.keep_versions, 5);
}

#[test]
fn a_bad_rollout_policy_names_its_field() {
    for (policy, field) in [
        ("{ canary = \"0%\" }", "canary"),
        ("{ canary = \"100%\" }", "canary"),
        ("{ canary = \"ten\" }", "canary"),
        ("{ canary = \"10%\", for = \"0s\" }", "for"),
        (
            "{ canary = \"10%\", max_failure_rate = 1.5 }",
            "max_failure_rate",
        ),
        ("{ canary = \"10%\", min_attempts = 0 }", "min_attempts"),
        ("{ canary = \"10%\", sample = 3 }", "sample"),
    ] {
        let (_d, r) = with_handler(&format!(
            "[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\nrollout = {policy}\n"
        ));
        let err = r.unwrap_err().to_string();
        assert!(err.contains(field), "{policy}: {err}");
        assert!(err.contains(":4:"), "names the line: {err}");
    }
}

#[test]
fn fairness_and_key_limits_parse_and_bad_ones_are_named() {
    let topic =
        |extra: &str| format!("[[topic]]\nname = \"a\"\nhandler = \"echo.wasm\"\n{extra}\n");
    let (_d, c) = with_handler(&topic(
        "fairness = { by = \"key\", share = \"cpu\" }\nkey_concurrency = 1\nkey_rate = \"10/s\"",
    ));
    let f = c.unwrap().topics[0].fairness.unwrap();
    assert_eq!(f.share, hourglass_client::Share::Cpu);
    assert_eq!(f.key_concurrency, 1);
    assert_eq!(f.key_rate.map(|r| r.interval_ms), Some(100.0));
    // a key limit alone turns fairness on, by jobs
    let (_d, c) = with_handler(&topic("key_rate = \"3/10s\""));
    let f = c.unwrap().topics[0].fairness.unwrap();
    assert_eq!(
        (f.share, f.key_rate.map(|r| r.interval_ms)),
        (hourglass_client::Share::Jobs, Some(10_000.0 / 3.0))
    );
    let (_d, c) = with_handler(&topic(""));
    assert_eq!(c.unwrap().topics[0].fairness, None);
    for (extra, says) in [
        ("fairness = { by = \"tenant\" }", "unknown variant `tenant`"),
        (
            "fairness = { by = \"key\", share = \"bytes\" }",
            "unknown variant `bytes`",
        ),
        ("fairness = { share = \"cpu\" }", "missing field `by`"),
        ("key_concurrency = 0", "at least 1"),
        ("key_rate = \"10\"", "is not a rate like"),
        ("key_rate = \"0/s\"", "is not a rate like"),
        ("key_rate = \"5/0s\"", "is not a rate like"),
    ] {
        let (_d, c) = with_handler(&topic(extra));
        let (line, message) = error_at(c);
        assert_eq!(line, 4, "{extra}: {message}");
        assert!(message.contains(says), "{extra}: {message}");
    }
}
