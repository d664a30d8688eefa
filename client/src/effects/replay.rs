//! What the next attempt of a job answers from: an effects journal's
//! batches read back ([`Replay::load`]), and shown ([`to_json`]).

use std::collections::{BTreeMap, HashMap};

use super::{Answer, Entry, Kind, Request};

/// A recorded request as the next attempt replays it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// Its place among the job's requests.
    pub seq: u64,
    /// What was asked.
    pub request: Request,
    /// What came back.
    pub answer: Answer,
}

/// What the next attempt of a job answers from, per scope and kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replay {
    /// Requests by (scope, position).
    pub http: HashMap<(String, u32), Recorded>,
    /// Clock reads by (scope, clock), from position 0 on.
    pub clocks: HashMap<(String, Kind), Vec<u64>>,
    /// Random bytes by (scope, source), from offset 0 on.
    pub random: HashMap<(String, Kind), Vec<u8>>,
    /// Follow-ups by (scope, position): topic, payload hash and id.
    pub follow_ups: HashMap<(String, u32), (String, [u8; 32], String)>,
    /// Why the journal stopped, if it did: then nothing more is recorded.
    pub stopped: Option<String>,
    /// The number the next batch is written under.
    pub next_batch: u32,
    /// The `seq` of the next request.
    pub next_seq: u64,
    /// Bytes the entries hold.
    pub bytes: usize,
}

impl Replay {
    /// Build from a journal's batches (`e:<n>` by `n`): later batches win
    /// where they overlap; a stop cuts every scope at its cursors; and the
    /// job's last request, when its answer says it failed
    /// ([`Answer::failed`]), is left out, so that it is made again.
    pub fn load(batches: &BTreeMap<u32, Vec<Entry>>) -> Replay {
        let mut replay = Replay {
            next_batch: batches.keys().next_back().map_or(0, |n| n + 1),
            ..Replay::default()
        };
        let mut stop: Option<&Vec<(String, Kind, u64)>> = None;
        for entries in batches.values() {
            for entry in entries {
                replay.bytes += entry.size();
                replay.add(entry, &mut stop);
            }
        }
        if let Some(cursors) = stop {
            replay.cut(cursors);
        }
        // the last request, when it failed, is made again
        let last = replay.http.iter().max_by_key(|(_, r)| r.seq);
        if let Some((at, recorded)) = last
            && recorded.answer.failed()
        {
            let at = at.clone();
            replay.http.remove(&at);
        }
        replay
    }

    fn add<'a>(&mut self, entry: &'a Entry, stop: &mut Option<&'a Vec<(String, Kind, u64)>>) {
        match entry {
            Entry::Http {
                scope,
                pos,
                seq,
                request,
                answer,
                ..
            } => {
                self.next_seq = self.next_seq.max(seq + 1);
                let recorded = Recorded {
                    seq: *seq,
                    request: request.clone(),
                    answer: answer.clone(),
                };
                self.http.insert((scope.clone(), *pos), recorded);
            }
            Entry::Clock {
                scope,
                kind,
                first,
                values,
            } => {
                let reads = self.clocks.entry((scope.clone(), *kind)).or_default();
                place(reads, *first as usize, values);
            }
            Entry::Random {
                scope,
                kind,
                offset,
                bytes,
            } => {
                let stream = self.random.entry((scope.clone(), *kind)).or_default();
                place(stream, *offset as usize, bytes);
            }
            Entry::FollowUp {
                scope,
                pos,
                topic,
                payload_sha256,
                id,
                ..
            } => {
                self.follow_ups.insert(
                    (scope.clone(), *pos),
                    (topic.clone(), *payload_sha256, id.clone()),
                );
            }
            Entry::Stop {
                reason, cursors, ..
            } => {
                if stop.is_none() {
                    *stop = Some(cursors);
                    self.stopped = Some(reason.clone());
                }
            }
        }
    }

    /// Keep only what lies before the stop's cursors.
    fn cut(&mut self, cursors: &[(String, Kind, u64)]) {
        let at = |scope: &str, kind: Kind| {
            cursors
                .iter()
                .find(|(s, k, _)| s == scope && *k == kind)
                .map_or(0, |c| c.2)
        };
        self.http
            .retain(|(scope, pos), _| u64::from(*pos) < at(scope, Kind::Http));
        self.follow_ups
            .retain(|(scope, pos), _| u64::from(*pos) < at(scope, Kind::FollowUp));
        for ((scope, kind), reads) in &mut self.clocks {
            reads.truncate(at(scope, *kind) as usize);
        }
        for ((scope, kind), bytes) in &mut self.random {
            bytes.truncate(at(scope, *kind) as usize);
        }
    }
}

