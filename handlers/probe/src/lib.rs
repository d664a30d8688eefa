//! Does what its JSON payload asks, to show what a handler may and may not
//! do: read or write a file, read an environment variable, start follow-up
//! jobs, then ack, fail or panic. Anything refused fails the job with the
//! error the guest saw, so the dead letter says what was denied. Tests also
//! use it to leave one file per execution (`touch`), to take time (`spin_ms`,
//! `spin_us`; `work`: rounds of fixed arithmetic, a CPU measure of its own)
//! and to GET a URL (`fetch`: its status and body end up in the fail reason).
//! For results and progress: `progress` steps (reported, then slept on),
//! `chatty_ms` (report in a tight loop), `sleep_ms`, and a `result` to ack
//! with (`result_bytes` for a big one, `echo_parent` for the parent's,
//! `echo_deps` for its flow dependencies and, for a batch's callback, its
//! batch).
//! For instance reuse: `served` acks with how many jobs this instance ran.
//! For durable handlers: `steps`, each recorded (a result of `bytes` bytes)
//! under its `name`, first of all; `signal` sent to another job after them.
//! For effects journals: `stamp` reads the wall clock and random bytes,
//! `calls` makes HTTP requests in order (a body from a file, or with the
//! stamp in it), right after the steps.
//! For kept logs: `log` writes `lines` lines of about `bytes` bytes each
//! (`"attempt <n> line <i> xxx…"`) to the SDK's log, stdout or stderr
//! (`to`), right after the steps.

use hourglass_sdk::{Error, FollowUp, Job, Outcome, http, info};

#[derive(serde::Deserialize)]
struct Plan {
    #[serde(default)]
    read: Option<String>,
    #[serde(default)]
    write: Option<String>,
    #[serde(default)]
    env: Option<String>,
    #[serde(default)]
    follow_ups: Vec<Next>,
    /// A flow to create with the ack: `{"id"?, "jobs": [{"name", "topic",
    /// "payload", "after": [names]}]}`; acks with `{"flow": id}`.
    #[serde(default)]
    flow: Option<NewFlow>,
    /// A granted directory: create `<dir>/<id>.<attempt>` in it (once per execution).
    #[serde(default)]
    touch: Option<String>,
    /// Busy-wait this long.
    #[serde(default)]
    spin_ms: Option<u64>,
    /// Busy-wait this many microseconds (of wall time, like `spin_ms`).
    #[serde(default)]
    spin_us: Option<u64>,
    /// Do this many rounds of fixed arithmetic: the same CPU whatever else
    /// the machine runs, so a count of rounds is a measure of CPU that owes
    /// nothing to the host's meter.
    #[serde(default)]
    work: Option<u64>,
    /// Open a raw TCP connection to this address (host:port): what a handler
    /// without outbound HTTP would try; a refusal fails the job with the error.
    #[serde(default)]
    connect: Option<String>,
    /// GET this URL (an error retries the job with the error the guest saw).
    #[serde(default)]
    fetch: Option<String>,
    /// "ack" (the default), "fail" or "panic", after everything above.
    #[serde(default)]
    then: Option<String>,
    /// Report each step's progress, then sleep its `sleep_ms`.
    #[serde(default)]
    progress: Vec<Step>,
    /// Report progress as fast as it can for this long.
    #[serde(default)]
    chatty_ms: Option<u64>,
    /// Sleep this long (a WASI clock wait: no CPU).
    #[serde(default)]
    sleep_ms: Option<u64>,
    /// Ack with this as the result (JSON).
    #[serde(default)]
    result: Option<serde_json::Value>,
    /// Ack with this many bytes of 'x' as the result.
    #[serde(default)]
    result_bytes: Option<usize>,
    /// Ack with `{"parent": <the parent's result as JSON>}`.
    #[serde(default)]
    echo_parent: bool,
    /// Ack with `{"deps": [{name, topic, id, ended, result, reason}, ...]}`:
    /// its flow dependencies as it saw them (results as JSON).
    #[serde(default)]
    echo_deps: bool,
    /// Retry (after everything else) while the attempt is at most this.
    #[serde(default)]
    retry_first: u32,
    /// Ack with `{"served": n}`: the jobs this instance ran, this one included
    /// (1 in a fresh instance; more only where the topic reuses instances).
    #[serde(default)]
    served: bool,
    /// Durable steps to record, in order.
    #[serde(default)]
    steps: Vec<Recorded>,
    /// A signal to send (to a durable job) after the steps.
    #[serde(default)]
    signal: Option<Signal>,
    /// Read the wall clock and 16 random bytes: logged, and in the retry
    /// reason and the result (`{"stamp": ...}`).
    #[serde(default)]
    stamp: bool,
    /// HTTP requests to make in order, after the stamp: a status of 400 or
    /// more, or no response, retries the job with what came back.
    #[serde(default)]
    calls: Vec<Call>,
    /// Lines to log, right after the steps.
    #[serde(default)]
    log: Option<Lines>,
}

