// What a handler starts or tells while it runs: follow-up jobs and flows
// (enqueued when the attempt acks) and progress.

import {
  enqueue, enqueueUnique, enqueueWithResult, enqueueKeyed, enqueueWith, enqueueFlow,
} from 'hourglass:handler/follow-up@0.1.0';
import { progress as hostProgress } from 'hourglass:handler/report@0.1.0';
import { Fail, toBytes } from './outcome.js';

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
