//! What the harness asks the redis-server it started: counters, memory,
//! version, and a clean slate between workloads. Its connections have no
//! response timeout: a synchronous FLUSHALL of millions of jobs takes seconds.

use redis::aio::MultiplexedConnection;

/// A connection of its own (for a caller that asks often, e.g. a drain's watch).
pub async fn conn(url: &str) -> anyhow::Result<MultiplexedConnection> {
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

/// The command that counts `key`'s entries (hash fields, zset or set
/// members, list items), for its type; None for a missing key or another type.
pub async fn count_command(
    conn: &mut MultiplexedConnection,
    key: &str,
) -> anyhow::Result<Option<&'static str>> {
    let kind: String = redis::cmd("TYPE").arg(key).query_async(conn).await?;
    Ok(match kind.as_str() {
        "hash" => Some("HLEN"),
        "zset" => Some("ZCARD"),
        "set" => Some("SCARD"),
        "list" => Some("LLEN"),
        _ => None,
    })
}

/// How many entries `key` holds, counted with `command` (see [`count_command`]).
pub async fn count(
    conn: &mut MultiplexedConnection,
    command: &str,
    key: &str,
) -> anyhow::Result<u64> {
    Ok(redis::cmd(command).arg(key).query_async(conn).await?)
}

/// The first key matching `pattern` that holds exactly `n` entries, and the
/// command that counts them; `preferred` is tried before the others.
pub async fn key_holding(
    url: &str,
    preferred: &str,
    pattern: &str,
    n: u64,
) -> anyhow::Result<Option<(String, &'static str)>> {
    let mut conn = conn(url).await?;
    if let Some(command) = holds(&mut conn, preferred, n).await? {
        return Ok(Some((preferred.to_owned(), command)));
    }
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await?;
        for key in keys {
            if let Some(command) = holds(&mut conn, &key, n).await? {
                return Ok(Some((key, command)));
            }
        }
        if next == 0 {
            return Ok(None);
        }
        cursor = next;
    }
}

/// The command that counts `key`'s entries, if it holds exactly `n`.
async fn holds(
    conn: &mut MultiplexedConnection,
    key: &str,
    n: u64,
) -> anyhow::Result<Option<&'static str>> {
    match count_command(conn, key).await? {
        Some(command) if count(conn, command, key).await? == n => Ok(Some(command)),
        _ => Ok(None),
    }
}

/// Microseconds Redis spent in scripts so far (`INFO commandstats`: the
/// `usec` of `evalsha` and `eval`): precise, unlike the process's CPU ticks.
pub async fn script_usec(url: &str) -> anyhow::Result<f64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn(url).await?)
        .await?;
    Ok(info
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split(',')
                .find_map(|kv| kv.split_once("usec=").map(|(_, v)| v))
        })
        .filter_map(|v| v.parse::<f64>().ok())
        .sum())
}
