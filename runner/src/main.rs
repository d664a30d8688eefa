//! The `hourglass` binary: see `hourglass --help`.

/// mimalloc rather than glibc's malloc: every job allocates and frees its
/// attempt's records on two threads, which glibc's arenas paid for with
/// consolidation and lock contention (about a tenth of the runner's CPU).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    hourglass::cli::main()
}
