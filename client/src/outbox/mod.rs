//! Follow-up jobs between an ack and their delivery.
//!
//! A follow-up must exist exactly when its parent acked. The parent's ack
//! script parks the encoded follow-ups in the parent topic's outbox (same hash
//! tag, so the step is atomic on Redis Cluster too), then the runner enqueues
//! them into their topics and clears the entry. If the runner dies in
//! between, another runner's sweep takes the overdue entry and delivers it.
//! Follow-ups carry their ids from the start, so a delivery that runs twice
//! finds the first copy live and adds nothing.
//!
//! Entry layout: version byte `1`, count (u32 LE), then per job: topic
//! (u16 LE length + bytes), id (u16 LE length + bytes), due ms (u64 LE),
//! payload (u32 LE length + bytes); version 3 adds, after the unique-for
//! window, a flags byte: bit 0 the parent's result handed on (its length as
//! a u32 LE, then its bytes), bit 1 the trace context (`traceparent` with a
//! one-byte length, `tracestate` with a u16 LE length); version 4 adds bit
//! 2, the job's [`FlowRef`], and after the jobs the flow notices (u32 LE
//! count, each [`Notice`]); version 5 adds bit 3, the job's attempts (u32
//! LE), and after the notices the flows a handler created (u32 LE count,
//! each a [`FlowSpec`] in postcard with a u32 LE length); version 6 adds
//! bit 4, the job's tenant key (a one-byte length, then its bytes); version
//! 7 adds bit 5, the job's deadline (u64 LE ms), and bit 6, its priority
//! (one byte).

use super::flow::{FlowRef, FlowSpec, Notice};
use super::{CorruptRecord, NewJob, TraceContext};

/// 2 adds each job's unique-for window, 3 the parent's result, 4 flows, 5
/// a job's attempts and flows created by a handler; entries of older
/// versions (parked by an older runner) are still read. Entries without a
/// parent's result are written as version 2, which every runner since
/// unique-for reads; without flows, as version 3 at most; without attempts
/// or created flows, as version 4 at most; 6 adds a job's tenant key, and
/// is written only for an entry with one; 7 a job's deadline and priority,
/// written only for an entry with either.
const VERSION: u8 = 7;

/// A follow-up job for `topic`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parked {
    /// The target topic.
    pub topic: String,
    /// The job; its id is always set.
    pub job: NewJob,
}

/// What one ended attempt parks: its follow-ups and, for a job of a flow,
/// the notice of its end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entry {
    /// Follow-up jobs (acks only).
    pub jobs: Vec<Parked>,
    /// Ends to tell flows.
    pub notices: Vec<Notice>,
    /// Flows a handler created (acks only): each is created when the entry
    /// is delivered.
    pub flows: Vec<FlowSpec>,
}

impl Entry {
    /// Nothing to park.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty() && self.notices.is_empty() && self.flows.is_empty()
    }
}

/// The bytes parked for one acked attempt's follow-ups.
pub fn encode(jobs: &[Parked]) -> Vec<u8> {
    encode_entry(jobs, &[])
}

/// The bytes parked for one ended attempt.
pub fn encode_entry(jobs: &[Parked], notices: &[Notice]) -> Vec<u8> {
    encode_full(jobs, notices, &[])
}

