//! `[redis]` settings: Sentinel and replica-confirmed writes.

use super::*;

#[test]
fn sentinel_and_durability_are_read() {
    let (_d, c) = with_handler(
        "[redis]\nsentinel = { master = \"mymaster\", nodes = [\"redis://:s@10.0.0.1:26379\", \"redis://10.0.0.2:26379\"], password = \"p\", db = 2 }\n\
         durability = { replicas = 2, timeout = \"1s\" }\n",
    );
    let c = c.unwrap();
    match &c.redis.target {
        RedisTarget::Sentinel(s) => {
            assert_eq!(s.master, "mymaster");
            assert_eq!(s.nodes.len(), 2);
            assert_eq!((s.password.as_deref(), s.db), (Some("p"), 2));
        }
        other => panic!("expected sentinel, got {other:?}"),
    }
    let d = c.redis.durability.unwrap();
    assert_eq!((d.replicas, d.timeout), (2, Duration::from_secs(1)));

    let (_d, c) = with_handler("[redis]\ndurability = { replicas = 1 }\n");
    assert_eq!(
        c.unwrap().redis.durability.unwrap().timeout,
        Duration::from_millis(250),
        "the timeout defaults to 250ms"
    );
}

#[test]
fn a_bad_sentinel_or_durability_names_its_line_and_field() {
    let cases = [
        (
            "[redis]\nurl = \"redis://h\"\nsentinel = { master = \"m\", nodes = [\"redis://h:26379\"] }\n",
            3,
            "set one of `url`, `cluster` and `sentinel`",
        ),
        (
            "[redis]\nsentinel = { master = \"m\", nodes = [] }\n",
            2,
            "field `sentinel.nodes`: name at least one node",
        ),
        (
            "[redis]\nsentinel = { master = \"m\", nodes = [\"http://h:26379\"] }\n",
            2,
            "field `sentinel.nodes`: \"http://h:26379\" is not a redis://",
        ),
        (
            "[redis]\nsentinel = { master = \"\", nodes = [\"redis://h:26379\"] }\n",
            2,
            "field `sentinel.master`",
        ),
        (
            "[redis]\nsentinel = { nodes = [\"redis://h:26379\"] }\n",
            2,
            "missing field `master`",
        ),
        (
            "[redis]\nurl = \"embedded\"\ndurability = { replicas = 1 }\n",
            3,
            "field `durability`: the embedded server has no replicas",
        ),
        ("[redis]\ndurability = { replicas = 0 }\n", 2, "replicas"),
        (
            "[redis]\ndurability = { replicas = 1, timeout = \"soon\" }\n",
            2,
            "soon",
        ),
    ];
    for (text, line, wanted) in cases {
        let (_d, r) = with_handler(text);
        let (at, message) = error_at(r);
        assert!(message.contains(wanted), "{text}: {message}");
        assert_eq!(at, line, "{text}: {message}");
    }
}
