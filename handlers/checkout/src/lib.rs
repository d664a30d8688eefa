//! A durable handler: the checkout saga of the docs' "Durable handlers"
//! page. Charge the card, reserve the stock, (optionally sleep, or wait for
//! an approval signal), email the customer; when the stock cannot be
//! reserved, refund the charge (a compensation step) and fail for good.
//! Each step is recorded in the job's journal when it returns, so a retry
//! after the email failed does not charge the card again. Its next
//! versions (`checkout_v2`, `_v3`, `_v4`) are the docs' "Changing durable
//! code" page.
//!
//! ```json
//! {"order": 1042, "shop": "http://127.0.0.1:8080", "sleep_ms": 3600000,
//!  "approval_ms": 86400000, "email_fails": 2, "notice": true}
//! ```
//!
//! Every step is a POST to `<shop>/<step>?order=<order>`: 2xx is done, 409
//! on `reserve` means out of stock, anything else fails the step (the
//! attempt is retried). `email_fails` fails the email step on the job's
//! first attempts after calling the shop (a mail server that is down).
//! `notice` posts `<shop>/notice` before the sleep, outside any step.
//! `{"noop": true}` acks at once (other jobs of the topic).

use std::time::Duration;

use hourglass_sdk::{Error, Job, Outcome, durable, info};

mod shop;
use shop::{Order, done, reserve};

fn checkout(job: Job) -> hourglass_sdk::Result<Outcome> {
    let o: Order = job.json()?;
    if o.noop {
        return Ok(Outcome::Ack);
    }
    let charge: String = durable::step("charge", || done(&o, "charge", ""))?;
    let reserved: bool = durable::step("reserve", || reserve(&o, "reserve", &charge))?;
    if !reserved {
        // compensation: undo the charge, once
        durable::step("refund", || done(&o, "refund", &charge))?;
        return Ok(Outcome::fail(format!("order {}: out of stock, charge {charge} refunded", o.order)));
    }
    if o.notice {
        done(&o, "notice", "waiting")?;
    }
    if o.sleep_ms > 0 {
        // the first time, the attempt ends here; after the sleep, it returns at once
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
    info!("order {}: charged {charge}, reserved, emailed (attempt {})", o.order, job.attempt());
    Ok(Outcome::Ack)
}

hourglass_sdk::handler!(checkout);
