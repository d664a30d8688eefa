// The client's whole surface against a live hourglass runner with a real
// redis-server (started by the Rust test `producers::typescript_client`, or
// by hand: HOURGLASS_URL, HOURGLASS_TOKEN; topics `work` with results and
// max_attempts = 1, and `parked`, paused; probe.wasm from handlers/probe;
// a [[schedule]] `nightly` on parked, cron "0 3 * * *" in UTC).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Client, BadRequest, Conflict, NotFound, Unauthorized, Unavailable } from '../dist/index.js';

const WORK = 'work';
const PARKED = 'parked';
const hg = new Client({ timeoutMs: 20_000 });
const fresh = (p) => `${p}-${randomUUID().slice(0, 12)}`;

test('enqueue runs and waits for its result', async () => {
  const id = fresh('r');
  assert.deepEqual(await hg.enqueue(WORK, { result: { total: 42 } }, { id }), { id, status: 'new' });
  const end = await hg.wait(WORK, id, 20);
  assert.equal(end.state, 'acked');
  assert.deepEqual(end.json(), { total: 42 });
});

test('a long poll answers undefined while the job lives', async () => {
  const id = fresh('slow');
  await hg.enqueue(WORK, { sleep_ms: 1500 }, { id });
  assert.equal(await hg.result(WORK, id, 0.2), undefined);
  assert.equal((await hg.result(WORK, id, 10)).state, 'acked');
});

test('every job option reaches the job', async () => {
  const id = fresh('opts');
  await hg.enqueue(PARKED, 'text as is', { id, delay: 3600, maxAttempts: 7, account: 'acme', key: 'customer-7', uniqueFor: '1h', expiresIn: '2h', priority: 4 });
  let job = await hg.getJob(PARKED, id);
  assert.equal(job.priority, 4);
  assert.ok(job.expires_at_ms > job.at_ms);
  assert.equal(job.payload, 'text as is');
  assert.equal((await hg.enqueue(PARKED, 'again', { id })).status, 'duplicate');
  assert.equal(job.max_attempts, 7);
  assert.equal(job.key, 'customer-7');
  const at = new Date(Date.UTC(2031, 0, 2, 3, 4, 5));
  assert.equal((await hg.enqueue(PARKED, { v: 2 }, { id, at, replace: true })).status, 'replaced');
  job = await hg.getJob(PARKED, id);
  assert.equal(job.at_ms, at.getTime());
  assert.deepEqual(JSON.parse(job.payload), { v: 2 });
  assert.equal(await hg.cancel(PARKED, id), 'waiting');
  await assert.rejects(hg.getJob(PARKED, id), NotFound);
});

test('enqueueMany answers per job and a bad one names its index', async () => {
  const a = fresh('m');
  const b = fresh('m');
  const batch = await hg.enqueueMany(PARKED, [
    { payload: { n: 1 }, id: a }, { payload: 'x', id: a }, { payload: new TextEncoder().encode('bytes'), id: b },
  ]);
  assert.deepEqual([batch.new, batch.duplicate], [2, 1]);
  assert.deepEqual(batch.jobs.map((j) => j.status), ['new', 'duplicate', 'new']);
  await assert.rejects(hg.enqueueMany(PARKED, [{ payload: 'ok' }, { payload: 'late', delay: 'soon' }]),
    (e) => e instanceof BadRequest && e.field === '[1].delay');
});

test('bad input names the field; unknowns are NotFound', async () => {
  await assert.rejects(hg.enqueue(WORK, 'x', { delay: 'soon' }), (e) => e instanceof BadRequest && e.field === 'delay' && e.status === 400);
  await assert.rejects(hg.enqueue(WORK, 'x', { key: 'no spaces' }), (e) => e instanceof BadRequest && e.field === 'key');
  await assert.rejects(hg.enqueue(WORK, 'x', { priority: 10 }), (e) => e instanceof BadRequest && e.field === 'priority');
  await assert.rejects(hg.enqueue('no_such_topic', 'x'), NotFound);
  await assert.rejects(hg.getJob(WORK, 'no-such-job'), NotFound);
  await assert.rejects(hg.enqueue(WORK, new Uint8Array([0xff, 0xfe])), TypeError);
});

test('a wrong token and no server are their own errors', async () => {
  await assert.rejects(new Client({ token: 'wrong' }).stats(), Unauthorized);
  await assert.rejects(new Client({ url: 'http://127.0.0.1:9', timeoutMs: 2000 }).stats(),
    (e) => e instanceof Unavailable && e.status === 0);
});

test('events stream progress, then the end', async () => {
  const id = fresh('ev');
  await hg.enqueue(WORK, { progress: [{ percent: 10, sleep_ms: 400 }, { percent: 90, sleep_ms: 400 }], result: 'done' }, { id });
  const kinds = [];
  for await (const event of hg.events(WORK, id)) {
    kinds.push(event.kind);
    if (event.kind === 'end') assert.equal(event.end.state, 'acked');
  }
  assert.ok(kinds.includes('progress'), kinds.join());
  assert.equal(kinds.at(-1), 'end');
});

