// A JavaScript handler for the tests that does not use the SDK: what the runner
// makes of a bare componentize-js component (default features: it imports
// wasi:http), an uncaught exception included. Built by test-support's build
// script as `hourglass build` builds any JavaScript project.
// The payload is JSON: {"fetch": URL} GETs the URL and fails the job with its
// status and body as the reason (so a test sees what the handler saw);
// {"fetch_many": [URL, ...]} starts all the GETs at once and fails the job with
// "<n> ok, <m> failed"; {"throw": MESSAGE} throws an uncaught TypeError with
// that message; without any of these the job is acked.
import { log } from 'hourglass:handler/log@0.1.0';

export async function handle(job) {
  const plan = JSON.parse(new TextDecoder().decode(job.payload));
  log('info', `js probe: job ${job.id}, attempt ${job.attempt}`);
  if (plan.fetch) {
    try {
      const res = await fetch(plan.fetch);
      const text = await res.text();
      return { tag: 'fail', val: `fetched ${res.status} ${text}` };
    } catch (e) {
      return { tag: 'retry', val: { delayMs: undefined, reason: `fetch ${plan.fetch}: ${e}` } };
    }
  }
  if (plan.throw) {
    throw new TypeError(plan.throw);
  }
  if (plan.fetch_many) {
    const results = await Promise.allSettled(plan.fetch_many.map((url) => fetch(url)));
    const ok = results.filter((r) => r.status === 'fulfilled' && r.value.status === 200).length;
    return { tag: 'fail', val: `${ok} ok, ${results.length - ok} failed` };
  }
  return { tag: 'ack' };
}
