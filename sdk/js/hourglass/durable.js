// Durable handlers: steps recorded in the job's journal, sleeps and waits
// for signals that end the attempt without using one, signals to other
// jobs. See the docs' "Durable handlers" page.

import {
  beginStep, recordStep, sleep as hostSleep, sleepUntil as hostSleepUntil,
  waitForSignal as hostWaitForSignal, signal as hostSignal,
  patched as hostPatched, deprecatePatch as hostDeprecatePatch,
} from 'hourglass:handler/durable@0.1.0';
import {
  Fail, Retry, STRICT_UTF8, toBytes,
} from './outcome.js';

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

/**
 * Whether this job takes the new path of the change named `name`: true for
 * a job that gets here on code that has the change (a new job, or one past
 * the end of its journal), false for one whose journal was written past
 * this point by code without it, which keeps the old path:
 *
 *   const reserved = patched('reserve-stock')
 *     ? await step('reserve-stock', () => reserve(order))
 *     : await step('reserve', () => reserve(order));      // old jobs
 *
 * The answer is recorded in the journal the first time, so it never
 * changes for a job. Once `hourglass versions` counts no live job on the
 * old path, replace the branch with deprecatePatch(name). The same name
 * rules as step().
 */
export function patched(name) {
  try {
    return hostPatched(name);
  } catch (e) {
    const why = String(e.payload ?? e.message ?? e);
    if (why.includes(' not recorded: ')) throw new Retry(why);
    throw new Fail(`patch refused: ${why}`);
  }
}

/**
 * The old path of change `name` is gone from this code: a job that took it
 * fails here for good (and `hourglass upgrade` does not move such a job to
 * this code).
 */
export function deprecatePatch(name) {
  try {
    hostDeprecatePatch(name);
  } catch (e) {
    throw new Fail(String(e.payload ?? e.message ?? e));
  }
}
