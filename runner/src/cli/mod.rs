//! The `hourglass` command line: one file per command, dispatched from here.
//!
//! Exit codes: 0 success, 1 a failure at run time (Redis, a handler),
//! 2 bad input (arguments, `queues.toml`, a payload file).

mod build;
mod cancel;
mod check;
mod dead;
mod enqueue;
mod flow;
mod inspect;
mod journal;
mod keys;
mod logs;
mod migrate;
mod new;
mod pause;
mod rollout;
mod run;
mod runners;
mod schedules;
mod signal;
mod stats;
mod upgrade;
mod usage;
mod wait;
mod when;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Delayed and retried jobs on Redis, handled by sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(
    name = "hourglass",
    version = crate::VERSION,
    propagate_version = true,
    after_help = "Usually: `hourglass check` (validate queues.toml and every handler), then \
        `hourglass run`; jobs come from `hourglass enqueue`, the Rust API or handlers' follow-ups.\n\
        Exit status: 0 success, 1 a run-time failure (Redis, a handler), 2 bad input."
)]
pub struct Cli {
    /// The configuration file.
    #[arg(
        long,
        short,
        global = true,
        env = "HOURGLASS_CONFIG",
        default_value = "queues.toml"
    )]
    pub config: PathBuf,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the jobs of every topic in queues.toml until SIGINT/SIGTERM (and the
    /// dashboard, API and /metrics if queues.toml has [http]).
    Run(RunArgs),
    /// Serve the dashboard, API and /metrics of [http] without claiming jobs
    /// (an operators' host: needs [redis] and [http], no handlers).
    Serve,
    /// Add a job to a topic.
    Enqueue(Box<enqueue::Args>),
    /// Show per-topic counts: scheduled (of them suspended), ready, running, dead.
    Stats(stats::Args),
    /// Show one job: state, attempts, due time, last error, handler version,
    /// progress (or its kept end, once it is gone).
    Inspect(inspect::Args),
    /// Print what a job's handler logged in each attempt (`--follow`: until it ends).
    Logs(logs::Args),
    /// Wait until a job ends; print its result (exit 0) or why it failed.
    Wait(wait::Args),
    /// Delete jobs wherever they are (waiting, running or dead).
    Cancel(cancel::Args),
    /// Send a signal to a durable handler's job (it may be waiting for it).
    Signal(signal::SignalArgs),
    /// Wake a suspended job now: its durable sleep ends (a wait times out).
    Wake(signal::WakeArgs),
    /// Show a job's journal: its durable steps and the effects its attempts recorded.
    Journal(journal::Args),
    /// Flows: jobs that run after the jobs they depend on (enqueue, show).
    #[command(subcommand)]
    Flow(flow::Command),
    /// The dead-letter set: list, retry or purge.
    #[command(subcommand)]
    Dead(dead::Command),
    /// Stop claiming a topic's jobs on every runner (it still accepts new ones).
    Pause(pause::Args),
    /// Claim a paused topic's jobs again.
    Resume(pause::Args),
    /// A topic's tenant keys: pause or resume one, set its weight (see
    /// `stats --by-key` to list them).
    #[command(subcommand)]
    Key(keys::Command),
    /// List the runners alive now: host, pid, version, topics, what they run.
    Runners(runners::Args),
    /// List the [[schedule]]s: what they enqueue, their next fire times, how far they got.
    Schedules(schedules::Args),
    /// What the jobs tagged with each account used: attempts, CPU, wall
    /// time, outbound bytes, per hour.
    Usage(usage::Args),
    /// List a topic's kept handler versions: role (stable, canary, pinned,
    /// retired), the live jobs its journals pin to it, attempts and failure
    /// rate of each; and the live jobs on each path of each `patched` change.
    Versions(rollout::VersionsArgs),
    /// Show a topic's rollout (canary, share, counts, window, last verdict),
    /// or promote or abort the canary by hand.
    Rollout(rollout::RolloutArgs),
    /// Serve exactly this handler version of a topic on every runner,
    /// whatever the handler file says, until `unpin`.
    Pin(rollout::PinArgs),
    /// Undo `pin`: the handler file (and its rollout policy) decide again.
    Unpin(rollout::UnpinArgs),
    /// Move in-flight journaled jobs to another version of their handler,
    /// each only if a replay check of its journal on it passes.
    Upgrade(upgrade::Args),
    /// Validate queues.toml and every handler; run nothing.
    Check,
    /// Upgrade the namespace's Redis layout to this build's: online, in
    /// bounded steps, safe to interrupt and rerun.
    Migrate(migrate::Args),
    /// Build handler projects (Rust, Python, JavaScript) and place the components in handlers_dir.
    Build(build::Args),
    /// Create a handler project (Rust, Python or JavaScript: starter handler, queues.toml) anywhere on disk.
    New(new::Args),
}

/// How a command ends badly: an error and the exit code it deserves.
#[derive(Debug)]
pub(crate) struct Exit {
    pub code: u8,
    pub error: anyhow::Error,
}

impl Exit {
    /// Bad input: exit code 2.
    pub fn input(error: impl Into<anyhow::Error>) -> Exit {
        Exit {
            code: 2,
            error: error.into(),
        }
    }
}

impl<E: Into<anyhow::Error>> From<E> for Exit {
    fn from(error: E) -> Exit {
        Exit {
            code: 1,
            error: error.into(),
        }
    }
}

