// A JavaScript handler for the tests, on the SDK (the twin of py/app.py). The
// payload is JSON; each key asks for one thing, checked in this order:
//   {"saga": {"shop": URL, "email_fails": N, "sleep_ms": M, "approval_s": S}}
//                                      durable steps: POST URL/charge, /reserve,
//                                      (a durable sleep of M ms, a wait of S s for
//                                      signal "approved", POSTed to /approved),
//                                      /email (failing on the first N attempts);
//                                      ack with the charge
//   {"plain": {"shop": URL, "fail_first": N}}
//                                      no SDK steps: POST URL/charge, /reserve,
//                                      read the clock and 16 random bytes (the
//                                      stamp); retry with the stamp on the first
//                                      N attempts, then ack with {"stamp": ...}
//   {"log": MESSAGE}                   an info line, then the rest
//   {"print": TEXT}                    console.log(TEXT), then the rest
//   {"throw": MESSAGE}                 throw a RangeError(MESSAGE)
//   {"fail": REASON}                   fail (dead letter) with REASON
//   {"retry_in": SECONDS, "reason": R} retry after SECONDS with R
//   {"retry": REASON}                  retry with the topic's backoff
//   {"follow_up": {"topic", "payload", "id"?, "delay"?, "unique_for"?, "key"?,
//                  "with_result"?, "expires_in"?, "priority"?}}  then ack
//   {"fetch": URL}                     GET URL; fail with "fetched STATUS BODY"
//   {"post_json": URL, "body": V}      POST V as JSON; fail with "posted STATUS BODY"
//   {"progress": [P, ...]}             report each percentage, 300 ms apart
//   {"result": V}                      ack with V as the result (JSON)
//   {"echo_parent": true}              ack with {"parent": the parent's result}
//   {"flow": {"id", "jobs": [...]}}    create a flow with the ack, {"flow": id}
//   {"echo_deps": true}                ack with {"deps": its flow dependencies,
//                                      "batch": its batch (a callback) or null}
//   {"served": true}                   ack with {"served": jobs this instance ran}
//   {}                                 ack
import {
  handler, fail, retry, retryIn, followUp, log, progress, result, step, Retry, sleep,
  waitForSignal, flow,
} from './hourglass.js';

// jobs this instance ran: state one job leaves for the next (only where the
// topic reuses instances; a fresh instance always says 1)
let served = 0;

// A plain function where the plan needs no waiting, an async one where it
// does (progress, fetch, post_json): the SDK takes both, and both paths are tested.
export const handle = handler((job) => {
  served += 1;
  const plan = job.json();
  if (plan.saga !== undefined) return saga(job, plan.saga);
  if (plan.plain !== undefined) return plain(job, plan.plain);
  if (plan.log !== undefined) log.info(plan.log);
  if (plan.print !== undefined) console.log(plan.print);
  if (plan.throw !== undefined) throw new RangeError(plan.throw);
  if (plan.fail !== undefined) return fail(plan.fail);
  if (plan.retry_in !== undefined) return retryIn(plan.retry_in, plan.reason ?? 'asked to retry');
  if (plan.retry !== undefined) return retry(plan.retry);
  if (plan.progress !== undefined || plan.fetch !== undefined || plan.post_json !== undefined) {
    return waiting(job, plan);
  }
  return finish(job, plan);
});

async function waiting(job, plan) {
  for (const p of plan.progress ?? []) {
    progress(p, { step: p });
    await new Promise((done) => setTimeout(done, 300));
  }
  if (plan.post_json !== undefined) {
    const res = await fetch(plan.post_json, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(plan.body),
    });
    return fail(`posted ${res.status} ${await res.text()}`);
  }
  if (plan.fetch === undefined) return finish(job, plan);
  startFollowUp(plan);
  const res = await fetch(plan.fetch);
  return fail(`fetched ${res.status} ${await res.text()}`);
}

function finish(job, plan) {
  startFollowUp(plan);
  if (plan.served) return result({ served });
  if (plan.echo_parent) return result({ parent: job.parentJson() ?? null });
  if (plan.flow !== undefined) {
    return result({ flow: flow(plan.flow.jobs, { id: plan.flow.id }) });
  }
  if (plan.echo_deps) {
    return result({
      deps: job.dependencies().map((d) => ({
        name: d.name, topic: d.topic, id: d.id, ended: d.ended,
        result: d.json() ?? null, reason: d.reason ?? null,
      })),
      batch: job.batch() ?? null,
    });
  }
  if (plan.result !== undefined) return result(plan.result);
}

function startFollowUp(plan) {
  if (plan.follow_up === undefined) return;
  const f = plan.follow_up;
  followUp(f.topic, f.payload, {
    id: f.id,
    delay: f.delay,
    uniqueFor: f.unique_for,
    withResult: f.with_result,
    key: f.key,
    expiresIn: f.expires_in,
    priority: f.priority,
  });
}

async function plain(job, p) {
  for (const what of ['charge', 'reserve']) {
    const res = await fetch(`${p.shop}/${what}?order=1`, { method: 'POST', body: '' });
    if (res.status >= 300) return retryIn(0.05, `${what}: the shop answered ${res.status}`);
  }
  const random = crypto.getRandomValues(new Uint8Array(16));
  const hex = Array.from(random, (b) => b.toString(16).padStart(2, '0')).join('');
  const stamp = `${Date.now()}-${hex}`;
  if (job.attempt <= (p.fail_first ?? 0)) return retryIn(0.05, `stamp ${stamp}`);
  return result({ stamp });
}

async function saga(job, s) {
  const call = async (what) => {
    const res = await fetch(`${s.shop}/${what}?order=1`, { method: 'POST', body: '' });
    if (res.status >= 300) throw new Retry(`${what}: the shop answered ${res.status}`);
    return await res.text();
  };
  const charge = await step('charge', () => call('charge'));
  await step('reserve', () => call('reserve'));
  if (s.sleep_ms) sleep(s.sleep_ms / 1000);
  if (s.approval_s !== undefined) {
    const by = waitForSignal('approved', s.approval_s);
    if (by === null) return fail('not approved in time');
    await step('approved', async () => {
      const res = await fetch(`${s.shop}/approved?order=1`, { method: 'POST', body: by });
      return res.status;
    });
  }
  await step('email', async () => {
    const sent = await call('email');
    if (job.attempt <= (s.email_fails ?? 0)) {
      throw new Retry(`the mail server is down (attempt ${job.attempt})`);
    }
    return sent;
  });
  return result({ charge });
}