#[derive(serde::Deserialize)]
struct Lines {
    lines: usize,
    #[serde(default)]
    bytes: usize,
    /// "log" (the SDK's `info`, the default), "stdout" or "stderr".
    #[serde(default)]
    to: Option<String>,
}

#[derive(serde::Deserialize)]
struct Call {
    #[serde(default = "post")]
    method: String,
    url: String,
    #[serde(default)]
    body: String,
    /// Send the contents of this (granted) file as the body.
    #[serde(default)]
    body_file: Option<String>,
    /// Put the stamp in the body.
    #[serde(default)]
    with_stamp: bool,
}

fn post() -> String {
    "POST".into()
}

/// The wall clock in ns and 16 random bytes, as text.
fn stamp() -> hourglass_sdk::Result<String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| Error::fail(format!("clock: {e}")))?
        .as_nanos();
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(|e| Error::fail(format!("random: {e}")))?;
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("{now}-{hex}"))
}

#[derive(serde::Deserialize)]
struct Signal {
    topic: String,
    id: String,
    name: String,
    #[serde(default)]
    payload: String,
}

#[derive(serde::Deserialize)]
struct Recorded {
    name: String,
    #[serde(default)]
    bytes: usize,
}

/// Jobs this instance ran: state a job leaves behind in the instance.
static SERVED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

#[derive(serde::Deserialize)]
struct Step {
    #[serde(default)]
    percent: Option<u8>,
    #[serde(default)]
    detail: Option<serde_json::Value>,
    #[serde(default)]
    sleep_ms: u64,
}

#[derive(serde::Deserialize)]
struct NewFlow {
    #[serde(default)]
    id: Option<String>,
    jobs: Vec<FlowJobPlan>,
}

#[derive(serde::Deserialize)]
struct FlowJobPlan {
    name: String,
    topic: String,
    #[serde(default)]
    payload: serde_json::Value,
    #[serde(default)]
    after: Vec<String>,
}

#[derive(serde::Deserialize)]
struct Next {
    topic: String,
    payload: String,
    #[serde(default)]
    delay_ms: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    unique_for_ms: Option<u64>,
    #[serde(default)]
    with_parent_result: bool,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    expires_in_ms: Option<u64>,
    #[serde(default)]
    priority: Option<u8>,
}

