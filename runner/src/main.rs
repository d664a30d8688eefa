//! The `hourglass` binary: see `hourglass --help`.

/// mimalloc rather than glibc's malloc: every job allocates and frees its
/// attempt's records on two threads, which glibc's arenas paid for with
/// consolidation and lock contention (about a tenth of the runner's CPU).
/// Its v2 (Cargo.toml): v3 kept far more freed memory resident (a runner
/// with a Python and a JavaScript topic: 300 MiB idle against v2's 135).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    hourglass::cli::main()
}
