//! The outbox entry's encodings: old versions read, round trips, damage
//! refused, flows' parts (version 4), and arbitrary bytes.

use super::*;

fn parked(topic: &str, id: &str, payload: &[u8]) -> Parked {
    Parked {
        topic: topic.into(),
        job: NewJob {
            id: Some(id.into()),
            payload: payload.to_vec(),
            due_at_ms: 1_700_000_000_000,
            max_attempts: 0,
            ..Default::default()
        },
    }
}

#[test]
fn an_entry_parked_by_an_older_runner_is_still_read() {
    // version 1: no unique-for window
    let mut v1 = vec![1, 1, 0, 0, 0];
    v1.extend_from_slice(&1u16.to_le_bytes());
    v1.extend_from_slice(b"t");
    v1.extend_from_slice(&2u16.to_le_bytes());
    v1.extend_from_slice(b"id");
    v1.extend_from_slice(&1_700_000_000_000u64.to_le_bytes());
    v1.extend_from_slice(&2u32.to_le_bytes());
    v1.extend_from_slice(b"{}");
    assert_eq!(decode(&v1).unwrap(), [parked("t", "id", b"{}")]);
}

#[test]
fn round_trips_and_rejects_damage() {
    let mut unique = parked("notify", "u", b"1");
    unique.job.unique_for_ms = 3_600_000;
    let jobs = vec![
        unique,
        parked("notify", "a", b"{}"),
        parked("x", "0123456789abcdef", &[0, 255, 10]),
        parked("t", "e", b""),
    ];
    let bytes = encode(&jobs);
    assert_eq!(decode(&bytes).unwrap(), jobs);
    assert_eq!(decode(&encode(&[])).unwrap(), []);
    for cut in 0..bytes.len() {
        assert!(
            decode(&bytes[..cut]).is_err(),
            "a prefix of {cut} bytes decoded"
        );
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(decode(&longer).is_err());
}

#[test]
fn a_handed_result_and_a_trace_context_round_trip() {
    let mut handed = parked("receipt", "mail-1", b"{}");
    handed.job.parent_result = Some(b"{\"receipt\":\"r-1\"}".to_vec());
    let mut traced = parked("audit", "a-1", b"x");
    traced.job.trace = Some(
        TraceContext::parse(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            Some("congo=t61rcWkgMzE"),
        )
        .unwrap(),
    );
    let jobs = vec![handed, traced, parked("t", "plain", b"")];
    let bytes = encode(&jobs);
    assert_eq!(
        bytes[0], 3,
        "without flows, what runners since results read"
    );
    assert_eq!(decode(&bytes).unwrap(), jobs);
    // without either, what runners since unique-for read
    assert_eq!(encode(&jobs[2..])[0], 2);
}

mod flows {
    use super::*;
    use crate::{EndState, JobEnd};

    #[test]
    fn a_released_job_and_a_notice_round_trip_in_version_4() {
        let mut released = Parked {
            topic: "publish".into(),
            job: NewJob {
                id: Some("album-7/publish".into()),
                payload: b"{}".to_vec(),
                ..Default::default()
            },
        };
        released.job.flow = Some(FlowRef {
            flow: "album-7".into(),
            index: 40,
        });
        let notice = Notice {
            job: FlowRef {
                flow: "album-7".into(),
                index: 3,
            },
            end: JobEnd {
                state: EndState::Acked,
                result: Some(b"{\"url\":\"t3.png\"}".to_vec()),
                reason: None,
                version: Some("0123456789abcdef".into()),
                attempts: 1,
                at_ms: 1_700_000_000_000,
                history: Vec::new(),
                logs: None,
            },
        };
        let bytes = encode_entry(
            std::slice::from_ref(&released),
            std::slice::from_ref(&notice),
        );
        assert_eq!(bytes[0], 4);
        let entry = decode_entry(&bytes).unwrap();
        assert_eq!(entry.jobs, [released.clone()]);
        assert_eq!(entry.notices, std::slice::from_ref(&notice));
        for cut in 0..bytes.len() {
            assert!(
                decode_entry(&bytes[..cut]).is_err(),
                "a prefix of {cut} bytes decoded"
            );
        }
        // follow-ups alone: an entry with a notice is not one
        assert!(decode(&bytes).is_err());
        let only_notice = encode_entry(&[], &[notice]);
        assert_eq!(decode_entry(&only_notice).unwrap().jobs, []);
        // a released job alone is read by decode too
        assert_eq!(
            decode(&encode(std::slice::from_ref(&released))).unwrap(),
            [released]
        );
    }

    #[test]
    fn version_5_keeps_a_jobs_attempts_and_the_flows_a_handler_created() {
        use crate::flow::{Dep, FlowJob, FlowSpec, Policy};
        let mut job = parked("child", "c1", b"payload");
        job.job.max_attempts = 7;
        let flow = FlowSpec {
            id: Some("f-1".into()),
            jobs: vec![
                FlowJob {
                    name: "a".into(),
                    topic: "t".into(),
                    payload: vec![0, 255, 7],
                    after: Vec::new(),
                    max_attempts: 3,
                },
                FlowJob {
                    name: "b".into(),
                    topic: "t".into(),
                    payload: Vec::new(),
                    after: vec![Dep {
                        name: "a".into(),
                        policy: Policy::Ignore,
                    }],
                    max_attempts: 0,
                },
            ],
            fail_fast: true,
        };
        let bytes = encode_full(std::slice::from_ref(&job), &[], std::slice::from_ref(&flow));
        assert_eq!(bytes[0], 5);
        let entry = decode_entry(&bytes).unwrap();
        assert_eq!(entry.jobs, [job.clone()]);
        assert_eq!(entry.flows, [flow]);
        for cut in 0..bytes.len() {
            assert!(
                decode_entry(&bytes[..cut]).is_err(),
                "a prefix of {cut} bytes decoded"
            );
        }
        // without attempts or flows, as version 4 or lower still
        job.job.max_attempts = 0;
        assert!(encode_full(&[job], &[], &[])[0] < 5);
    }

    #[test]
    fn version_6_keeps_a_jobs_tenant_key_and_only_an_entry_with_one_is_written_so() {
        let mut keyed = parked("child", "c1", b"payload");
        keyed.job.key = Some("customer-7/eu".into());
        keyed.job.max_attempts = 2;
        let plain = parked("child", "c2", b"x");
        let bytes = encode(&[keyed.clone(), plain.clone()]);
        assert_eq!(bytes[0], 6);
        assert_eq!(decode(&bytes).unwrap(), [keyed, plain.clone()]);
        for cut in 0..bytes.len() {
            assert!(
                decode(&bytes[..cut]).is_err(),
                "a prefix of {cut} bytes decoded"
            );
        }
        // an older runner's reading of version 5 refuses bit 4: never written without a key
        assert!(encode(&[plain])[0] < 6);
    }

    #[test]
    fn version_7_keeps_a_jobs_deadline_and_priority_and_only_an_entry_with_one_is_written_so() {
        let mut expiring = parked("child", "c1", b"payload");
        expiring.job.expires_at_ms = Some(1_700_000_060_000);
        expiring.job.key = Some("k".into());
        let mut urgent = parked("child", "c2", b"x");
        urgent.job.priority = 9;
        let plain = parked("child", "c3", b"y");
        let bytes = encode(&[expiring.clone(), urgent.clone(), plain.clone()]);
        assert_eq!(bytes[0], 7);
        assert_eq!(
            decode(&bytes).unwrap(),
            [expiring.clone(), urgent.clone(), plain.clone()]
        );
        for cut in 0..bytes.len() {
            assert!(
                decode(&bytes[..cut]).is_err(),
                "a prefix of {cut} bytes decoded"
            );
        }
        assert_eq!(encode(&[urgent])[0], 7);
        // version 6 readers refuse bits 5 and 6: never written without them
        expiring.job.expires_at_ms = None;
        assert_eq!(encode(&[expiring, plain])[0], 6);
    }
}

mod fuzz {
    use proptest::prelude::*;

    use super::*;

    fn parked() -> impl Strategy<Value = Parked> {
        (
            "[a-z_]{1,20}",
            "[ -~]{1,40}",
            any::<u64>(),
            proptest::collection::vec(any::<u8>(), 0..256),
            proptest::option::of(any::<u64>()),
            0..=crate::LOWEST_PRIORITY,
        )
            .prop_map(
                |(topic, id, due_at_ms, payload, expires_at_ms, priority)| Parked {
                    topic,
                    job: NewJob {
                        id: Some(id),
                        payload,
                        due_at_ms,
                        max_attempts: 0,
                        expires_at_ms,
                        priority,
                        ..Default::default()
                    },
                },
            )
    }

    proptest! {
        #[test]
        fn any_outbox_entry_round_trips(jobs in proptest::collection::vec(parked(), 0..8)) {
            prop_assert_eq!(decode(&encode(&jobs)).unwrap(), jobs);
        }

        #[test]
        fn arbitrary_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = decode(&bytes);
        }
    }
}
