//! A durable handler: the checkout saga of the docs' "Durable handlers"
//! page. Charge the card, reserve the stock, (optionally sleep, or wait for
//! an approval signal), email the customer; when the stock cannot be
//! reserved, refund the charge (a compensation step) and fail for good.
//! Each step is recorded in the job's journal when it returns, so a retry
//! after the email failed does not charge the card again.
//!
//! ```json
//! {"order": 1042, "shop": "http://127.0.0.1:8080", "sleep_ms": 3600000,
//!  "approval_ms": 86400000, "email_fails": 2}
//! ```
//!
//! Every step is a POST to `<shop>/<step>?order=<order>`: 2xx is done, 409
//! on `reserve` means out of stock, anything else fails the step (the
//! attempt is retried). `email_fails` fails the email step on the job's
//! first attempts after calling the shop (a mail server that is down).
//! `{"noop": true}` acks at once (other jobs of the topic).

use std::time::Duration;

use hourglass_sdk::{Error, Job, Outcome, durable, http, info};

#[derive(serde::Deserialize)]
struct Order {
    #[serde(default)]
    noop: bool,
    #[serde(default)]
    order: u64,
    #[serde(default)]
    shop: String,
    #[serde(default)]
    sleep_ms: u64,
    #[serde(default)]
    approval_ms: Option<u64>,
    #[serde(default)]
    email_fails: u32,
}

/// POST `<shop>/<what>?order=<order>` with `body`: the answer's status and text.
fn call(o: &Order, what: &str, body: &str) -> Result<(u16, String), Error> {
    let url = format!("{}/{what}?order={}", o.shop, o.order);
    let response = http::Request::post(&url).body(body).send()?;
    Ok((response.status(), response.text().into_owned()))
}

fn done(o: &Order, what: &str, body: &str) -> Result<String, Error> {
    match call(o, what, body)? {
        (200..=299, text) => Ok(text),
        (status, text) => Err(Error::retry(format!("{what}: the shop answered {status}: {text}"))),
    }
}

fn checkout(job: Job) -> hourglass_sdk::Result<Outcome> {
    let o: Order = job.json()?;
    if o.noop {
        return Ok(Outcome::Ack);
    }
    let charge: String = durable::step("charge", || done(&o, "charge", ""))?;
    let reserved: bool = durable::step("reserve", || match call(&o, "reserve", &charge)? {
        (200..=299, _) => Ok(true),
        (409, _) => Ok(false),
        (status, text) => Err(Error::retry(format!("reserve: the shop answered {status}: {text}"))),
    })?;
    if !reserved {
        // compensation: undo the charge, once
        durable::step("refund", || done(&o, "refund", &charge))?;
        return Ok(Outcome::fail(format!("order {}: out of stock, charge {charge} refunded", o.order)));
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