/// The bytes parked for one ended attempt, with the flows its handler created.
pub fn encode_full(jobs: &[Parked], notices: &[Notice], flows: &[FlowSpec]) -> Vec<u8> {
    let size: usize = jobs
        .iter()
        .map(|p| 16 + p.topic.len() + p.job.id.as_deref().map_or(0, str::len) + p.job.payload.len())
        .sum();
    let mut out = Vec::with_capacity(5 + size);
    let created = flows;
    let v7 = jobs
        .iter()
        .any(|p| p.job.expires_at_ms.is_some() || p.job.priority > 0);
    let v6 = v7 || jobs.iter().any(|p| p.job.key.is_some());
    let v5 = v6 || !created.is_empty() || jobs.iter().any(|p| p.job.max_attempts > 0);
    let flows = v5 || !notices.is_empty() || jobs.iter().any(|p| p.job.flow.is_some());
    let extended = flows
        || jobs
            .iter()
            .any(|p| p.job.parent_result.is_some() || p.job.trace.is_some());
    out.push(match (v5, flows, extended) {
        _ if v7 => VERSION,
        _ if v6 => 6,
        (true, _, _) => 5,
        (false, true, _) => 4,
        (false, false, true) => 3,
        (false, false, false) => 2,
    });
    out.extend_from_slice(&(jobs.len() as u32).to_le_bytes());
    for p in jobs {
        let id = p.job.id.as_deref().unwrap_or_default();
        out.extend_from_slice(&(p.topic.len() as u16).to_le_bytes());
        out.extend_from_slice(p.topic.as_bytes());
        out.extend_from_slice(&(id.len() as u16).to_le_bytes());
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(&p.job.due_at_ms.to_le_bytes());
        out.extend_from_slice(&p.job.unique_for_ms.to_le_bytes());
        if extended {
            let flags = u8::from(p.job.parent_result.is_some())
                | u8::from(p.job.trace.is_some()) << 1
                | u8::from(p.job.flow.is_some()) << 2
                | u8::from(p.job.max_attempts > 0) << 3
                | u8::from(p.job.key.is_some()) << 4
                | u8::from(p.job.expires_at_ms.is_some()) << 5
                | u8::from(p.job.priority > 0) << 6;
            out.push(flags);
            if let Some(r) = &p.job.parent_result {
                out.extend_from_slice(&(r.len() as u32).to_le_bytes());
                out.extend_from_slice(r);
            }
            if let Some(t) = &p.job.trace {
                out.push(t.traceparent.len() as u8);
                out.extend_from_slice(t.traceparent.as_bytes());
                out.extend_from_slice(&(t.tracestate.len() as u16).to_le_bytes());
                out.extend_from_slice(t.tracestate.as_bytes());
            }
            if let Some(f) = &p.job.flow {
                f.write(&mut out);
            }
            if p.job.max_attempts > 0 {
                out.extend_from_slice(&p.job.max_attempts.to_le_bytes());
            }
            if let Some(k) = &p.job.key {
                // at most 128 bytes (check_key)
                out.push(k.len() as u8);
                out.extend_from_slice(k.as_bytes());
            }
            if let Some(at) = p.job.expires_at_ms {
                out.extend_from_slice(&at.to_le_bytes());
            }
            if p.job.priority > 0 {
                out.push(p.job.priority);
            }
        }
        out.extend_from_slice(&(p.job.payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&p.job.payload);
    }
    if flows {
        out.extend_from_slice(&(notices.len() as u32).to_le_bytes());
        for n in notices {
            n.write(&mut out);
        }
    }
    if v5 {
        out.extend_from_slice(&(created.len() as u32).to_le_bytes());
        for f in created {
            let bytes = postcard::to_allocvec(f).expect("a flow serializes");
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(&bytes);
        }
    }
    out
}

/// Read back the follow-ups [`encode`] wrote (an entry with notices is refused).
pub fn decode(bytes: &[u8]) -> Result<Vec<Parked>, CorruptRecord> {
    let entry = decode_entry(bytes)?;
    if !entry.notices.is_empty() {
        return Err(CorruptRecord("an outbox entry with flow notices"));
    }
    Ok(entry.jobs)
}

/// Read back what [`encode_entry`] wrote.
pub fn decode_entry(bytes: &[u8]) -> Result<Entry, CorruptRecord> {
    let mut r = Reader(bytes);
    let version = r.take(1)?[0];
    if !(1..=VERSION).contains(&version) {
        return Err(CorruptRecord("unknown outbox version"));
    }
    let count = u32::from_le_bytes(r.array()?);
    let mut jobs = Vec::with_capacity(count.min(1024) as usize);
    for _ in 0..count {
        let topic = r.short_text()?;
        let id = r.short_text()?;
        let due_at_ms = u64::from_le_bytes(r.array()?);
        let unique_for_ms = match version {
            1 => 0,
            _ => u64::from_le_bytes(r.array()?),
        };
        let flags = if version >= 3 { r.take(1)?[0] } else { 0 };
        let known = match version {
            7.. => 127,
            6 => 31,
            5 => 15,
            4 => 7,
            _ => 3,
        };
        if flags & !known != 0 {
            return Err(CorruptRecord("an outbox entry from a newer hourglass"));
        }
        let parent_result = match flags & 1 {
            1 => {
                let len = u32::from_le_bytes(r.array()?) as usize;
                Some(r.take(len)?.to_vec())
            }
            _ => None,
        };
        let trace = match flags & 2 {
            2 => {
                let len = r.take(1)?[0] as usize;
                let traceparent = r.text(len)?;
                let len = u16::from_le_bytes(r.array()?) as usize;
                Some(TraceContext {
                    traceparent,
                    tracestate: r.text(len)?,
                })
            }
            _ => None,
        };
        let flow = match flags & 4 {
            4 => Some(FlowRef::read(&mut r.0)?),
            _ => None,
        };
        let max_attempts = match flags & 8 {
            8 => u32::from_le_bytes(r.array()?),
            _ => 0,
        };
        let key = match flags & 16 {
            16 => {
                let len = r.take(1)?[0] as usize;
                Some(r.text(len)?)
            }
            _ => None,
        };
        let expires_at_ms = match flags & 32 {
            32 => Some(u64::from_le_bytes(r.array()?)),
            _ => None,
        };
        let priority = match flags & 64 {
            64 => r.take(1)?[0],
            _ => 0,
        };
        let len = u32::from_le_bytes(r.array()?) as usize;
        let payload = r.take(len)?.to_vec();
        jobs.push(Parked {
            topic,
            job: NewJob {
                id: Some(id),
                payload,
                due_at_ms,
                max_attempts,
                unique_for_ms,
                replace: false,
                version: None,
                account: None,
                key,
                parent_result,
                trace,
                flow,
                expires_at_ms,
                priority,
            },
        });
    }
    let mut notices = Vec::new();
    if version >= 4 {
        let count = u32::from_le_bytes(r.array()?);
        for _ in 0..count {
            notices.push(Notice::read(&mut r.0)?);
        }
    }
    let mut flows = Vec::new();
    if version >= 5 {
        let count = u32::from_le_bytes(r.array()?);
        for _ in 0..count {
            let len = u32::from_le_bytes(r.array()?) as usize;
            let spec = postcard::from_bytes(r.take(len)?)
                .map_err(|_| CorruptRecord("a flow in an outbox entry"))?;
            flows.push(spec);
        }
    }
    if !r.0.is_empty() {
        return Err(CorruptRecord("trailing bytes in an outbox entry"));
    }
    Ok(Entry {
        jobs,
        notices,
        flows,
    })
}

/// The outbox field an ack parks an attempt's follow-ups under:
/// `<attempt>:<id>`. `ack.lua` builds the same string (`ARGV[i + 1] .. ':' .. id`);
/// `follow_ups_are_delivered_once_and_the_outbox_left_empty` checks they agree.
pub fn outbox_token(attempt: u32, id: &str) -> String {
    format!("{attempt}:{id}")
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CorruptRecord> {
        if self.0.len() < n {
            return Err(CorruptRecord("truncated outbox entry"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CorruptRecord> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }

    /// Text preceded by its length as a u16.
    fn short_text(&mut self) -> Result<String, CorruptRecord> {
        let n = usize::from(u16::from_le_bytes(self.array()?));
        self.text(n)
    }

    /// The next `n` bytes, as text.
    fn text(&mut self, n: usize) -> Result<String, CorruptRecord> {
        String::from_utf8(self.take(n)?.to_vec())
            .map_err(|_| CorruptRecord("non-UTF-8 text in an outbox entry"))
    }
}

mod store;

#[cfg(test)]
mod tests;