/// An effects journal as `inspect --json`, `hourglass journal --json` and
/// the API show it: the requests and follow-ups in the order they were
/// made (with `replays: false` on one the next attempt makes again), how
/// many clock reads and random bytes, and where and why it stopped.
pub fn to_json(batches: &BTreeMap<u32, Vec<Entry>>) -> serde_json::Value {
    if batches.is_empty() {
        return serde_json::Value::Null;
    }
    let replay = Replay::load(batches);
    let mut calls = Vec::new();
    let mut follow_ups = Vec::new();
    let mut reads: BTreeMap<&str, u64> = BTreeMap::new();
    let mut stop = serde_json::Value::Null;
    for entry in batches.values().flatten() {
        match entry {
            Entry::Http {
                scope,
                pos,
                seq,
                attempt,
                at_ms,
                request,
                answer,
            } => {
                let replays = replay.http.contains_key(&(scope.clone(), *pos));
                let mut call = serde_json::json!({
                    "kind": "http",
                    "seq": seq,
                    "step": (!scope.is_empty()).then_some(scope),
                    "position": pos,
                    "method": request.method,
                    "url": request.url,
                    "request_bytes": request.body_len,
                    "attempt": attempt,
                    "at_ms": at_ms,
                    "replays": replays,
                });
                match answer {
                    Answer::Response { status, body, .. } => {
                        call["status"] = (*status).into();
                        call["bytes"] = body.len().into();
                    }
                    Answer::Failed { code, detail } => {
                        call["error"] = format!("{code}: {detail}").into();
                    }
                }
                calls.push(call);
            }
            Entry::Clock { kind, values, .. } => {
                *reads.entry(kind.name()).or_default() += values.len() as u64;
            }
            Entry::Random { kind, bytes, .. } => {
                *reads.entry(kind.name()).or_default() += bytes.len() as u64;
            }
            Entry::FollowUp {
                scope,
                attempt,
                topic,
                id,
                ..
            } => follow_ups.push(serde_json::json!({
                "step": (!scope.is_empty()).then_some(scope),
                "topic": topic,
                "id": id,
                "attempt": attempt,
            })),
            Entry::Stop {
                attempt,
                at_ms,
                reason,
                ..
            } if stop.is_null() => {
                stop = serde_json::json!({ "attempt": attempt, "at_ms": at_ms, "reason": reason });
            }
            Entry::Stop { .. } => {}
        }
    }
    calls.sort_by_key(|c| c["seq"].as_u64());
    serde_json::json!({
        "calls": calls,
        "follow_ups": follow_ups,
        "clock_reads": {
            "wall": reads.get("wall_clock").copied().unwrap_or(0),
            "monotonic": reads.get("monotonic_clock").copied().unwrap_or(0),
        },
        "random_bytes": reads.get("random").copied().unwrap_or(0)
            + reads.get("insecure_random").copied().unwrap_or(0),
        "stopped": stop,
        "bytes": replay.bytes,
    })
}

