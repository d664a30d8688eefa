//! Reading script replies: strings, numbers and bytes out of `redis::Value`.

use redis::Value;

use super::QueueError;

pub(super) fn bytes(v: &Value) -> Result<Vec<u8>, QueueError> {
    match v {
        Value::BulkString(b) => Ok(b.clone()),
        Value::SimpleString(s) => Ok(s.clone().into_bytes()),
        Value::Int(i) => Ok(i.to_string().into_bytes()),
        other => Err(QueueError::Protocol(format!(
            "expected a string, got {other:?}"
        ))),
    }
}

pub(super) fn string(v: &Value) -> Result<String, QueueError> {
    String::from_utf8(bytes(v)?).map_err(|e| QueueError::Protocol(format!("non-UTF-8 string: {e}")))
}

pub(super) fn number(v: &Value) -> Result<u64, QueueError> {
    match v {
        Value::Int(i) => {
            u64::try_from(*i).map_err(|_| QueueError::Protocol(format!("negative number {i}")))
        }
        other => {
            let s = string(other)?;
            s.parse::<u64>()
                .or_else(|_| s.parse::<f64>().map(|f| f as u64))
                .map_err(|_| QueueError::Protocol(format!("expected a number, got {s:?}")))
        }
    }
}

/// `None` for a nil reply, else the string.
pub(super) fn optional_string(v: &Value) -> Result<Option<String>, QueueError> {
    match v {
        Value::Nil => Ok(None),
        v => string(v).map(Some),
    }
}

/// `None` for a nil reply (Lua's `false`), else the bytes.
pub(super) fn optional_bytes(v: &Value) -> Result<Option<Vec<u8>>, QueueError> {
    match v {
        Value::Nil => Ok(None),
        v => bytes(v).map(Some),
    }
}
