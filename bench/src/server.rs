//! What the harness asks the redis-server it started: counters, memory,
//! version, and a clean slate between workloads. Its connections have no
//! response timeout: a synchronous FLUSHALL of millions of jobs takes seconds.

use redis::aio::MultiplexedConnection;

async fn conn(url: &str) -> anyhow::Result<MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    Ok(client
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

/// (all calls, script calls) so far, from `INFO commandstats`.
pub async fn commandstats(url: &str) -> anyhow::Result<(f64, f64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn(url).await?)
        .await?;
    let (mut all, mut scripts) = (0.0, 0.0);
    for line in info.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let calls: f64 = rest
            .split(',')
            .find_map(|kv| kv.strip_prefix("calls="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        all += calls;
        if matches!(
            name,
            "evalsha" | "eval" | "evalsha_ro" | "eval_ro" | "fcall"
        ) {
            scripts += calls;
        }
    }
    Ok((all, scripts))
}

/// A numeric field of `INFO section`.
pub async fn info(url: &str, section: &str, field: &str) -> anyhow::Result<f64> {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query_async(&mut conn(url).await?)
        .await?;
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("INFO {section} has no {field}"))
}

/// Delete everything, synchronously (so memory readings that follow are clean).
pub async fn flush(url: &str) -> anyhow::Result<()> {
    let _: () = redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query_async(&mut conn(url).await?)
        .await?;
    Ok(())
}

/// The server's version.
pub async fn version(url: &str) -> anyhow::Result<String> {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn(url).await?)
        .await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .trim()
        .to_owned())
}

/// CPU time (user + system, µs) a process has used, from /proc.
pub fn cpu_micros(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // the fields after the command name (which may hold spaces) in parentheses
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) * 10_000.0 // USER_HZ is 100 on Linux
}
