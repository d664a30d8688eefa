//! Each script against its header and the libraries it is built on.

use super::*;

#[test]
fn libraries_hold_only_definitions() {
    for lib in LIBRARIES {
        for line in lib.lines() {
            assert!(
                line.is_empty()
                    || line.starts_with([' ', '\t'])
                    || ["local ", "end", "--"].iter().any(|p| line.starts_with(p)),
                "a top-level line that is not a definition: {line:?}"
            );
        }
    }
}

#[test]
fn a_script_gets_what_it_uses_directly_or_through_another_definition() {
    let first = "-- header\nlocal A = 1\n\n-- f's comment\nlocal function f() return A end\nlocal function g(x)\n  return x\nend\n";
    let second =
        "local function h() return f() end\nlocal function one_line() return 1 end -- a note\n";
    let out = assemble(&[first, second], "return h() + one_line()\n");
    assert_eq!(
        out,
        "local A = 1\n\n-- f's comment\nlocal function f() return A end\n\
         local function h() return f() end\n\
         local function one_line() return 1 end -- a note\n\
         return h() + one_line()\n"
    );
    // a name in a string or a comment after code counts as used; in a
    // whole-line comment it does not
    let g = "local function g(x)\n  return x\nend\n";
    assert!(assemble(&[first], "return 'g'\n").contains(g));
    assert!(assemble(&[first], "return 2 -- not g\n").contains(g));
    assert_eq!(assemble(&[first], "-- g\nreturn 2\n"), "-- g\nreturn 2\n");
}

#[test]
fn the_claim_and_the_ack_leave_out_what_they_do_not_use() {
    let all = LIBRARIES
        .iter()
        .map(|lib| definitions(lib).len())
        .sum::<usize>();
    let kept = |body: &str| {
        let script = with_libraries(body);
        definitions(&script[..script.len() - body.len()]).len()
    };
    // the ack ends jobs: it never reaches the time index or a fair queue
    let ack = kept(include_str!("../../lua/ack.lua"));
    assert!(ack <= all / 3, "the ack keeps {ack} of {all} definitions");
    let claim = kept(include_str!("../../lua/claim.lua"));
    assert!(
        claim < all * 2 / 3,
        "the claim keeps {claim} of {all} definitions"
    );
}

/// The numbered `KEYS[n]:` a script's header names (not `KEYS[8 + j]`).
fn header_keys(file: &str) -> usize {
    let path = format!("{}/lua/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .take_while(|l| l.starts_with("--"))
        .flat_map(|l| l.match_indices("KEYS[").map(move |(i, _)| &l[i + 5..]))
        .filter(|rest| {
            rest.split_once("]:")
                .is_some_and(|(n, _)| n.parse::<usize>().is_ok())
        })
        .count()
}

#[test]
fn each_scripts_topic_keys_match_its_header() {
    // with the numbered KEYS its wrapper adds after the topic's
    let all = [
        (&ENQUEUE, 0),
        (&CLAIM, 0),
        (&CLAIM_FAIR, 0),
        (&KEY_PAUSE, 0),
        (&KEY_CHARGE, 0),
        (&KEY_STATS, 0),
        (&FAIR_OFF, 0),
        (&ACK, 0),
        (&RETRY, 0),
        (&BURY, 0),
        (&REQUEUE, 0),
        (&RELEASE, 0),
        (&OUTBOX_TAKE, 0),
        (&OUTBOX_CLEAR, 0),
        (&CANCEL, 0),
        (&DEAD_RETRY, 0),
        (&DEAD_PURGE, 0),
        (&PAUSE, 0),
        (&HEARTBEAT, 2),
        (&SCHEDULE_ADVANCE, 1),
        (&ROLLOUT_SYNC, 0),
        (&ROLLOUT_SET, 0),
        (&PROGRESS, 0),
        (&PEEK, 1),
        (&COUNTS, 0),
        (&SCALE, 0),
        (&MIGRATE, 0),
        (&STEP, 0),
        (&UPGRADE, 0),
        (&HOLDS, 0),
        (&SUSPEND, 0),
        (&SIGNAL, 0),
        (&WAKE, 0),
        (&FLOW_CREATE, 0),
        (&FLOW_END, 0),
        (&FLOW_READ, 0),
        (&FLOW_CANCEL, 0),
        (&FLOW_UNINDEX, 1),
    ];
    for (lua, added) in all {
        assert_eq!(
            lua.keys.len() + added,
            header_keys(lua.file),
            "{}: the KEYS its header names and the topic keys listed in scripts.rs differ",
            lua.file
        );
    }
}
