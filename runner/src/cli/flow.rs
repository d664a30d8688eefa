//! `hourglass flow enqueue FILE`, `show ID`, `cancel ID`, and for batches
//! `add ID FILE`, `seal ID`: jobs that depend on jobs (the client's `flow`
//! module holds how).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use anyhow::anyhow;

use super::when::when;
use super::{Exit, load_producer_config};
use crate::clock::now_ms;
use crate::flow_file;
use crate::flow_file::{state, to_json};
use crate::redis::flow::{CallbackKind, FlowView, Policy, check_flow_id};
use crate::redis::{QueueError, connect};

#[derive(Debug, clap::Subcommand)]
pub(super) enum Command {
    /// Create a flow from a file (JSON, or TOML for a .toml file; - reads
    /// JSON from standard input): all of it or nothing; its roots are
    /// enqueued now, each other job once every job it waits for has ended.
    #[command(after_help = "A flow file:\n  \
        {\"id\": \"album-7\", \"jobs\": [\n    \
        {\"name\": \"thumb-1\", \"topic\": \"thumbs\", \"payload\": {\"photo\": 1}},\n    \
        {\"name\": \"thumb-2\", \"topic\": \"thumbs\", \"payload\": {\"photo\": 2}},\n    \
        {\"name\": \"publish\", \"topic\": \"albums\", \"after\": [\"thumb-1\", {\"name\": \"thumb-2\", \"policy\": \"ignore\"}]}]}\n\
        A job runs once every job in its `after` has ended: with `require` (the default) \
        it is dead-lettered unrun if one of those was not acked; with `ignore` it runs \
        anyway and sees how each ended (`dependencies()` in the SDKs). Each job's id in \
        its topic is FLOW/NAME. At most 10,000 jobs.\n\
        A batch: jobs that wait for nothing and callbacks that wait for all of them:\n  \
        {\"id\": \"import-9\", \"jobs\": [{\"name\": \"chunk-1\", \"topic\": \"rows\", \"payload\": \"1-100\"}],\n   \
        \"on_complete\": {\"topic\": \"emails\", \"payload\": \"summary\"}, \"on_success\": {\"topic\": \"emails\"}, \"open\": true}\n\
        on_complete runs when every job has ended; on_success only if none was dead-lettered \
        (else it is skipped). Each reads the batch's counts and failed ids (`batch()` in the \
        SDKs). An open batch takes more jobs (`flow add`) until `flow seal`.\n\
        Exit status: 0 created, 1 a run-time failure (Redis), 2 bad input (a cycle, an \
        unknown dependency or topic, an id in use: nothing is enqueued).\n\n\
        Example: hourglass flow enqueue album.json")]
    Enqueue {
        /// The flow file, or - for JSON on standard input.
        file: String,
        /// The flow's id (overrides the file's; default: generated).
        #[arg(long)]
        id: Option<String>,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add jobs to an open batch: all of them or none, enqueued now.
    #[command(
        after_help = "The file lists the jobs as a flow file does (none may have \
        `after`): {\"jobs\": [{\"name\": \"chunk-2\", \"topic\": \"rows\", \"payload\": \"101-200\"}]}\n\
        Refused (nothing added): no such batch, a flow that is not a batch, a sealed or \
        cancelled batch, a name in use, more than 10,000 jobs in all.\n\
        Exit status: 0 added, 1 Redis failed, 2 bad input or refused.\n\n\
        Example: hourglass flow add import-9 more.json"
    )]
    Add {
        /// The batch's id.
        id: String,
        /// The jobs file, or - for JSON on standard input.
        file: String,
    },
    /// Seal an open batch: no job can be added, and its callbacks run once
    /// its jobs have ended (at once if they have).
    #[command(after_help = "Sealing a sealed batch changes nothing.\n\
        Exit status: 0 sealed, 1 Redis failed, 2 bad input (not a batch), 3 no such flow.\n\n\
        Example: hourglass flow seal import-9")]
    Seal {
        /// The batch's id.
        id: String,
    },
    /// Cancel a flow: every job of it that has not started is cancelled
    /// (running ones finish, their outcome discarded).
    #[command(
        after_help = "Jobs still waiting for others end as cancelled in the flow; \
        jobs already in their topics are cancelled there as `hourglass cancel` does (their \
        ends kept on topics that keep results). Running again finishes a cancel cut short.\n\
        Exit status: 0 cancelled, 1 Redis failed, 2 bad input, 3 no such flow.\n\n\
        Example: hourglass flow cancel album-7"
    )]
    Cancel {
        /// The flow's id.
        id: String,
    },
    /// Show a flow: each job with its topic, what it waits for and its state.
    #[command(
        after_help = "States: waiting (for the jobs it names), enqueued (in its \
        topic: scheduled, running or retrying; `hourglass inspect TOPIC ID` says which), \
        acked, dead, cancelled.\n\
        Exit status: 0 shown, 1 Redis failed, 2 bad input, 3 no such flow (or it ended \
        longer ago than flows are kept, 7 days).\n\n\
        Example: hourglass flow show album-7"
    )]
    Show {
        /// The flow's id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub(super) async fn run(config: &Path, command: Command) -> Result<(), Exit> {
    match command {
        Command::Enqueue { file, id, json } => enqueue(config, &file, id, json).await,
        Command::Show { id, json } => show(config, &id, json).await,
        Command::Cancel { id } => cancel(config, &id).await,
        Command::Add { id, file } => add(config, &id, &file).await,
        Command::Seal { id } => seal(config, &id).await,
    }
}

