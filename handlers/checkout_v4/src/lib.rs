//! `checkout_v3`'s rename guarded by `patched` (docs: "Changing durable
//! code"): a job whose journal was written past this point without the
//! change (on `checkout` or `checkout_v2`) gets `false` and keeps its
//! `reserve` step; a new job gets `true` and runs `reserve-stock`. So the
//! replay check of an old job passes and `hourglass upgrade` moves it.

use std::time::Duration;

use hourglass_sdk::{Error, Job, Outcome, durable, info};

#[path = "../../checkout/src/shop.rs"]
mod shop;
use shop::{Order, done, reserve};

fn checkout(job: Job) -> hourglass_sdk::Result<Outcome> {
    let o: Order = job.json()?;
    if o.noop {
        return Ok(Outcome::Ack);
    }
    let charge: String = durable::step("charge", || done(&o, "charge", ""))?;
    let reserved: bool = if durable::patched("reserve-stock")? {
        durable::step("reserve-stock", || reserve(&o, "reserve-stock", &charge))?
    } else {
        // the old path, for jobs that recorded `reserve` before this change
        durable::step("reserve", || reserve(&o, "reserve", &charge))?
    };
    if !reserved {
        durable::step("refund", || done(&o, "refund", &charge))?;
        return Ok(Outcome::fail(format!("order {}: out of stock, charge {charge} refunded", o.order)));
    }
    // new in v2: code between steps may change freely if it calls nothing live
    info!("order {}: charged {charge} and reserved; waiting", o.order);
    if o.notice {
        done(&o, "notice", "waiting for the warehouse")?;
    }
    if o.sleep_ms > 0 {
        durable::sleep(Duration::from_millis(o.sleep_ms));
    }
    if let Some(timeout) = o.approval_ms {
        match durable::wait_for_signal("approved", Duration::from_millis(timeout))? {
            Some(by) => {
                let by = String::from_utf8_lossy(&by).into_owned();
                durable::step("approved", || done(&o, "approved", &by))?;
            }
            None => {
                durable::step("refund", || done(&o, "refund", &charge))?;
                return Ok(Outcome::fail(format!("order {}: not approved in time, refunded", o.order)));
            }
        }
    }
    durable::step("email", || {
        let sent = done(&o, "email", &charge)?;
        if job.attempt() <= o.email_fails {
            return Err(Error::retry(format!("email: the mail server is down (attempt {})", job.attempt())));
        }
        Ok(sent)
    })?;
    // new in v2: a step after the sleep, which moved jobs run too
    durable::step("receipt", || done(&o, "receipt", &charge))?;
    info!("order {}: charged {charge}, reserved, emailed, receipt sent (attempt {})", o.order, job.attempt());
    Ok(Outcome::Ack)
}

hourglass_sdk::handler!(checkout);
