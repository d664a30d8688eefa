//! W3C trace context carried with a job (<https://www.w3.org/TR/trace-context/>):
//! the producer's `traceparent` and `tracestate`, stored in the job's record
//! only when given (a few dozen bytes), handed to every attempt and to the
//! job's follow-ups.

/// A job's trace context: whose span its attempts continue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// `00-<trace id: 32 hex>-<parent span id: 16 hex>-<flags: 2 hex>`.
    pub traceparent: String,
    /// Vendors' entries, as the header carries them (may be empty).
    pub tracestate: String,
}

/// The longest `tracestate` kept (the specification's 32 entries of at most
/// 256 characters fit; a longer one is refused rather than cut).
pub const MAX_TRACESTATE: usize = 8192;

impl TraceContext {
    /// Check `traceparent` (and `tracestate`, if any) as the W3C specification
    /// writes them; the error says what is wrong.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Result<TraceContext, String> {
        let traceparent = traceparent.trim();
        let bad = |why: &str| {
            Err(format!(
                "traceparent {traceparent:?} {why}: expected 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>"
            ))
        };
        let parts: Vec<&str> = traceparent.split('-').collect();
        let hex = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if parts.len() < 4 || !hex(parts[0], 2) || parts[0] == "ff" {
            return bad("has no valid version");
        }
        if parts[0] == "00" && parts.len() != 4 {
            return bad("has too many parts");
        }
        if !hex(parts[1], 32) || parts[1].bytes().all(|b| b == b'0') {
            return bad("has no valid trace id");
        }
        if !hex(parts[2], 16) || parts[2].bytes().all(|b| b == b'0') {
            return bad("has no valid parent span id");
        }
        if !hex(parts[3], 2) {
            return bad("has no valid flags");
        }
        let tracestate = tracestate.unwrap_or("").trim();
        if tracestate.len() > MAX_TRACESTATE
            || tracestate.bytes().any(|b| !(0x20..0x7f).contains(&b))
        {
            return Err(format!(
                "tracestate is not printable ASCII of at most {MAX_TRACESTATE} characters"
            ));
        }
        Ok(TraceContext {
            traceparent: parts[..4].join("-"),
            tracestate: tracestate.to_owned(),
        })
    }

    /// The trace id (32 hex digits).
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The span id of the producer's span (16 hex digits).
    pub fn span_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// The trace flags as the producer sent them (W3C Trace Context Level
    /// 2: `01` sampled, `02` random trace id; the other bits are kept).
    pub fn flags(&self) -> u8 {
        u8::from_str_radix(&self.traceparent[53..55], 16).unwrap_or(0)
    }

    /// Whether the producer sampled the trace (flag 01).
    pub fn sampled(&self) -> bool {
        self.flags() & 1 == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_specifications_example_parses_and_bad_ones_say_why() {
        let t = TraceContext::parse(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            Some("congo=t61rcWkgMzE"),
        )
        .unwrap();
        assert_eq!(t.trace_id(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(t.span_id(), "b7ad6b7169203331");
        assert!(t.sampled());
        assert_eq!(t.flags(), 0x01);
        assert_eq!(t.tracestate, "congo=t61rcWkgMzE");
        let random = TraceContext::parse(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03",
            None,
        )
        .unwrap();
        assert_eq!((random.flags(), random.sampled()), (0x03, true));
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
        ] {
            assert!(TraceContext::parse(bad, None).is_err(), "{bad:?}");
        }
        // a future version may carry more parts: the first four are kept
        let future = TraceContext::parse(
            "cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x",
            None,
        )
        .unwrap();
        assert_eq!(
            future.traceparent,
            "cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        );
    }
}
