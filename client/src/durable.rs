//! Durable answers, opt-in: a state change someone is told about is
//! confirmed on replicas before the answer is given.
//!
//! Redis replicates asynchronously: a primary that dies right after
//! answering can take the change with it, and the replica promoted in its
//! place never saw it. With [`Durability`], every script that changes a
//! job's state is followed by `WAIT replicas timeout` **in the same round
//! trip, on the same connection** (one pipeline: the script, then `WAIT`), so
//! the count `WAIT` answers is about this script's write and the writes
//! before it on that connection, never about a connection opened later to a
//! new primary. Fewer replicas than asked within the timeout is
//! [`QueueError::NotReplicated`]: retryable, and the change may or may not
//! survive a failover, so callers repeat it (every such script is
//! idempotent: enqueue by id answers `duplicate` for a job already live,
//! an ack or burial repeated finds the job gone).

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, ScriptInvocation, Value};

use super::connect::Conn;
use super::{Durability, Queue, QueueError};

/// A connection that appends `WAIT` to every command it sends and remembers
/// the smallest count of replicas that confirmed.
struct Confirming {
    conn: Conn,
    wait: Cmd,
    confirmed: Option<i64>,
}

impl Confirming {
    fn note(&mut self, wait: &Value) -> redis::RedisResult<()> {
        let n = i64::from_redis_value_ref(wait)?;
        self.confirmed = Some(self.confirmed.map_or(n, |c| c.min(n)));
        Ok(())
    }
}

impl ConnectionLike for Confirming {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            // only a script's run changes state; `SCRIPT LOAD` (after a
            // NOSCRIPT) must go alone, so a cluster sends it to every master
            // (in a pipeline with a keyless WAIT it would reach a random node)
            if !is_script_run(cmd) {
                return self.conn.req_packed_command(cmd).await;
            }
            let mut pipe = Pipeline::with_capacity(2);
            pipe.add_command(cmd.clone()).add_command(self.wait.clone());
            let mut values = self.conn.req_packed_commands(&pipe, 0, 2).await?;
            let (Some(wait), Some(answer)) = (values.pop(), values.pop()) else {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "a command and WAIT answered fewer than two replies",
                )));
            };
            if let Value::ServerError(e) = answer {
                return Err(e.into());
            }
            self.note(&wait)?;
            Ok(answer)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut pipe = pipeline.clone();
            pipe.add_command(self.wait.clone());
            let mut values = self
                .conn
                .req_packed_commands(&pipe, offset, count + 1)
                .await?;
            let wait = values.pop().unwrap_or(Value::Nil);
            self.note(&wait)?;
            Ok(values)
        })
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

/// Whether `cmd` runs a script (`EVALSHA` or `EVAL`).
fn is_script_run(cmd: &Cmd) -> bool {
    matches!(
        cmd.args_iter().next(),
        Some(redis::Arg::Simple(name))
            if name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL")
    )
}

impl Queue {
    /// The same connection, confirming every state change on replicas.
    pub fn with_durability(mut self, durability: Option<Durability>) -> Queue {
        self.durability = durability;
        self
    }

    /// The replicas this connection waits for, if any.
    pub fn durability(&self) -> Option<Durability> {
        self.durability
    }

    /// Run `inv`; with durability on, confirm its write on the replicas in
    /// the same round trip, or fail with [`QueueError::NotReplicated`].
    pub(super) async fn invoke_durable<T: FromRedisValue>(
        &self,
        inv: &ScriptInvocation<'_>,
    ) -> Result<T, QueueError> {
        let Some(durability) = self.durability else {
            return Ok(inv.invoke_async(&mut self.conn.clone()).await?);
        };
        let mut conn = self.confirming(durability);
        let answer: T = inv.invoke_async(&mut conn).await?;
        check(durability, conn.confirmed)?;
        Ok(answer)
    }

    /// Run `inv` and report the replicas' confirmation separately, so the
    /// caller can undo what an unconfirmed answer would have handed out.
    pub(super) async fn invoke_then_confirm<T: FromRedisValue>(
        &self,
        inv: &ScriptInvocation<'_>,
    ) -> Result<(T, Result<(), QueueError>), QueueError> {
        let Some(durability) = self.durability else {
            return Ok((inv.invoke_async(&mut self.conn.clone()).await?, Ok(())));
        };
        let mut conn = self.confirming(durability);
        let answer: T = inv.invoke_async(&mut conn).await?;
        Ok((answer, check(durability, conn.confirmed)))
    }

    fn confirming(&self, durability: Durability) -> Confirming {
        let mut wait = redis::cmd("WAIT");
        wait.arg(durability.replicas)
            .arg(durability.timeout.as_millis().max(1) as u64);
        Confirming {
            conn: self.conn.clone(),
            wait,
            confirmed: None,
        }
    }
}

fn check(durability: Durability, confirmed: Option<i64>) -> Result<(), QueueError> {
    let confirmed = confirmed.unwrap_or(0).max(0) as u32;
    if confirmed >= durability.replicas {
        Ok(())
    } else {
        Err(QueueError::NotReplicated {
            wanted: durability.replicas,
            confirmed,
            timeout: durability.timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::is_script_run;

    #[test]
    fn only_script_runs_wait_for_replicas() {
        assert!(is_script_run(redis::cmd("EVALSHA").arg("abc").arg(0)));
        assert!(is_script_run(redis::cmd("evalsha").arg("abc").arg(0)));
        assert!(is_script_run(redis::cmd("EVAL").arg("return 1").arg(0)));
        // a SCRIPT LOAD goes alone: on a cluster, to every master
        assert!(!is_script_run(
            redis::cmd("SCRIPT").arg("LOAD").arg("return 1")
        ));
        assert!(!is_script_run(&redis::cmd("PING")));
    }
}