/// How `run` runs.
#[derive(Debug, clap::Args)]
struct RunArgs {
    /// How many threads run heavy attempts (a handler version whose recent
    /// attempts averaged over [runner] light_cpu of CPU, 50 µs unless set, as
    /// an interpreter's fresh instance does; batch calls) and serve the API.
    /// Default: one per core.
    /// Light attempts, claiming and committing share one thread of their own
    /// (docs: Performance, "Threads").
    #[arg(long, env = "HOURGLASS_THREADS", value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    threads: Option<u16>,
}

/// Parse the arguments, run the command, report and exit.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let quiet = !matches!(cli.command, Command::Run(_) | Command::Serve);
    init_tracing(quiet);
    // `run`: one worker for the runner (claims, light attempts, commits) and
    // a pool for the rest; every other command: one worker per core
    let (workers, pool) = match &cli.command {
        Command::Run(RunArgs { threads }) => {
            match runtime(threads.map(usize::from), "hourglass-pool") {
                Ok(pool) => (Some(1), Some(pool)),
                Err(e) => {
                    eprintln!("error: cannot start the async runtime's pool: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        _ => (None, None),
    };
    let runtime = match runtime(workers, "hourglass") {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let pool_handle = pool.as_ref().map(|p| p.handle().clone());
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(_) => run::run(&cli.config, pool_handle).await,
            Command::Serve => run::serve(&cli.config).await,
            Command::Enqueue(args) => enqueue::run(&cli.config, *args).await,
            Command::Stats(args) => stats::run(&cli.config, args).await,
            Command::Inspect(args) => inspect::run(&cli.config, args).await,
            Command::Logs(args) => logs::run(&cli.config, args).await,
            Command::Wait(args) => wait::run(&cli.config, args).await,
            Command::Cancel(args) => cancel::run(&cli.config, args).await,
            Command::Signal(args) => signal::signal(&cli.config, args).await,
            Command::Wake(args) => signal::wake(&cli.config, args).await,
            Command::Journal(args) => journal::journal(&cli.config, args).await,
            Command::Flow(command) => flow::run(&cli.config, command).await,
            Command::Dead(command) => dead::run(&cli.config, command).await,
            Command::Pause(args) => pause::run(&cli.config, args, true).await,
            Command::Resume(args) => pause::run(&cli.config, args, false).await,
            Command::Key(command) => keys::run(&cli.config, command).await,
            Command::Runners(args) => runners::run(&cli.config, args).await,
            Command::Schedules(args) => schedules::run(&cli.config, args).await,
            Command::Usage(args) => usage::run(&cli.config, args).await,
            Command::Versions(args) => rollout::versions(&cli.config, args).await,
            Command::Rollout(args) => rollout::rollout(&cli.config, args).await,
            Command::Pin(args) => rollout::pin(&cli.config, args).await,
            Command::Unpin(args) => rollout::unpin(&cli.config, args).await,
            Command::Upgrade(args) => upgrade::run(&cli.config, args).await,
            Command::Check => check::run(&cli.config).await,
            Command::Migrate(args) => migrate::run(&cli.config, args).await,
            Command::Build(args) => build::run(&cli.config, args).await,
            Command::New(args) => new::run(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Exit { code, error }) => {
            eprintln!("error: {error:#}");
            ExitCode::from(code)
        }
    }
}

/// An async runtime of `workers` (default: one per core) named `name`.
fn runtime(workers: Option<usize>, name: &str) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = workers {
        builder.worker_threads(workers);
    }
    builder
        .thread_name(name)
        .enable_all()
        // a blocking thread that compiled or read a big handler holds what
        // it freed until it ends (the allocator's per-thread pages): about
        // 100 MiB for a Python and a JavaScript handler, kept 10 s by
        // default after every load or reload. Nothing on the job path
        // blocks; at most an outbound request's name lookup starts a thread
        .thread_keep_alive(std::time::Duration::from_millis(500))
        .build()
}

fn init_tracing(quiet: bool) {
    let default = if quiet {
        "warn"
    } else {
        "info,wasmtime=warn,cranelift=warn"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // colours only on a terminal, never in log files or journald
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

/// Load the configuration; an invalid one is bad input.
pub(crate) fn load_config(path: &std::path::Path) -> Result<crate::Config, Exit> {
    crate::Config::load(path).map_err(Exit::input)
}

/// The configuration as a producer or operator needs it: `[redis]` and the
/// topic names; handler files and grants are not looked at.
pub(crate) fn load_producer_config(path: &std::path::Path) -> Result<crate::Config, Exit> {
    crate::Config::load_for(path, crate::config::Check::Producer).map_err(Exit::input)
}

/// The topic called `name`. A file that names topics knows them all: an
/// unknown one is bad input naming the known ones (a typo, most likely). A
/// file with no topics (a producer's, only `[redis]`) takes any valid name.
pub(crate) fn topic_of<'c>(
    config: &'c crate::Config,
    name: &str,
) -> Result<Option<&'c crate::config::TopicConfig>, Exit> {
    if config.topics.is_empty() {
        crate::config::check_topic_name(name)
            .map_err(|why| Exit::input(anyhow::anyhow!("topic: {why}")))?;
        return Ok(None);
    }
    config.topic(name).map(Some).ok_or_else(|| {
        let known: Vec<&str> = config.topics.iter().map(|t| t.name.as_str()).collect();
        Exit::input(anyhow::anyhow!(
            "topic {name:?} is not in {} (topics: {})",
            config.path.display(),
            known.join(", ")
        ))
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        // clap's own checks (an argument named twice, e.g. a `--version`
        // clashing with the automatic one) panic at run time otherwise
        super::Cli::command().debug_assert();
    }
}
