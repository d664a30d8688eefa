//! The first pass of `scripts/test`, alone: every test component compiled
//! once into the run's shared compile cache (`util::shared_compile_cache`),
//! so the tests after it, in parallel, load the Python and JavaScript
//! components (tens of seconds of cranelift each in a debug build) from the
//! cache instead of compiling them side by side on two cores.

use std::path::Path;

use hourglass::wasm::Runtime;
use test_support::components::{
    ALL, JS_PROBE, JS_SDK_PROBE, NOOP, NOTIFY, PY_PROBE, PY_RAW_PROBE, REFUND,
};

use crate::util::shared_compile_cache;

#[test]
fn every_test_component_compiles_into_the_shared_cache_and_then_loads_from_it() {
    let big = [
        ("noop", NOOP),
        ("js_probe", JS_PROBE),
        ("js_sdk_probe", JS_SDK_PROBE),
        ("py_probe", PY_PROBE),
        ("py_raw_probe", PY_RAW_PROBE),
        ("refund", REFUND),
        ("notify", NOTIFY),
    ];
    let every: Vec<(&str, &str)> = ALL.into_iter().chain(big).collect();
    let dir = shared_compile_cache();
    let load_all = |runtime: &Runtime| {
        for (name, path) in &every {
            runtime
                .load(Path::new(path))
                .unwrap_or_else(|e| panic!("{name} ({path}) does not load: {e}"));
        }
    };
    let first = Runtime::new(1, Some(dir)).expect("a runtime with the shared cache");
    load_all(&first);
    let (hits, misses) = first.cache_stats().expect("the cache is in use");
    assert_eq!(hits + misses, every.len(), "one lookup per component");
    eprintln!(
        "{misses} of {} components compiled, {hits} already cached",
        every.len()
    );
    drop(first);
    let second = Runtime::new(1, Some(dir)).expect("a runtime with the shared cache");
    load_all(&second);
    assert_eq!(
        second.cache_stats(),
        Some((every.len(), 0)),
        "every component from the cache the second time"
    );
}