async fn add(config: &Path, id: &str, file: &str) -> Result<(), Exit> {
    check_flow_id(id).map_err(|e| Exit::input(anyhow!(e)))?;
    let config = load_producer_config(config)?;
    let text = read_file(file)?;
    let toml = Path::new(file).extension().is_some_and(|e| e == "toml");
    let jobs = flow_file::parse_jobs(&text, toml)
        .map_err(|e| Exit::input(anyhow!("jobs file {file}: {e}")))?;
    flow_file::check_added(&jobs, &config)
        .map_err(|e| Exit::input(anyhow!("jobs file {file}: {e}")))?;
    let (queue, _embedded) = connect(&config).await?;
    match queue.flows().add(id, &jobs, now_ms()).await {
        Ok(_) => {
            println!("added {} jobs to batch {id}", jobs.len());
            Ok(())
        }
        Err(QueueError::Invalid(why)) => Err(Exit::input(anyhow!(why))),
        Err(e) => Err(e.into()),
    }
}

async fn seal(config: &Path, id: &str) -> Result<(), Exit> {
    check_flow_id(id).map_err(|e| Exit::input(anyhow!(e)))?;
    let config = load_producer_config(config)?;
    let (queue, _embedded) = connect(&config).await?;
    match queue.flows().seal(id, now_ms()).await {
        Ok(Some(_)) => {
            println!("sealed batch {id}");
            Ok(())
        }
        Ok(None) => Err(Exit {
            code: 3,
            error: anyhow!("no flow {id} (or it ended longer ago than flows are kept)"),
        }),
        Err(QueueError::Invalid(why)) => Err(Exit::input(anyhow!(why))),
        Err(e) => Err(e.into()),
    }
}

/// The text of `file`, or standard input for `-`.
fn read_file(file: &str) -> Result<String, Exit> {
    if file == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Exit::input(anyhow!("reading standard input: {e}")))?;
        Ok(text)
    } else {
        std::fs::read_to_string(file).map_err(|e| Exit::input(anyhow!("reading {file}: {e}")))
    }
}

async fn cancel(config: &Path, id: &str) -> Result<(), Exit> {
    check_flow_id(id).map_err(|e| Exit::input(anyhow!(e)))?;
    let config = load_producer_config(config)?;
    let (queue, _embedded) = connect(&config).await?;
    let keep = |topic: &str| config.topic(topic).and_then(|t| t.results).map(|r| r.keep);
    match queue.flows().cancel(id, now_ms(), &keep).await? {
        Some(n) => {
            println!(
                "cancelled flow {id} ({n} jobs cancelled in their topics, the rest before they were enqueued)"
            );
            Ok(())
        }
        None => Err(Exit {
            code: 3,
            error: anyhow!("no flow {id} (or it ended longer ago than flows are kept)"),
        }),
    }
}

async fn enqueue(config: &Path, file: &str, id: Option<String>, json: bool) -> Result<(), Exit> {
    let config = load_producer_config(config)?;
    let text = read_file(file)?;
    let toml = Path::new(file).extension().is_some_and(|e| e == "toml");
    let mut spec =
        flow_file::parse(&text, toml).map_err(|e| Exit::input(anyhow!("flow file {file}: {e}")))?;
    if let Some(id) = id {
        spec.set_id(id);
    }
    flow_file::check_against(&spec, &config)
        .map_err(|e| Exit::input(anyhow!("flow file {file}: {e}")))?;
    let what = match spec {
        flow_file::Description::Flow(_) => "flow",
        flow_file::Description::Batch(_) => "batch",
    };
    let plan = spec
        .plan()
        .map_err(|e| Exit::input(anyhow!("flow file {file}: {e}")))?;
    let (queue, _embedded) = connect(&config).await?;
    let new = match queue.flows().create(&plan, now_ms()).await {
        Ok(new) => new,
        Err(QueueError::Invalid(why) | QueueError::Exists(why)) => {
            return Err(Exit::input(anyhow!(why)));
        }
        Err(e) => return Err(e.into()),
    };
    let roots: usize = new.values().sum();
    if json {
        let answer = serde_json::json!({
            "id": plan.id,
            "jobs": plan.jobs.len(),
            "enqueued": new,
        });
        println!("{answer}");
    } else {
        println!(
            "created {what} {} ({} jobs; {roots} enqueued now, the rest as they become ready)",
            plan.id,
            plan.jobs.len()
        );
    }
    Ok(())
}