test('dead letters: list, retry, purge', async () => {
  const id = fresh('d');
  await hg.enqueue(WORK, { then: 'fail' }, { id });
  assert.equal((await hg.wait(WORK, id, 20)).state, 'dead');
  const page = await hg.dead(WORK, 0, 500);
  assert.ok(page.letters.some((l) => l.id === id));
  assert.equal(await hg.retryDead(WORK, id), 1);
  assert.equal((await hg.wait(WORK, id, 20)).state, 'dead');
  assert.ok((await hg.purgeDead(WORK)) >= 1);
  assert.ok(!(await hg.dead(WORK)).letters.some((l) => l.id === id));
  await assert.rejects(hg.dead(WORK, 0, 0), (e) => e instanceof BadRequest && e.field === 'limit');
});

test('upgrade checks on a kept version and names a bad one', async () => {
  const version = (await hg.topics()).find((t) => t.name === WORK).handler;
  const report = await hg.upgrade(WORK, version, { all: true, dryRun: true });
  assert.deepEqual([report.to, report.dry_run], [version, true]);
  assert.ok(Array.isArray(report.moved));
  await assert.rejects(hg.upgrade(WORK, 'not-a-version', { all: true }), (e) => e instanceof BadRequest && e.field === 'to');
  await assert.rejects(hg.upgrade(WORK, version), (e) => e instanceof BadRequest && e.field === 'ids');
  await assert.rejects(hg.upgrade(WORK, '0123456789abcdef', { ids: ['x'] }), (e) => e instanceof Conflict && e.field === 'to');
});

test('pause and resume say whether they changed it', async () => {
  await hg.pause(PARKED);
  assert.equal(await hg.pause(PARKED), false);
  assert.equal(await hg.resume(PARKED), true);
  assert.equal(await hg.pause(PARKED), true);
  assert.ok((await hg.topics()).some((t) => t.name === WORK));
});

test('scale reads every topic and one', async () => {
  await hg.pause(PARKED);
  await hg.enqueue(PARKED, 'x', { id: fresh('sc') });
  const view = await hg.scale();
  assert.equal(typeof view.suggested_runners, 'number');
  assert.ok(view.topics.some((t) => t.topic === WORK));
  const parked = await hg.scale(PARKED);
  assert.deepEqual([parked.topic, parked.paused], [PARKED, true]);
  assert.ok(parked.ready >= 1);
  await assert.rejects(hg.scale('no-such-topic'), NotFound);
});

test("the console's reads: logs, jobs by state, bulk, history, flows, schedules", async () => {
  const failed = [fresh('cd'), fresh('cd'), fresh('cd')];
  for (const id of failed) await hg.enqueue(WORK, { log: { lines: 2, bytes: 20 }, then: 'fail' }, { id });
  for (const id of failed) assert.equal((await hg.wait(WORK, id, 20)).state, 'dead');
  const logs = await hg.logs(WORK, failed[0]);
  assert.deepEqual(logs.lines.map((l) => l.text.split(' line ')[0]), ['attempt 1', 'attempt 1']);
  const one = await hg.jobs(WORK, 'dead', { prefix: failed[0] });
  assert.deepEqual(one.jobs.map((j) => j.id), [failed[0]]);
  await assert.rejects(hg.jobs(WORK, 'nowhere'), (e) => e instanceof BadRequest && e.field === 'state');
  const done = await hg.bulk(WORK, 'retry', [failed[1], 'cd-none']);
  assert.deepEqual([done.done, done.missed], [[failed[1]], ['cd-none']]);
  assert.equal((await hg.wait(WORK, failed[1], 20)).state, 'dead');
  assert.deepEqual((await hg.bulk(WORK, 'purge', failed)).done, failed);
  let dead = 0;
  for (let i = 0; i < 100 && dead < 3; i++) {
    const h = await hg.history([WORK], '1h');
    dead = h.topics[WORK].reduce((n, m) => n + m.dead, 0);
    if (dead < 3) await new Promise((r) => setTimeout(r, 200));
  }
  assert.ok(dead >= 3, `history counts ${dead} dead`);
  await assert.rejects(hg.history(undefined, '2d'), (e) => e instanceof BadRequest && e.field === 'since');
  assert.ok(Array.isArray((await hg.flows({ limit: 5 })).flows));
  const [nightly, ...rest] = await hg.schedules(2);
  assert.deepEqual([nightly.name, nightly.topic, nightly.timezone, rest.length], ['nightly', PARKED, 'UTC', 0]);
  assert.deepEqual(nightly.next_ms.map((t) => new Date(t).getUTCHours()), [3, 3]);
  await assert.rejects(hg.schedules(51), (e) => e instanceof BadRequest && e.field === 'next');
});

test('the active span goes with the enqueue when @opentelemetry/api is installed', async () => {
  const otel = await import('@opentelemetry/api');
  const { AsyncLocalStorageContextManager } = await import('@opentelemetry/context-async-hooks');
  const { W3CTraceContextPropagator } = await import('@opentelemetry/core');
  const { BasicTracerProvider } = await import('@opentelemetry/sdk-trace-base');
  otel.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  otel.propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  const provider = new BasicTracerProvider();
  otel.trace.setGlobalTracerProvider(provider);
  const id = fresh('t');
  const span = otel.trace.getTracer('test').startSpan('produce');
  await otel.context.with(otel.trace.setSpan(otel.context.active(), span), () => hg.enqueue(PARKED, 'x', { id }));
  span.end();
  const job = await hg.getJob(PARKED, id);
  assert.ok(JSON.stringify(job).includes(span.spanContext().traceId), 'the job carries the producer\'s trace id');
});
