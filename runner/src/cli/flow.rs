//! `hourglass flow enqueue FILE` and `hourglass flow show ID`: jobs that
//! depend on jobs (the client's `flow` module holds how).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use anyhow::anyhow;

use super::when::when;
use super::{Exit, load_producer_config};
use crate::clock::now_ms;
use crate::flow_file;
use crate::flow_file::{state, to_json};
use crate::redis::flow::{FlowView, Policy, check_flow_id};
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
    let text = if file == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| Exit::input(anyhow!("reading the flow from standard input: {e}")))?;
        text
    } else {
        std::fs::read_to_string(file)
            .map_err(|e| Exit::input(anyhow!("reading flow file {file}: {e}")))?
    };
    let toml = Path::new(file).extension().is_some_and(|e| e == "toml");
    let mut spec =
        flow_file::parse(&text, toml).map_err(|e| Exit::input(anyhow!("flow file {file}: {e}")))?;
    if id.is_some() {
        spec.id = id;
    }
    flow_file::check_against(&spec, &config)
        .map_err(|e| Exit::input(anyhow!("flow file {file}: {e}")))?;
    let plan = spec
        .plan(flow_file::new_id)
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
            "created flow {} ({} jobs; {roots} enqueued now, the rest as they become ready)",
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
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (depth[i], i));
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for j in &flow.jobs {
        *counts.entry(state(j)).or_default() += 1;
    }
    let summary: Vec<String> = counts.iter().map(|(s, c)| format!("{c} {s}")).collect();
    let mut out = format!(
        "flow {}: {n} jobs ({}), created {}{}\n",
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
        let after = if j.after.is_empty() {
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
        let line = format!(
            "    {mark} {:<width$}  {:<topic_width$}  {:<9}{after}",
            j.name,
            j.topic,
            state(j)
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
