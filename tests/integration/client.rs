//! The producer crate stays small: a service that only enqueues does not
//! compile wasmtime.

use std::process::Command;

#[test]
fn client_crate_does_not_depend_on_wasmtime() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .args(["tree", "-p", "hourglass-client", "-e", "normal,build"])
        .args(["--prefix", "none", "--locked", "--offline"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cargo} tree: {e}"));
    let tree = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(tree.contains("redis v"), "not the client's tree:\n{tree}");
    let heavy: Vec<&str> = tree
        .lines()
        .filter(|l| {
            ["wasmtime", "cranelift", "hourglass v", "wasi"]
                .iter()
                .any(|c| l.starts_with(c))
        })
        .collect();
    assert!(heavy.is_empty(), "hourglass-client pulls in {heavy:?}");
}
