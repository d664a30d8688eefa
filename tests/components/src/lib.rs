//! Paths of the example handler components, built from `handlers/` for
//! wasm32-wasip2 by this crate's build script. Tests use these constants.

include!(concat!(env!("OUT_DIR"), "/components.rs"));

/// Every handler component as (name, path).
pub const ALL: [(&str, &str); 6] = [
    ("echo", ECHO),
    ("flaky", FLAKY),
    ("order_cancel", ORDER_CANCEL),
    ("slow", SLOW),
    ("panic", PANIC),
    ("membomb", MEMBOMB),
];
