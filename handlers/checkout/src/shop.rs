//! What every version of the checkout saga shares: the order a job
//! carries and the calls to the shop. Each version (`checkout`,
//! `checkout_v2`, ...) includes this file and writes its own saga.

use hourglass_sdk::{Error, http};

#[derive(serde::Deserialize)]
pub struct Order {
    #[serde(default)]
    pub noop: bool,
    #[serde(default)]
    pub order: u64,
    #[serde(default)]
    pub shop: String,
    #[serde(default)]
    pub sleep_ms: u64,
    #[serde(default)]
    pub approval_ms: Option<u64>,
    #[serde(default)]
    pub email_fails: u32,
    /// Tell the shop the order waits (a plain call, outside any step: on a
    /// steps journal it is made on every attempt, on an effects journal it
    /// is recorded and replayed).
    #[serde(default)]
    pub notice: bool,
}

/// POST `<shop>/<what>?order=<order>` with `body`: the answer's status and text.
pub fn call(o: &Order, what: &str, body: &str) -> Result<(u16, String), Error> {
    let url = format!("{}/{what}?order={}", o.shop, o.order);
    let response = http::Request::post(&url).body(body).send()?;
    Ok((response.status(), response.text().into_owned()))
}

/// [`call`], which must answer 2xx: its text.
pub fn done(o: &Order, what: &str, body: &str) -> Result<String, Error> {
    match call(o, what, body)? {
        (200..=299, text) => Ok(text),
        (status, text) => Err(Error::retry(format!("{what}: the shop answered {status}: {text}"))),
    }
}

/// The reservation: true when reserved, false when out of stock (409).
pub fn reserve(o: &Order, what: &str, charge: &str) -> Result<bool, Error> {
    match call(o, what, charge)? {
        (200..=299, _) => Ok(true),
        (409, _) => Ok(false),
        (status, text) => Err(Error::retry(format!("{what}: the shop answered {status}: {text}"))),
    }
}
