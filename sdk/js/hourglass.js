// hourglass for JavaScript handlers: a thin layer over the contract
// (wit/handler.wit) as componentize-js binds it. `hourglass build` keeps this
// file in the project, at the version of the hourglass that builds; edit the
// handler, not this file.
//
//   import { handler, retryIn, fail, followUp, log } from './hourglass.js';
//
//   export const handle = handler(async (job) => {
//     const order = job.json();
//     if (!order.id) return fail('no order id');            // dead letter, with this reason
//     const res = await fetch('https://orders.example.com/cancel', {
//       method: 'POST', body: JSON.stringify(order), headers: { 'content-type': 'application/json' },
//     });
//     if (res.status === 429 || res.status >= 500) {
//       return retryIn(retryAfter(res) ?? 30, `order service: ${res.status}`);
//     }
//     followUp('notify', { order: order.id }, { id: `notify-${order.id}` });
//     log.info(`cancelled order ${order.id}`);
//     // returning nothing (or ack()) acks the job
//   });
//
// A handler returns nothing or ack() to ack, result(value) to ack with a
// result for whoever waits on the job (topics with `results` in queues.toml),
// progress(percent, detail) tells watchers how far it has got;
// retry(...) / retryIn(...) to try
// again, fail(...) to dead-letter; throwing Retry or Fail does the same from
// anywhere below it. Any other exception is a failed attempt (retried with the
// topic's backoff, dead-lettered when attempts run out) whose recorded reason
// is the exception's name and message; its stack goes to the runner's log.
// fetch() reaches only the hosts the topic is granted in queues.toml.
//
// Durable handlers: `await step(name, fn)` runs fn once for the job and
// records its result (JSON) in the job's journal; a later attempt gets it
// back without running fn. sleep(seconds) and waitForSignal(name, timeout)
// end the attempt there (no attempt used, no slot held); the job runs again
// from the top when the time or the signal comes, and its steps replay.
//
//   const charge = await step('charge', () => chargeCard(order));
//   sleep(3600);                                   // an hour, holding no slot
//   await step('email', () => sendReceipt(order, charge));

import { log as hostLog } from 'hourglass:handler/log@0.1.0';
import {
  enqueue, enqueueUnique, enqueueWithResult, enqueueKeyed, enqueueWith, enqueueFlow,
} from 'hourglass:handler/follow-up@0.1.0';
import {
  setResult, progress as hostProgress, parentResult, dependencies as hostDependencies,
  batch as hostBatch,
} from 'hourglass:handler/report@0.1.0';
import {
  beginStep, recordStep, sleep as hostSleep, sleepUntil as hostSleepUntil,
  waitForSignal as hostWaitForSignal, signal as hostSignal,
} from 'hourglass:handler/durable@0.1.0';

/** bytes as they are, a string as UTF-8, anything else as JSON. */
function toBytes(value) {
  if (value instanceof Uint8Array) return value;
  if (typeof value === 'string') return new TextEncoder().encode(value);
  return new TextEncoder().encode(JSON.stringify(value));
}

// one decoder for every job: making one costs a JavaScript job about as much
// as the rest of its SDK work
const STRICT_UTF8 = new TextDecoder('utf-8', { fatal: true });

