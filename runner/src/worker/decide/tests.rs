//! Decide's rules, each with the time and the jitter draw pinned.

use std::time::Duration;

use super::*;
use crate::config::Backoff;

fn topic() -> TopicConfig {
    let dir = std::env::temp_dir();
    let text = "[[topic]]\nname = \"t\"\nhandler = \"x.wasm\"\nbackoff = { base = \"1s\", factor = 2.0, max = \"10s\", jitter = 0.5 }\n";
    let handlers = dir.join(format!("hourglass-decide-{}", std::process::id()));
    std::fs::create_dir_all(&handlers).unwrap();
    std::fs::write(handlers.join("x.wasm"), b"").unwrap();
    let text = format!(
        "[runner]\nhandlers_dir = {:?}\n\n{text}",
        handlers.display().to_string()
    );
    crate::Config::parse(&dir.join("queues.toml"), &text)
        .unwrap()
        .topics
        .remove(0)
}

fn retry_at(cfg: &TopicConfig, attempt: u32, unit: f64) -> u64 {
    match after_run(
        cfg,
        RanOn::stable("h"),
        attempt,
        5,
        &mut Finish::Crashed("trap".into()),
        1_000_000,
        unit,
        Vec::new(),
    ) {
        Decision::Retry {
            next_due_ms,
            failure,
        } => {
            assert_eq!(failure.at, 1_000_000);
            assert_eq!(failure.handler.as_deref(), Some("h"));
            next_due_ms - 1_000_000
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn backoff_grows_per_attempt_caps_and_jitters_by_the_draw() {
    let cfg = topic();
    assert_eq!(
        cfg.backoff,
        Backoff {
            base: Duration::from_secs(1),
            factor: 2.0,
            max: Duration::from_secs(10),
            jitter: 0.5
        }
    );
    // unit 0.5 is the middle of the jitter range: no change
    assert_eq!(retry_at(&cfg, 1, 0.5), 1000);
    assert_eq!(retry_at(&cfg, 2, 0.5), 2000);
    assert_eq!(retry_at(&cfg, 3, 0.5), 4000);
    assert_eq!(retry_at(&cfg, 4, 0.5), 8000);
    // the extremes of the draw move it by the jitter fraction
    assert_eq!(retry_at(&cfg, 1, 0.0), 500);
    assert!((1499..=1500).contains(&retry_at(&cfg, 1, 1.0)));
}

#[test]
fn the_handlers_delay_wins_and_the_last_attempt_dead_letters() {
    let cfg = topic();
    let retry = Finish::Retry {
        delay: Some(Duration::from_millis(2500)),
        reason: "429".into(),
    };
    // attempt n of 3 ended in the handler's retry, at t = 10 ms
    let ended = |attempt| {
        after_run(
            &cfg,
            RanOn::stable("h"),
            attempt,
            3,
            &mut retry.clone(),
            10,
            0.9,
            Vec::new(),
        )
    };
    match ended(1) {
        Decision::Retry { next_due_ms, .. } => assert_eq!(next_due_ms, 2510),
        other => panic!("{other:?}"),
    }
    match ended(3) {
        Decision::Dead(info) => {
            assert_eq!(info.attempts, 3);
            assert_eq!(info.failed_at_ms, 10);
            assert!(
                info.reason
                    .contains("attempts exhausted (3/3); last error: 429"),
                "{}",
                info.reason
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        after_run(
            &cfg,
            RanOn::stable("h"),
            1,
            3,
            &mut Finish::NotStarted("pool".into()),
            10,
            0.1,
            Vec::new()
        ),
        Decision::Release
    );
}

#[test]
fn a_permanent_failure_on_a_canary_is_retried_and_the_same_on_stable_dies() {
    let cfg = topic();
    let fail = || Finish::Fail("payload is not the expected JSON".into());
    let canary = RanOn {
        version: "c",
        canary: true,
    };
    match after_run(&cfg, canary, 1, 3, &mut fail(), 10, 0.5, Vec::new()) {
        Decision::Retry { failure, .. } => {
            assert_eq!(
                failure.handler.as_deref(),
                Some("c"),
                "routes the retry away"
            );
            assert!(
                failure.error.contains("failed on canary c"),
                "{}",
                failure.error
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        after_run(
            &cfg,
            RanOn::stable("s"),
            1,
            3,
            &mut fail(),
            10,
            0.5,
            Vec::new()
        ),
        Decision::Dead(_)
    ));
}

#[test]
fn the_attempts_costs_go_with_the_retry_and_the_dead_letter() {
    use crate::redis::AttemptOutcome;
    let cfg = topic();
    let cost = |attempt| {
        crate::redis::AttemptCost::new(
            attempt,
            Some("h".into()),
            crate::redis::Usage {
                cpu_us: 1000 * u64::from(attempt),
                ..Default::default()
            },
        )
    };
    let ended = |attempt, outcome, error: &str| {
        let mut c = cost(attempt);
        c.ended_as(outcome, Some(error));
        c
    };
    let crash = || Finish::Crashed("trap".into());
    match after_run(
        &cfg,
        RanOn::stable("h"),
        1,
        2,
        &mut crash(),
        10,
        0.5,
        vec![cost(1)],
    ) {
        Decision::Retry { failure, .. } => assert_eq!(
            failure.attempts,
            vec![ended(1, AttemptOutcome::Retry, "trap")]
        ),
        other => panic!("{other:?}"),
    }
    let first = ended(1, AttemptOutcome::Retry, "trap");
    match after_run(
        &cfg,
        RanOn::stable("h"),
        2,
        2,
        &mut crash(),
        10,
        0.5,
        vec![first.clone(), cost(2)],
    ) {
        Decision::Dead(info) => assert_eq!(
            info.costs,
            vec![
                first,
                ended(
                    2,
                    AttemptOutcome::Dead,
                    "attempts exhausted (2/2); last error: trap"
                )
            ]
        ),
        other => panic!("{other:?}"),
    }
    // a suspension keeps the story too, with what it waits for
    let mut sleep = Finish::Suspended(crate::redis::Suspension {
        timer: "t:nap".into(),
        until_ms: 99,
        since_ms: 10,
        signal: Some("approved".into()),
    });
    match after_run(
        &cfg,
        RanOn::stable("h"),
        1,
        2,
        &mut sleep,
        10,
        0.5,
        vec![cost(1)],
    ) {
        Decision::Suspend { story, .. } => {
            assert_eq!(story[0].outcome, Some(AttemptOutcome::Suspend));
            assert_eq!(story[0].waits_until_ms, Some(99));
            assert_eq!(story[0].waits_for.as_deref(), Some("approved"));
        }
        other => panic!("{other:?}"),
    }
}
