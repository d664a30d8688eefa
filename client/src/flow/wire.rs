//! The bytes of a flow job's reference to its flow (in its record and in a
//! parked release) and of the notice its end parks.
//!
//! A [`FlowRef`]: the flow id (u16 LE length + bytes), the job's index (u32
//! LE). A [`Notice`]: a flow ref, then the end ([`JobEnd::encode`], u32 LE
//! length + bytes).

use crate::{CorruptRecord, JobEnd};

/// Which flow a job belongs to, and which of its jobs it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowRef {
    /// The flow's id.
    pub flow: String,
    /// The job's index in the flow (the order it was described in).
    pub index: u32,
}

/// A flow job's end, parked with its ack or burial for its flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    /// The job.
    pub job: FlowRef,
    /// How it ended (and its result, capped like results).
    pub end: JobEnd,
}

impl FlowRef {
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.flow.len() as u16).to_le_bytes());
        out.extend_from_slice(self.flow.as_bytes());
        out.extend_from_slice(&self.index.to_le_bytes());
    }

    pub(crate) fn read(bytes: &mut &[u8]) -> Result<FlowRef, CorruptRecord> {
        let len = u16::from_le_bytes(take(bytes, 2)?.try_into().expect("2 bytes")) as usize;
        let flow = String::from_utf8(take(bytes, len)?.to_vec())
            .map_err(|_| CorruptRecord("a flow id that is not UTF-8"))?;
        let index = u32::from_le_bytes(take(bytes, 4)?.try_into().expect("4 bytes"));
        Ok(FlowRef { flow, index })
    }
}

impl Notice {
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        self.job.write(out);
        let end = self.end.encode();
        out.extend_from_slice(&(end.len() as u32).to_le_bytes());
        out.extend_from_slice(&end);
    }

    pub(crate) fn read(bytes: &mut &[u8]) -> Result<Notice, CorruptRecord> {
        let job = FlowRef::read(bytes)?;
        let len = u32::from_le_bytes(take(bytes, 4)?.try_into().expect("4 bytes")) as usize;
        let end = JobEnd::decode(take(bytes, len)?)?;
        Ok(Notice { job, end })
    }
}

fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8], CorruptRecord> {
    if bytes.len() < n {
        return Err(CorruptRecord("a truncated flow reference"));
    }
    let (head, rest) = bytes.split_at(n);
    *bytes = rest;
    Ok(head)
}