/** One attempt of one job. */
export class Job {
  constructor(raw) {
    this.raw = raw;
  }
  /** The job's id, unique among the live jobs of its topic. */
  get id() { return this.raw.id; }
  get topic() { return this.raw.topic; }
  /** The bytes the producer enqueued (a Uint8Array). */
  get payload() { return this.raw.payload; }
  /** Which attempt this is, from 1. */
  get attempt() { return this.raw.attempt; }
  get maxAttempts() { return this.raw.maxAttempts; }
  get isLastAttempt() { return this.raw.attempt >= this.raw.maxAttempts; }
  /** When the job was accepted, in ms since the Unix epoch. */
  get enqueuedAtMs() { return Number(this.raw.enqueuedAt); }
  /** When this attempt became due, in ms since the Unix epoch. */
  get dueAtMs() { return Number(this.raw.dueAt); }
  /** The payload as UTF-8 text; a payload that is not fails the job for good. */
  text() {
    try {
      return STRICT_UTF8.decode(this.raw.payload);
    } catch (e) {
      throw new Fail(`payload is not UTF-8: ${e.message}`);
    }
  }
  /** The payload parsed as JSON; a payload that is not JSON fails the job for good. */
  json() {
    const text = this.text();
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new Fail(`payload is not JSON: ${e.message}`);
    }
  }
  /**
   * The result (a Uint8Array) of the job that started this one with
   * followUp(..., { withResult: true }), or undefined.
   */
  get parentResult() { return parentResult() ?? undefined; }
  /** parentResult parsed as JSON (undefined without one); not JSON fails the job for good. */
  parentJson() {
    const bytes = this.parentResult;
    if (bytes === undefined) return undefined;
    try {
      return JSON.parse(new TextDecoder('utf-8').decode(bytes));
    } catch (e) {
      throw new Fail(`parent result is not JSON: ${e.message}`);
    }
  }
  /**
   * The jobs this one waits for in its flow, in the order the flow names
   * them, each with how it ended: { name, topic, id, ended ('acked', 'dead'
   * or 'cancelled'), result (a Uint8Array or undefined), reason, json() };
   * [] outside a flow.
   */
  dependencies() {
    return hostDependencies().map((d) => ({
      name: d.name,
      topic: d.topic,
      id: d.id,
      ended: d.ended,
      result: d.result ?? undefined,
      reason: d.reason ?? undefined,
      /** result parsed as JSON (undefined without one); not JSON fails the job for good. */
      json() {
        if (this.result === undefined) return undefined;
        try {
          return JSON.parse(new TextDecoder('utf-8').decode(this.result));
        } catch (e) {
          throw new Fail(`result of dependency ${d.name} is not JSON: ${e.message}`);
        }
      },
    }));
  }
  /**
   * For a batch's callback (on_complete, on_success): how the batch stands,
   * `{id, jobs, acked, dead, cancelled, failed}` (failed: the dead jobs'
   * ids); undefined for any other job.
   */
  batch() {
    const b = hostBatch();
    if (b === undefined || b === null) return undefined;
    return {
      id: b.id, jobs: b.jobs, acked: b.acked, dead: b.dead, cancelled: b.cancelled,
      failed: [...b.failed],
    };
  }
}

/** Throw to try the job again: after `seconds`, or the topic's backoff when undefined. */
export class Retry extends Error {
  constructor(reason, seconds) {
    super(String(reason));
    this.name = 'Retry';
    this.seconds = seconds;
  }
}

/** Throw to give up on the job for good: it is dead-lettered with this reason. */
export class Fail extends Error {
  constructor(reason) {
    super(String(reason));
    this.name = 'Fail';
  }
}

/** Done: the job and its payload are deleted. */
export function ack() {
  return { tag: 'ack' };
}

/**
 * Ack with `value` as the job's result (a Uint8Array as is, a string as
 * UTF-8, anything else as JSON): kept for whoever waits on the job when the
 * topic has `results`, and handed to follow-ups started with withResult.
 */
export function result(value) {
  return { tag: 'ack', result: toBytes(value) };
}

/**
 * Tell watchers how far the job has got: `percent` (0-100) and/or `detail`,
 * an object (JSON, at most 4 KiB). Call it as often as you like: the runner
 * writes a few reports a second at most.
 */
export function progress(percent, detail) {
  const pct = percent === undefined || percent === null
    ? undefined : Math.max(0, Math.min(100, Math.round(Number(percent))));
  try {
    hostProgress(pct, detail === undefined ? undefined : JSON.stringify(detail));
  } catch (e) {
    throw new Fail(`progress refused: ${e.payload ?? e.message ?? e}`);
  }
}

/** Try again after the topic's backoff; `reason` is recorded as the last error. */
export function retry(reason) {
  return { tag: 'retry', val: { delayMs: undefined, reason: String(reason) } };
}

/** Try again after `seconds` (a number); `reason` is recorded as the last error. */
export function retryIn(seconds, reason) {
  const ms = BigInt(Math.max(0, Math.round(Number(seconds) * 1000)));
  return { tag: 'retry', val: { delayMs: ms, reason: String(reason) } };
}

/** Give up now: the job goes to the dead-letter set with `reason`. */
export function fail(reason) {
  return { tag: 'fail', val: String(reason) };
}

/** A response's Retry-After header in seconds, when it is a number; else undefined. */
export function retryAfter(response) {
  const value = response.headers.get('retry-after');
  const seconds = value === null ? NaN : Number(value);
  return Number.isInteger(seconds) && seconds >= 0 ? seconds : undefined;
}

/**
 * Enqueue a job to `topic` when this attempt acks; returns its id.
 * `payload` is a Uint8Array, a string, or anything JSON.stringify takes;
 * `delay` and `uniqueFor` are seconds; `uniqueFor` (which needs `id`) keeps
 * the id taken that long even after that job is done; `withResult` hands the
 * job this attempt's result (its job.parentResult); `key` is its tenant key
 * in the target topic (without one it takes this job's); `expiresIn`
 * (seconds, more than `delay`) and it is not run unless started by then (the
 * target's on_expire; without it, the target's expire_after); `priority` 0
 * (the highest, the default) to 9 among the target's due jobs. A refusal (a
 * topic not in may_enqueue, a bad id or key, a payload over the limit, an
 * option out of range) fails the job.
 */
