//! The next version of `order_cancel`, with the kind of bug a deploy ships:
//! a field renamed in the handler (`customer_id`) but not in the producers'
//! payloads (`customer`). Every job fails with "payload is not the expected
//! JSON". The demo rolls it out under a canary and watches it rolled back.

use hourglass_sdk::{Job, Outcome, info};

#[derive(serde::Deserialize)]
struct OrderCancel {
    order_id: u64,
    customer_id: String,
    amount_cents: u64,
}

fn cancel(job: Job) -> hourglass_sdk::Result<Outcome> {
    let order: OrderCancel = job.json()?;
    info!(
        "cancelled order {} of {} ({} cents)",
        order.order_id, order.customer_id, order.amount_cents
    );
    Ok(Outcome::Ack)
}

hourglass_sdk::handler!(cancel);
