// A JavaScript batch handler for the tests: each job's JSON payload says how
// it ends, as handlers/batcher (Rust) does: {"fail_first": N} retries its
// first N attempts, {"fail": "why"} fails it for good, {"trap": true} throws,
// failing every job of its call.
import { batchHandler, fail, retry, log } from './hourglass.js';

export const { handle, handleBatch } = batchHandler((jobs) => {
  log.info(`a batch of ${jobs.length} job(s)`);
  const plans = jobs.map((job) => {
    try {
      return job.json() ?? {};
    } catch {
      return {};
    }
  });
  if (plans.some((p) => p.trap)) throw new Error('a job of this batch asked for a trap');
  return jobs.map((job, i) => {
    const plan = plans[i];
    if (plan.fail) return fail(plan.fail);
    if (job.attempt <= (plan.fail_first ?? 0)) return retry(`job ${job.id} failing on attempt ${job.attempt}`);
    return undefined;
  });
});