export function followUp(
  topic,
  payload,
  { delay, id, uniqueFor, withResult, key, expiresIn, priority } = {},
) {
  const bytes = toBytes(payload);
  const ms = (seconds) => BigInt(Math.max(0, Math.round(seconds * 1000)));
  if (priority !== undefined && !(Number.isInteger(priority) && priority >= 0 && priority <= 9)) {
    throw new Fail(`follow-up priority ${priority} is out of range: 0 (the highest) to 9`);
  }
  const job = { topic, payload: bytes, delayMs: delay === undefined ? undefined : ms(delay), id };
  const options = [key, uniqueFor, withResult || undefined, expiresIn, priority];
  try {
    // one option alone goes through the call that predates enqueueWith
    if (options.filter((o) => o !== undefined).length > 1 || expiresIn !== undefined || priority !== undefined) {
      return enqueueWith(job, {
        key: key === undefined ? undefined : String(key),
        uniqueForMs: uniqueFor === undefined ? undefined : ms(uniqueFor),
        withResult: Boolean(withResult),
        expiresInMs: expiresIn === undefined ? undefined : ms(expiresIn),
        priority,
      });
    }
    if (key !== undefined) return enqueueKeyed(job, String(key));
    if (withResult) return enqueueWithResult(job);
    if (uniqueFor === undefined) return enqueue(job);
    return enqueueUnique(job, ms(uniqueFor));
  } catch (e) {
    throw new Fail(`follow-up refused: ${e.payload ?? e.message ?? e}`);
  }
}

/**
 * Create a flow when this attempt acks (all of it with the ack, or nothing
 * if the attempt does not ack); returns its id. `jobs` as a flow file lists
 * them: `{name, topic, payload, after, maxAttempts}`, `after` holding names
 * or `{name, policy: 'require' | 'ignore'}`. A refusal (a cycle, a
 * dependency not in the flow, a topic not in may_enqueue, a payload over the
 * limit) fails the job.
 */
export function flow(jobs, { id, failFast = false } = {}) {
  const described = {
    id,
    jobs: jobs.map((j) => ({
      name: j.name,
      topic: j.topic,
      payload: toBytes(j.payload ?? new Uint8Array()),
      after: (j.after ?? []).map((d) => (typeof d === 'string'
        ? { name: d, policy: 'require' }
        : { name: d.name, policy: d.policy ?? 'require' })),
      maxAttempts: j.maxAttempts,
    })),
    failFast,
  };
  try {
    return enqueueFlow(described);
  } catch (e) {
    throw new Fail(`flow refused: ${e.payload ?? e.message ?? e}`);
  }
}

/** Milliseconds as the host takes them (u64). */
function millis(seconds) {
  return BigInt(Math.max(0, Math.round(Number(seconds) * 1000)));
}

/**
 * Run `fn` (which may be async) once for this job as step `name` and record
 * its result (as JSON) in the job's journal; on a later attempt, resolve to
 * the recorded result (as JSON.parse reads it back) without calling fn.
 * What fn throws records nothing and fails the attempt as usual. Names are
 * unique within a job: a name used twice in one attempt fails the job for
 * good, as does an empty one, one over 256 bytes or one starting with '~'.
 * A result over 256 KiB, or a journal past 4 MiB, fails the attempt naming
 * the limit.
 */
export async function step(name, fn) {
  let recorded;
  try {
    recorded = beginStep(name);
  } catch (e) {
    throw new Fail(`step refused: ${e.payload ?? e.message ?? e}`);
  }
  if (recorded !== undefined) return JSON.parse(STRICT_UTF8.decode(recorded));
  const value = await fn();
  const json = JSON.stringify(value === undefined ? null : value);
  try {
    recordStep(name, new TextEncoder().encode(json));
  } catch (e) {
    throw new Retry(e.payload ?? e.message ?? e);
  }
  return value;
}

/**
 * Sleep `seconds` without holding a slot: the attempt ends here (suspended;
 * no attempt is used) and the job runs again from the top when the time
 * comes, when this sleep returns at once. Sleeps are told apart by the order
 * they are called in.
 */
export function sleep(seconds) {
  hostSleep(millis(seconds));
}

/** sleep() until `atMs` (ms since the Unix epoch). */
export function sleepUntil(atMs) {
  hostSleepUntil(BigInt(Math.max(0, Math.round(Number(atMs)))));
}

/**
 * Wait for signal `name` (hourglass signal, the API, another handler's
 * signal()) for at most `timeout` seconds: its payload (a Uint8Array), or
 * null when the timeout passed first. Like sleep(), the attempt ends here
 * while it waits; a signal sent before the wait is kept for it.
 */