/// Put `values` at `at` in `into`, over what is there; a gap (which no
/// attempt leaves) ends what can be replayed.
fn place<T: Clone>(into: &mut Vec<T>, at: usize, values: &[T]) {
    if at > into.len() {
        return;
    }
    let end = (at + values.len()).min(into.len());
    into[at..end].clone_from_slice(&values[..end - at]);
    into.extend_from_slice(&values[end - at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(url: &str) -> Request {
        Request {
            method: "POST".into(),
            url: url.into(),
            body_sha256: [7; 32],
            body_len: 3,
        }
    }

    fn http(scope: &str, pos: u32, seq: u64, status: u16) -> Entry {
        Entry::Http {
            scope: scope.into(),
            pos,
            seq,
            attempt: 1,
            at_ms: 1,
            request: request(&format!("http://shop/{seq}")),
            answer: Answer::Response {
                status,
                headers: vec![("content-type".into(), b"text/plain".to_vec())],
                body: b"ok".to_vec(),
            },
        }
    }

    fn batches(list: Vec<Vec<Entry>>) -> BTreeMap<u32, Vec<Entry>> {
        list.into_iter()
            .enumerate()
            .map(|(n, e)| (n as u32, e))
            .collect()
    }

    #[test]
    fn the_last_request_is_made_again_only_when_it_failed() {
        let ok = Replay::load(&batches(vec![vec![
            http("", 0, 0, 200),
            http("", 1, 1, 201),
        ]]));
        assert_eq!(ok.http.len(), 2);
        assert_eq!((ok.next_batch, ok.next_seq), (1, 2));
        let failed = Replay::load(&batches(vec![vec![
            http("", 0, 0, 200),
            http("", 1, 1, 503),
        ]]));
        assert_eq!(failed.http.len(), 1, "the 503 at the end is made again");
        // a failure the handler went on from replays (it decided on it)
        let went_on = Replay::load(&batches(vec![
            vec![http("", 0, 0, 503)],
            vec![http("", 1, 1, 200)],
        ]));
        assert_eq!(went_on.http.len(), 2);
        // a 404 is an answer, not a failure
        let missing = Replay::load(&batches(vec![vec![http("", 0, 0, 404)]]));
        assert_eq!(missing.http.len(), 1);
    }

    #[test]
    fn reads_continue_across_batches_and_later_batches_win() {
        let clock = |first, values: Vec<u64>| Entry::Clock {
            scope: String::new(),
            kind: Kind::Monotonic,
            first,
            values,
        };
        let r = Replay::load(&batches(vec![
            vec![clock(0, vec![10, 20])],
            vec![clock(2, vec![30])],
            vec![clock(1, vec![21, 31, 41])],
        ]));
        assert_eq!(
            r.clocks[&(String::new(), Kind::Monotonic)],
            vec![10, 21, 31, 41]
        );
        // a gap is not filled
        let gap = Replay::load(&batches(vec![
            vec![clock(0, vec![1])],
            vec![clock(5, vec![2])],
        ]));
        assert_eq!(gap.clocks[&(String::new(), Kind::Monotonic)], vec![1]);
    }

    #[test]
    fn a_stop_keeps_what_came_before_its_cursors_only() {
        let stop = Entry::Stop {
            attempt: 2,
            at_ms: 5,
            reason: "response body over 1 MiB".into(),
            cursors: vec![
                (String::new(), Kind::Http, 1),
                (String::new(), Kind::Wall, 1),
            ],
        };
        let r = Replay::load(&batches(vec![
            vec![
                http("", 0, 0, 200),
                http("", 1, 1, 200),
                http("step", 0, 2, 200),
                Entry::Clock {
                    scope: String::new(),
                    kind: Kind::Wall,
                    first: 0,
                    values: vec![1, 2],
                },
            ],
            vec![stop],
        ]));
        assert_eq!(r.stopped.as_deref(), Some("response body over 1 MiB"));
        let kept: Vec<_> = r.http.keys().cloned().collect();
        assert_eq!(
            kept,
            vec![(String::new(), 0)],
            "scopes not listed keep nothing"
        );
        assert_eq!(r.clocks[&(String::new(), Kind::Wall)], vec![1]);
    }
}
