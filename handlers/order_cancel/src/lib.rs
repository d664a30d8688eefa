//! Cancels an unpaid order: a realistic JSON payload, a permanent failure for
//! bad input and a retry for a transient one.

use hourglass_sdk::{Error, Job, Outcome, info, warn};

#[derive(serde::Deserialize)]
struct OrderCancel {
    order_id: u64,
    customer: String,
    amount_cents: u64,
    #[serde(default)]
    reason: Option<String>,
}

fn cancel(job: Job) -> hourglass_sdk::Result<Outcome> {
    let order: OrderCancel = job.json()?;
    if order.amount_cents == 0 {
        return Err(Error::fail(format!("order {} has no amount", order.order_id)));
    }
    if order.customer.is_empty() {
        warn!("order {} has no customer; trying later", order.order_id);
        return Ok(Outcome::retry("customer record not yet available"));
    }
    info!(
        "cancelled order {} of {} ({}.{:02}), reason: {}",
        order.order_id,
        order.customer,
        order.amount_cents / 100,
        order.amount_cents % 100,
        order.reason.as_deref().unwrap_or("unpaid")
    );
    Ok(Outcome::Ack)
}

hourglass_sdk::handler!(cancel);
