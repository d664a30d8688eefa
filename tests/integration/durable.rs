//! Durable handlers: steps recorded in a job's journal survive failures and
//! a SIGKILL; durable sleeps hold no slot and end early on `hourglass wake`;
//! signals before and after the wait, timeouts, signals to no job; limits
//! and repeated names; a journal pins its job across a deploy and a canary;
//! cancel; a runner restarted while jobs sleep. The `checkout` handler is
//! the docs' saga: each step is a POST to a real local HTTP server that
//! counts calls.

use std::time::Duration;

use hourglass::redis::Queue;
use test_support::{HttpServer, Reply};

use crate::util::{Project, Running, eventually};

fn topics(server: &HttpServer, extra: &str) -> String {
    format!(
        "[[topic]]\nname = \"checkout\"\nhandler = \"checkout.wasm\"\nmax_attempts = 5\n\
         timeout = \"3s\"\nbackoff = {{ base = \"50ms\", max = \"50ms\", jitter = 0.0 }}\n\
         grants = {{ http = [\"{}\"] }}\n{extra}\n",
        server.url()
    )
}

/// A shop answering every call, a project whose checkout topic has `extra`
/// lines (and `more` after the topic), its queue, and a runner serving it.
async fn serving(runner: &str, extra: &str, more: &str) -> (HttpServer, Project, Queue, Running) {
    let shop = HttpServer::start(vec![Reply::status(200, "ch_1")]);
    let project = Project::new(runner, &format!("{}{more}", topics(&shop, extra)));
    let queue = project.queue().await;
    let running = Running::start(project.config()).await;
    (shop, project, queue, running)
}

/// How many calls the shop got for each step, in step order.
fn calls(server: &HttpServer) -> [usize; 5] {
    let received = server.received();
    let n = |step: &str| {
        received
            .iter()
            .filter(|r| r.path.starts_with(&format!("/{step}?")))
            .count()
    };
    [
        n("charge"),
        n("reserve"),
        n("email"),
        n("approved"),
        n("refund"),
    ]
}

fn order(server: &HttpServer, extra: &str) -> String {
    format!(r#"{{"order": 1042, "shop": "{}"{extra}}}"#, server.url())
}

/// Wait until job `id` of checkout is suspended (a durable sleep or wait).
async fn until_suspended(queue: &Queue, id: &str) {
    let keys = queue.keys("checkout");
    eventually(Duration::from_secs(30), "the job suspended", || async {
        match queue.journal(&keys, id).await.unwrap() {
            (_, Some(waits)) => Ok(waits),
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
}

async fn journal_exists(queue: &Queue, id: &str) -> bool {
    let keys = queue.keys("checkout");
    queue.journal(&keys, id).await.unwrap().0.is_some()
}

mod deploys;
mod sleeps;
mod steps;
