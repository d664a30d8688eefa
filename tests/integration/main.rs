//! hourglass integration tests: a real redis-server per test (started on a
//! free port, killed on drop), real wasmtime, real components built from
//! `handlers/` by the `test-support` crate.
//!
//! Index:
//! - `util`: the redis-server guard, project fixtures, runner and event helpers,
//!   `eventually` (wait for a condition with a deadline), `RunnerProcess`.
//! - `pipeline`: the Redis state changes with a controlled clock (no runner).
//! - `time_index`: the time index against a model; bulk enqueues in its buckets;
//!   how few calls a plain topic's claims and acks make.
//! - `browse`: a topic's jobs by state over the API, paged from a cursor
//!   (100,000 dead letters), filtered; bulk actions; the read-only token.
//! - `batched`: handlers that take jobs in batches: calls per `max`, outcomes per job, traps, `wait`.
//! - `job_priority`: priority within a topic: higher first, due order within one, never early.
//! - `expiry`: jobs not started by their deadline: dead-lettered or dropped unrun, counted.
//! - `jobs`: ack, delay (never early), retry, dead-letter, idempotent enqueue, end to end.
//! - `limits`: traps, time limit, memory limit; a stopped handler pins no worker.
//! - `openapi`: the API's OpenAPI description generated, committed, served
//!   and validated.
//! - `priority`: strict priority across topics.
//! - `producers`: the Python and TypeScript producer packages built, checked
//!   and run through their own suites against a live runner.
//! - `crash`: a runner killed with SIGKILL mid-job loses nothing; graceful shutdown.
//! - `faults`: a runner killed under load, redis-server restarted under load, Redis
//!   unreachable at start and for 15 s mid-run, SIGTERM with jobs in flight.
//! - `deploy`: deploy/queues.toml passes `check`, the systemd unit passes
//!   `systemd-analyze verify`, the Dockerfile's health check against a runner.
//! - `durable`: durable handlers: steps replayed after a failure and a SIGKILL,
//!   durable sleeps (no slot held, `wake`), signals, limits, pins, cancel.
//! - `effects`: effects journals: a plain handler retried or SIGKILLed between
//!   two calls sends each once; clocks and random replay; divergence, the body
//!   cap, `hourglass journal`; Python, JavaScript, Redis Cluster.
//! - `durable_upgrade`: journaled jobs moved to a new version by a replay check
//!   (Rust and Python: movable, a renamed step, `patched`), a changed request
//!   on an effects journal, a stale check.
//! - `held_versions`: a version that holds jobs survives `keep_versions`; a
//!   promotion under `journaled = "replay"`; the upgrade and versions routes.
//! - `failover`: a Redis primary SIGKILLed under a producer and a runner, a
//!   replica promoted by three sentinels: jobs lost with and without
//!   `durability`, jobs run twice, time to recover; Sentinel with AUTH.
//! - `layout`: the Redis layout version: a layout-1 namespace refused by
//!   commands and waited for by a runner until `hourglass migrate`; a newer
//!   one refused; a new one stamped by the first producer and runner; a
//!   rolling upgrade from a real layout-2 build under load.
//! - `leases`: a live runner keeps the leases of attempts that wait past
//!   them (its pool stopped by ptrace): each job runs once; a killed one does not.
//! - `reload`: handlers and queues.toml changed under a running runner; the compile cache.
//! - `grants`: no files or environment without a grant; reachable with one.
//! - `http`: outbound HTTP behind per-topic grants, its limits, the webhook
//!   handler, a JavaScript component importing wasi:http, grants reloaded live.
//! - `follow_ups`: follow-up jobs exactly when the parent acks; the outbox sweep.
//! - `input`: odd and bad payloads and ids: stored unchanged or refused clearly.
//! - `ops`: cancel, dead list/retry/purge, pause/resume, dead-letter retention.
//! - `security`: AUTH (password, ACL user), TLS with a private CA, mutual TLS.
//! - `cluster`: the pipeline on a 3-master Redis Cluster; two runners sharing topics.
//! - `cli`: the binary: bad queues.toml, check, enqueue, inspect, the log.
//! - `runners`: heartbeats: live runners listed, a killed one drops out.
//! - `scale`: what autoscalers read: the read against a model, the API and
//!   gauges, the suggestion following the attempt time, scaling from zero.
//! - `api`: the HTTP API, /metrics and health: every route valid and invalid,
//!   authentication, bulk enqueue, a Redis outage as 503, metrics that match.
//! - `dashboard`: the console in a headless Chromium: every view from its
//!   URL, counts, pause, a dead letter retried from its page; 100 topics and
//!   100,000 dead letters paged from a cursor.
//! - `console`: the console's durable job page, flow graph, bulk retry, keys
//!   and the read-only token.
//! - `tenants`: tenant keys in Redis alone: turns, weights, switching modes.
//! - `tenant_limits`: per-key concurrency and rate, pausing a key, in Redis alone.
//! - `fairness`: many tenants with real runners: shares by jobs and by CPU,
//!   per-key limits across runners and on a Cluster.
//! - `tenant_ops`: tenant keys over the CLI and the API; follow-ups' keys.
//! - `scheduling`: weights, rate limits across runners, cron and `every`
//!   schedules with `missed`, unique-for and replace.
//! - `rollout`: handler versions rolled out under a canary: rolled back, promoted,
//!   two runner processes, a SIGKILL mid-rollout; pins; replay on a version.
//! - `rollout_api`: the same over HTTP: versions, promote, abort, pin, enqueue and
//!   dead-letter replay on a version, the rollout counters in /metrics, the
//!   dashboard's Versions panel in a headless Chromium.
//! - `reuse`: instance reuse: state kept across jobs only under `reuse` (Rust,
//!   Python, JavaScript); dropped after `jobs`, a trap, a limit, idleness, a new version;
//!   memory images made at load.
//! - `languages`: Python and JavaScript handlers on their SDKs and bare, the
//!   pool at full concurrency, the examples, `new` + `build` + `check` per language.
//! - `reproducible`: a project built twice, and in another folder, gives the
//!   same component (Rust, Python, JavaScript).
//! - `metering`: each attempt's CPU, memory and calls; `cpu` limits; accounts.
//! - `story`: a job's story and logs kept with it, its dead letter and its
//!   kept end; bounded; a lost lease in the story; nothing left by a plain ack.
//! - `results`: results, progress and waiting in three languages; 2,000 API
//!   waiters (in `results::alone`, run alone by `scripts/test`).
//! - `rollout_runners`: runners whose handler folders differ: no canary of a
//!   replaced version, and a runner lacking the stable version says so.
//! - `standards`: W3C Trace Context outbound, the OTLP variables, the CLI's
//!   enqueue span, /metrics negotiated and checked by promtool, jobs' views.
//! - `threads`: where `hourglass run` runs attempts: a light handler's on the
//!   runner's own thread, a heavy one's on the pool (metrics and thread CPU).
//! - `traces`: OpenTelemetry spans from the producer through attempts, outbound
//!   calls and follow-ups, exported to a real OTLP receiver.
//! - `upgrade`: the previous release (built from git) upgraded on live state
//!   of every kind, a mixed fleet of both builds under load, and a layout-2
//!   namespace migrated by this build.
//! - `warm_up`: run first and alone by `scripts/test`: every test component
//!   compiled once into the run's shared compile cache.

mod api;
mod batched;
mod batches;
mod browse;
mod cli;
mod cluster;
mod console;
mod crash;
mod dashboard;
mod deploy;
mod durable;
mod durable_upgrade;
mod effects;
mod expiry;
mod failover;
mod fairness;
mod faults;
mod flow_crash;
mod flow_failover;
mod flow_handlers;
mod flows;
mod follow_ups;
mod grants;
mod held_versions;
mod http;
mod input;
mod job_priority;
mod jobs;
mod languages;
mod layout;
mod leases;
mod limits;
mod metering;
mod openapi;
mod ops;
mod pipeline;
mod priority;
mod producers;
mod reload;
mod reproducible;
mod results;
mod reuse;
mod rollout;
mod rollout_api;
mod rollout_runners;
mod runners;
mod scale;
mod scheduling;
mod security;
mod standards;
mod story;
mod tenant_limits;
mod tenant_ops;
mod tenants;
mod threads;
mod time_index;
mod traces;
mod upgrade;
mod util;
mod warm_up;
