//! `patched(name)` and `deprecate-patch(name)`: changes to durable code
//! that old jobs must not take.
//!
//! A job that meets `patched(name)` while it is still replaying its
//! journal (the code that wrote it went past this point) gets false: it
//! keeps the old path. One that meets it anew (nothing recorded lies ahead:
//! a new job, or one past the end of its journal) gets true. The answer is
//! written to the journal (`p:<name>`, fenced like a step) the first time,
//! so it never changes for the job; `hourglass versions` counts the live
//! jobs on each path. A replay check answers the same and writes nothing.

use super::Host;
use super::durable::{check_over, own_name};
use crate::wasm::ledger::End;

impl Host {
    /// What `patched(name)` answers.
    pub(super) async fn patch(&mut self, name: String) -> wasmtime::Result<Result<bool, String>> {
        if self.ctx.check.as_ref().is_some_and(|l| l.has_ended()) {
            return Err(check_over());
        }
        if let Err(e) = super::follow_up::in_one_job(&self.ctx, "ask for patches") {
            return Ok(Err(e));
        }
        if let Err(e) = own_name("patch", &name) {
            return Ok(Err(e));
        }
        if let Some(&new_path) = self.durable.journal.patches.get(&name) {
            return Ok(Ok(new_path));
        }
        let new_path = !self.replaying();
        if self.ctx.check.is_none() {
            let adds = name.len() + 1;
            if let Err(e) = self.fits(&format!("patch {name:?}"), adds) {
                return Ok(Err(e));
            }
            let c = self.ctx.clone();
            let write = self
                .durable
                .store
                .record_patch(&c.topic, &c.id, c.attempt, &c.handler, &name, new_path);
            match write.await {
                Ok(true) => self.spent(adds),
                Ok(false) => {
                    return Ok(Err(format!(
                        "patch {name:?} not recorded: this attempt no longer owns the job (its lease expired or it was cancelled)"
                    )));
                }
                Err(e) => return Ok(Err(format!("patch {name:?} not recorded: {e}"))),
            }
        }
        // kept, so that the attempt asks the journal the same again
        self.durable.journal.patches.insert(name, new_path);
        Ok(Ok(new_path))
    }

    /// What `deprecate-patch(name)` answers: refused for a job on the old path.
    pub(super) fn deprecated(&mut self, name: String) -> wasmtime::Result<Result<(), String>> {
        if self.ctx.check.as_ref().is_some_and(|l| l.has_ended()) {
            return Err(check_over());
        }
        if let Err(e) = own_name("patch", &name) {
            return Ok(Err(e));
        }
        let why = match self.durable.journal.patches.get(&name) {
            Some(true) => return Ok(Ok(())),
            Some(false) => "its journal says it took the old path",
            None if self.replaying() => {
                "its journal was written past this point by code without the change"
            }
            None => return Ok(Ok(())),
        };
        let message = format!(
            "patch {name:?} is deprecated in version {}, whose code has no old path, and this job needs it: {why}",
            self.ctx.handler
        );
        if let Some(ledger) = &self.ctx.check {
            ledger.end(End::Differs(message));
            return Err(check_over());
        }
        Ok(Err(format!(
            "{message} (run it on the version it is pinned to)"
        )))
    }
}
