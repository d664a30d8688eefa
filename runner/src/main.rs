//! The `hourglass` binary: see `hourglass --help`.

fn main() -> std::process::ExitCode {
    hourglass::cli::main()
}
