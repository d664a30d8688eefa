//! Bad and odd input at the door: empty, binary, non-UTF-8 and oversized
//! payloads; empty, huge, control-character and non-UTF-8 ids. Each is
//! stored unchanged or refused with a clear error, and nothing is lost.

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use hourglass::clock::now_ms;
use hourglass::events::EventKind;
use hourglass::redis::{NewJob, Queue, QueueError};

use crate::util::{Project, Running, hourglass_bin};

const TOPICS: &str = "[[topic]]\nname = \"echo\"\nhandler = \"echo.wasm\"\n";

fn hourglass(project: &Project, args: &[&OsStr], stdin: &[u8]) -> Output {
    let mut child = Command::new(hourglass_bin())
        .args(args)
        .arg("--config")
        .arg(project.config_path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn enqueue(project: &Project, payload: &str, id: &[u8], stdin: &[u8]) -> Output {
    let args: [&OsStr; 5] = [
        "enqueue".as_ref(),
        "echo".as_ref(),
        payload.as_ref(),
        "--id".as_ref(),
        OsStr::from_bytes(id),
    ];
    hourglass(project, &args, stdin)
}

async fn stored(queue: &Queue, id: &str) -> Vec<u8> {
    let view = queue
        .inspect(&queue.keys("echo"), id, now_ms())
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("job {id} was not stored"));
    view.record.unwrap().unwrap().payload
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_arrive_byte_for_byte_and_one_over_the_limit_is_refused() {
    let project = Project::new("max_payload = \"1KiB\"", TOPICS);
    let queue = project.queue().await;
    let file = project.dir.path().join("payload.bin");

    let empty = enqueue(&project, "", b"empty", b"");
    assert!(
        empty.status.success(),
        "{}",
        String::from_utf8_lossy(&empty.stderr)
    );
    let every_byte: Vec<u8> = (0..=255).collect();
    let binary = enqueue(&project, "-", b"binary", &every_byte);
    assert!(
        binary.status.success(),
        "{}",
        String::from_utf8_lossy(&binary.stderr)
    );
    std::fs::write(&file, [0xff, 0xfe, 0x00, b'\n', 0xc3]).unwrap();
    let at_file = format!("@{}", file.display());
    assert!(
        enqueue(&project, &at_file, b"not-utf8", b"")
            .status
            .success()
    );
    std::fs::write(&file, vec![b'x'; 1024]).unwrap();
    assert!(
        enqueue(&project, &at_file, b"at-limit", b"")
            .status
            .success()
    );

    assert_eq!(stored(&queue, "empty").await, b"");
    assert_eq!(stored(&queue, "binary").await, every_byte);
    assert_eq!(
        stored(&queue, "not-utf8").await,
        [0xff, 0xfe, 0x00, b'\n', 0xc3]
    );
    assert_eq!(stored(&queue, "at-limit").await.len(), 1024);

    for (how, out) in [
        ("file", {
            std::fs::write(&file, vec![b'x'; 1025]).unwrap();
            enqueue(&project, &at_file, b"over", b"")
        }),
        ("stdin", enqueue(&project, "-", b"over", &[b'x'; 1025])),
        (
            "argument",
            enqueue(&project, &"x".repeat(1025), b"over", b""),
        ),
    ] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{how}: {stderr}");
        assert!(stderr.contains("max_payload"), "{how}: {stderr}");
    }
    assert!(
        queue
            .inspect(&queue.keys("echo"), "over", now_ms())
            .await
            .unwrap()
            .is_none(),
        "a refused job left something behind"
    );
    // the library refuses too, before writing anything
    let limited = project.queue().await.with_max_payload(1024);
    let err = limited
        .enqueue(
            &limited.keys("echo"),
            &[NewJob {
                id: None,
                payload: vec![0; 1025],
                due_at_ms: 0,
                max_attempts: 0,
                ..Default::default()
            }],
            now_ms(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, QueueError::Invalid(_)) && !err.is_retryable(),
        "{err}"
    );

    // and every stored job runs
    let mut runner = Running::start(project.config()).await;
    runner
        .until(Duration::from_secs(20), |seen| {
            seen.iter().filter(|e| e.kind == EventKind::Acked).count() == 4
        })
        .await;
    runner.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ids_are_refused_with_a_reason_and_unicode_ids_are_fine() {
    let project = Project::new("", TOPICS);
    let queue = project.queue().await;
    for (id, expect) in [
        (&b""[..], "1 to 512 bytes"),
        (&[b'x'; 513][..], "1 to 512 bytes"),
        (&b"line\nbreak"[..], "control characters"),
        (&[b'a', 0xff, b'b'][..], "UTF-8"),
    ] {
        let out = enqueue(&project, "p", id, b"");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{id:?}: {stderr}");
        assert!(stderr.contains(expect), "{id:?}: {stderr}");
    }
    let unicode = "заказ-42 🚀";
    let out = enqueue(&project, "p", unicode.as_bytes(), b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stored(&queue, unicode).await, b"p");
    let out = hourglass(
        &project,
        &["inspect".as_ref(), "echo".as_ref(), unicode.as_ref()],
        b"",
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(unicode));

    let err = queue
        .enqueue(
            &queue.keys("echo"),
            &[NewJob {
                id: Some(String::new()),
                payload: vec![],
                due_at_ms: 0,
                max_attempts: 0,
                ..Default::default()
            }],
            now_ms(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, QueueError::Invalid(_)), "{err}");
    let stats = queue.stats(&queue.keys("echo"), now_ms()).await.unwrap();
    assert_eq!(stats.ready, 1, "only the unicode job was stored");
}