async fn show(config: &Path, id: &str, json: bool) -> Result<(), Exit> {
    check_flow_id(id).map_err(|e| Exit::input(anyhow!(e)))?;
    let config = load_producer_config(config)?;
    let (queue, _embedded) = connect(&config).await?;
    let Some(flow) = queue.flows().show(id).await? else {
        return Err(Exit {
            code: 3,
            error: anyhow!("no flow {id} (or it ended longer ago than flows are kept)"),
        });
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&flow)).expect("JSON")
        );
    } else {
        print!("{}", draw(&flow, now_ms()));
    }
    Ok(())
}

/// The flow in layers: each job under the deepest of the jobs it waits for,
/// with its topic, state and what it waits for.
fn draw(flow: &FlowView, now: u64) -> String {
    let n = flow.jobs.len();
    // depth = 1 + the deepest dependency, in topological order (descriptions
    // are acyclic: checked at creation)
    let mut depth = vec![0usize; n];
    let mut left: Vec<usize> = flow.jobs.iter().map(|j| j.after.len()).collect();
    let mut dependents = vec![Vec::new(); n];
    for (i, j) in flow.jobs.iter().enumerate() {
        for &(p, _) in &j.after {
            dependents[p as usize].push(i);
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| left[i] == 0).collect();
    while let Some(i) = ready.pop() {
        for &m in &dependents[i] {
            depth[m] = depth[m].max(depth[i] + 1);
            left[m] -= 1;
            if left[m] == 0 {
                ready.push(m);
            }
        }
    }
    // a batch's callbacks wait for every job (their dependencies are counted,
    // not listed)
    let members = flow.jobs.iter().any(|j| j.callback.is_none());
    for (i, j) in flow.jobs.iter().enumerate() {
        if j.callback.is_some() && members {
            depth[i] = 1;
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (depth[i], i));
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for j in &flow.jobs {
        *counts.entry(state(j)).or_default() += 1;
    }
    let summary: Vec<String> = counts.iter().map(|(s, c)| format!("{c} {s}")).collect();
    let what = match flow.batch.as_deref() {
        Some("open") => "batch (open: jobs can be added)",
        Some(_) => "batch",
        None => "flow",
    };
    let mut out = format!(
        "{what} {}: {n} jobs ({}), created {}{}\n",
        flow.id,
        summary.join(", "),
        when(flow.created_ms, now),
        flow.cancelled_ms
            .map(|c| format!(", cancelled {}", when(c, now)))
            .unwrap_or_default()
            + &flow
                .done_ms
                .map(|d| format!(", done {}", when(d, now)))
                .unwrap_or_default()
    );
    let width = flow.jobs.iter().map(|j| j.name.len()).max().unwrap_or(0);
    let topic_width = flow.jobs.iter().map(|j| j.topic.len()).max().unwrap_or(0);
    let mut layer = usize::MAX;
    for i in order {
        let j = &flow.jobs[i];
        if depth[i] != layer {
            layer = depth[i];
            out.push_str(&format!("  layer {layer}\n"));
        }
        let mark = match state(j) {
            "acked" => "✓",
            "dead" => "✗",
            "cancelled" => "-",
            "enqueued" => "▶",
            _ => "…",
        };
        let after = if let Some(kind) = j.callback {
            match kind {
                CallbackKind::Complete => "  after every job".to_owned(),
                CallbackKind::Success => "  after every job, if none is dead".to_owned(),
            }
        } else if j.after.is_empty() {
            String::new()
        } else {
            let names: Vec<String> = j
                .after
                .iter()
                .map(|&(p, policy)| {
                    let name = &flow.jobs[p as usize].name;
                    match policy {
                        Policy::Require => name.clone(),
                        Policy::Ignore => format!("{name} (ignore)"),
                    }
                })
                .collect();
            format!("  after {}", names.join(", "))
        };
        let why = j
            .reason
            .as_deref()
            .map(|r| format!("  ({r})"))
            .unwrap_or_default();
        let line = format!(
            "    {mark} {:<width$}  {:<topic_width$}  {:<9}{after}{why}",
            j.name,
            j.topic,
            state(j)
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
