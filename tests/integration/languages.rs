//! Handlers in Python and JavaScript: the probes on each SDK (built by
//! test-support exactly as `hourglass build` builds a project) ack, retry
//! with a delay, fail, record an exception's type and message, start
//! follow-ups, log with their attempt's tags and call out over HTTP; bare
//! components' exceptions are read from their stderr; the pool runs a
//! Python topic at full concurrency and refuses at load what cannot fit;
//! the Python and JavaScript examples; `hourglass new`, `build` and `check`
//! for each language in a folder outside the repository.

use std::time::Duration;

use test_support::components::{JS_SDK_PROBE, PY_PROBE};

const WAIT: Duration = Duration::from_secs(60);

/// Each SDK's probe: (topic, component file, component, the exception type
/// its "raise" plan throws, the plan key that throws).
const PROBES: [(&str, &str, &str, &str, &str); 2] = [
    ("py", "py_probe.wasm", PY_PROBE, "ValueError", "raise"),
    (
        "js",
        "js_sdk_probe.wasm",
        JS_SDK_PROBE,
        "RangeError",
        "throw",
    ),
];

mod projects;
mod sdk;