fn probe(job: Job) -> hourglass_sdk::Result<Outcome> {
    let served = SERVED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let plan: Plan = job.json()?;
    for s in &plan.steps {
        // no log line: bench/durable-cost measures what a step costs
        hourglass_sdk::durable::step_bytes(&s.name, || Ok(vec![b'x'; s.bytes]))?;
    }
    if let Some(l) = &plan.log {
        for i in 0..l.lines {
            let head = format!("attempt {} line {i} ", job.attempt());
            let line = format!("{head}{}", "x".repeat(l.bytes.saturating_sub(head.len())));
            match l.to.as_deref() {
                Some("stdout") => println!("{line}"),
                Some("stderr") => eprintln!("{line}"),
                _ => info!("{line}"),
            }
        }
    }
    let stamped = match plan.stamp {
        true => {
            let s = stamp()?;
            info!("stamp {s}");
            Some(s)
        }
        false => None,
    };
    for call in &plan.calls {
        let mut body = match &call.body_file {
            Some(path) => std::fs::read(path).map_err(|e| Error::fail(format!("read {path}: {e}")))?,
            None => call.body.clone().into_bytes(),
        };
        if call.with_stamp {
            body.extend_from_slice(stamped.as_deref().unwrap_or("-").as_bytes());
        }
        let response = http::Request::new(&call.method, &call.url).body(body).send();
        match response {
            Ok(r) if r.status() < 400 => info!("{} {}: {}", call.method, call.url, r.status()),
            Ok(r) => {
                return Ok(Outcome::retry_in(
                    std::time::Duration::from_millis(50),
                    format!("{} {} answered {}", call.method, call.url, r.status()),
                ));
            }
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(s) = &plan.signal {
        hourglass_sdk::durable::signal(&s.topic, &s.id, &s.name, s.payload.as_bytes())?;
        info!("signalled {}/{} {}", s.topic, s.id, s.name);
    }
    for step in &plan.progress {
        match &step.detail {
            Some(detail) => hourglass_sdk::progress_detail(step.percent, detail)?,
            None => hourglass_sdk::progress(step.percent.unwrap_or(0))?,
        }
        std::thread::sleep(std::time::Duration::from_millis(step.sleep_ms));
    }
    if let Some(ms) = plan.chatty_ms {
        let start = std::time::Instant::now();
        let mut reports = 0u64;
        while start.elapsed() < std::time::Duration::from_millis(ms) {
            hourglass_sdk::progress_detail(Some((reports % 101) as u8), &serde_json::json!({ "n": reports }))?;
            reports += 1;
        }
        info!("reported progress {reports} times");
    }
    if let Some(ms) = plan.sleep_ms {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    if let Some(ms) = plan.spin_ms {
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(ms) {
            std::hint::spin_loop();
        }
    }
    if let Some(us) = plan.spin_us {
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_micros(us) {
            std::hint::spin_loop();
        }
    }
    if let Some(rounds) = plan.work {
        // an LCG the compiler cannot fold away: its result is logged
        let mut x = job.attempt() as u64 | 1;
        for _ in 0..rounds {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407));
        }
        hourglass_sdk::debug!("worked {rounds} rounds: {x}");
    }
    if let Some(dir) = &plan.touch {
        let path = format!("{dir}/{}.{}", job.id(), job.attempt());
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::fail(format!("touch {path}: {e}")))?;
    }
    if let Some(path) = &plan.read {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::fail(format!("read {path}: {e}")))?;
        info!("read {path}: {text}");
    }
    if let Some(path) = &plan.write {
        std::fs::write(path, job.id()).map_err(|e| Error::fail(format!("write {path}: {e}")))?;
        info!("wrote {path}");
    }
    if let Some(name) = &plan.env {
        let value = std::env::var(name).map_err(|e| Error::fail(format!("env {name}: {e}")))?;
        info!("env {name}={value}");
    }
    let mut queued = Vec::new();
    for next in plan.follow_ups {
        let mut f = FollowUp::new(next.topic, next.payload.into_bytes());
        if let Some(ms) = next.delay_ms {
            f = f.delay(std::time::Duration::from_millis(ms));
        }
        if let Some(id) = next.id {
            f = f.id(id);
        }
        if let Some(ms) = next.unique_for_ms {
            f = f.unique_for(std::time::Duration::from_millis(ms));
        }
        if next.with_parent_result {
            f = f.with_parent_result();
        }
        if let Some(key) = next.key {
            f = f.key(key);
        }
        if let Some(ms) = next.expires_in_ms {
            f = f.expires_in(std::time::Duration::from_millis(ms));
        }
        if let Some(p) = next.priority {
            f = f.priority(p);
        }
        let id = f.enqueue()?;
        info!("follow-up {id} queued");
        queued.push(id);
    }
    let mut created = None;
    if let Some(new) = plan.flow {
        let mut flow = hourglass_sdk::Flow::new();
        if let Some(id) = new.id {
            flow = flow.id(id);
        }
        for j in new.jobs {
            flow = flow.job_after(&j.name, &j.topic, &j.payload, &j.after)?;
        }
        let id = flow.enqueue()?;
        info!("flow {id} queued");
        queued.push(id.clone());
        created = Some(id);
    }
    if let Some(addr) = &plan.connect {
        std::net::TcpStream::connect(addr.as_str())
            .map_err(|e| Error::fail(format!("connect {addr}: {e}")))?;
        info!("connected to {addr}");
    }
    let mut fetched = String::new();
    if let Some(url) = &plan.fetch {
        let response = http::get(url)?;
        fetched = format!("; fetched {} {}", response.status(), response.text());
        info!("fetched {url}{fetched}");
    }
    if job.attempt() <= plan.retry_first {
        let stamp = stamped.as_ref().map_or(String::new(), |s| format!("; stamp {s}"));
        let queued = match queued.is_empty() {
            true => String::new(),
            false => format!("; follow-ups {}", queued.join(",")),
        };
        return Ok(Outcome::retry_in(
            std::time::Duration::from_millis(100),
            format!("asked to retry attempt {}{fetched}{queued}{stamp}", job.attempt()),
        ));
    }
    if let Some(s) = &stamped {
        return Outcome::ack_json(&serde_json::json!({ "stamp": s }));
    }
    match plan.then.as_deref() {
        Some("fail") => return Err(Error::fail(format!("asked to fail{fetched}"))),
        Some("panic") => panic!("asked to panic"),
        _ => {}
    }
    if plan.served {
        return Outcome::ack_json(&serde_json::json!({ "served": served }));
    }
    if plan.echo_deps {
        let mut deps = Vec::new();
        for d in job.dependencies() {
            let result: Option<serde_json::Value> = d.json()?;
            deps.push(serde_json::json!({
                "name": d.name, "topic": d.topic, "id": d.id,
                "ended": format!("{:?}", d.ended).to_lowercase(),
                "result": result, "reason": d.reason,
            }));
        }
        let batch = job.batch().map(|b| {
            serde_json::json!({
                "id": b.id, "jobs": b.jobs, "acked": b.acked, "dead": b.dead,
                "cancelled": b.cancelled, "failed": b.failed,
            })
        });
        return Outcome::ack_json(&serde_json::json!({ "deps": deps, "batch": batch }));
    }
    if let Some(flow) = created {
        return Outcome::ack_json(&serde_json::json!({ "flow": flow }));
    }
    if plan.echo_parent {
        let parent: Option<serde_json::Value> = job.parent_json()?;
        return Outcome::ack_json(&serde_json::json!({ "parent": parent }));
    }
    if let Some(n) = plan.result_bytes {
        return Ok(Outcome::ack_with(vec![b'x'; n]));
    }
    match &plan.result {
        Some(result) => Outcome::ack_json(result),
        None => Ok(Outcome::Ack),
    }
}

hourglass_sdk::handler!(probe);
