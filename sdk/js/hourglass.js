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
//
// patched(name) keeps jobs already past a changed place on the old path
// (the docs' "Changing durable code" page).

import { setResult } from 'hourglass:handler/report@0.1.0';
import {
  ack, fail, log, retry, retryIn, Fail, Retry,
} from './hourglass/outcome.js';
import { Job } from './hourglass/job.js';

export {
  ack, result, retry, retryIn, fail, retryAfter, log, Retry, Fail,
} from './hourglass/outcome.js';
export { Job } from './hourglass/job.js';
export { progress, followUp, flow } from './hourglass/follow-up.js';
export {
  step, sleep, sleepUntil, waitForSignal, signal, patched, deprecatePatch,
} from './hourglass/durable.js';

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