export function waitForSignal(name, timeout) {
  let got;
  try {
    got = hostWaitForSignal(name, millis(timeout));
  } catch (e) {
    throw new Fail(`wait refused: ${e.payload ?? e.message ?? e}`);
  }
  return got === undefined ? null : got;
}

/**
 * Send signal `name` with `payload` (a Uint8Array, a string or JSON) to job
 * `id` of `topic` (this topic or one in may_enqueue), now; wrap it in a
 * step() to send it once across retries.
 */
export function signal(topic, id, name, payload = new Uint8Array()) {
  try {
    hostSignal(topic, id, name, toBytes(payload));
  } catch (e) {
    throw new Retry(e.payload ?? e.message ?? e);
  }
}

/** Lines in the runner's log, tagged with topic, job and attempt. */
export const log = {
  debug: (message) => hostLog('debug', String(message)),
  info: (message) => hostLog('info', String(message)),
  warn: (message) => hostLog('warn', String(message)),
  error: (message) => hostLog('error', String(message)),
};

const OUTCOMES = new Set(['ack', 'retry', 'fail']);

/** What a handler returned (or resolved to), as the outcome the host takes. */
function settle(outcome) {
  if (outcome === undefined || outcome === null) return ack();
  if (typeof outcome === 'object' && outcome.tag === 'ack' && outcome.result !== undefined) {
    setResult(outcome.result);
    return ack();
  }
  if (typeof outcome === 'object' && OUTCOMES.has(outcome.tag)) return outcome;
  return retry(
    `TypeError: the handler returned ${typeof outcome}; return nothing, ack(), result(...), retry(...), retryIn(...) or fail(...)`,
  );
}

/** What a handler threw (or rejected with), as the outcome the host takes. */
function settleThrown(e) {
  if (e instanceof Fail) return fail(e.message);
  if (e instanceof Retry) return e.seconds === undefined ? retry(e.message) : retryIn(e.seconds, e.message);
  const name = e instanceof Error ? e.name : typeof e;
  const message = e instanceof Error ? e.message : String(e);
  log.error(e instanceof Error && e.stack ? `${name}: ${message}\n${e.stack}` : `${name}: ${message}`);
  return retry(`${name}: ${message}`);
}

/**
 * Make `fn(jobs)` (which may be async) this component's handler, taking jobs
 * in batches: `export const { handle, handleBatch } = batchHandler(fn)`. On a
 * topic with `batch = { max = 100 }` it gets an array of up to 100 due jobs
 * and returns an array of as many outcomes, in order (nothing or ack() to
 * ack, retry(...), fail(...)); each job ends on its own. A throw fails every
 * job of the call. Elsewhere it gets one job at a time. A batch call cannot
 * enqueue follow-ups, set results, report progress or use durable steps.
 */
export function batchHandler(fn) {
  const answers = (raws) => {
    const all = (outcome) => raws.map(() => outcome);
    const each = (outcomes) => {
      if (!Array.isArray(outcomes) || outcomes.length !== raws.length) {
        const n = Array.isArray(outcomes) ? outcomes.length : typeof outcomes;
        return all(fail(`the batch handler answered ${n} outcomes for ${raws.length} jobs: one per job, in order`));
      }
      return outcomes.map(settle);
    };
    let outcomes;
    try {
      outcomes = fn(raws.map((raw) => new Job(raw)));
    } catch (e) {
      return all(settleThrown(e));
    }
    if (outcomes !== null && typeof outcomes === 'object' && typeof outcomes.then === 'function') {
      return Promise.resolve(outcomes).then(each, (e) => all(settleThrown(e)));
    }
    return each(outcomes);
  };
  const handle = (raw) => {
    const got = answers([raw]);
    return typeof got.then === 'function' ? got.then((o) => o[0]) : got[0];
  };
  return { handle, handleBatch: answers };
}

/**
 * Make `fn(job)` (which may be async) this component's handler: `export const handle = handler(fn)`.
 * Not itself an async function: in StarlingMonkey's interpreter every async
 * frame and promise costs microseconds per job, so a handler's promise is
 * chained once and a plain function's answer taken as it is.
 */
export function handler(fn) {
  return function handle(raw) {
    let outcome;
    try {
      outcome = fn(new Job(raw));
    } catch (e) {
      return settleThrown(e);
    }
    if (outcome !== null && typeof outcome === 'object' && typeof outcome.then === 'function') {
      // Promise.resolve: a thenable whose then() throws is a rejection, as with await
      return Promise.resolve(outcome).then(settle, settleThrown);
    }
    return settle(outcome);
  };
}
