//! Progress: how far a long attempt has got, for whoever watches the job
//! (`hourglass inspect`, the API and its event stream, the dashboard).
//!
//! Report as often as is convenient: the runner keeps the latest report and
//! writes a few per second at most.

use crate::Error;
use crate::bindings::hourglass::handler::report;

/// Report `percent` done (0–100; more is taken as 100).
pub fn progress(percent: u8) -> Result<(), Error> {
    report::progress(Some(percent), None).map_err(Error::fail)
}

/// Report a percentage (optional) and `detail`, a value that serializes to
/// a JSON object of at most 4 KiB (e.g. `{"page": 3, "of": 12}`).
pub fn progress_detail<T: serde::Serialize + ?Sized>(
    percent: Option<u8>,
    detail: &T,
) -> Result<(), Error> {
    let detail = serde_json::to_string(detail)
        .map_err(|e| Error::fail(alloc::format!("progress detail: {e}")))?;
    report::progress(percent, Some(&detail)).map_err(Error::fail)
}
