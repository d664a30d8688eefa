// The BullMQ contender of the hourglass benchmark harness. The harness runs
//   node bench.mjs WORKLOAD PORT '{"n": ...}'
// against a redis-server it started, and reads one JSON object from the last
// line of stdout. Workloads mirror bench/src/hourglass.rs:
//   throughput  n immediate no-op jobs added in bulk, then processed (concurrency 50)
//   lateness    n delayed jobs due over spread_ms; handler start - due, per job
//   memory      n delayed jobs with a 100-byte payload; used_memory per job
//   enqueue     with `prefill` delayed jobs present, µs per job to add `n` more
import { Queue, Worker } from "bullmq";
import IORedis from "ioredis";

const [workload, port, argText] = process.argv.slice(2);
const args = JSON.parse(argText ?? "{}");
const connection = { host: "127.0.0.1", port: Number(port), maxRetriesPerRequest: null };
const payload100 = "x".repeat(100);
const opts = { removeOnComplete: true, removeOnFail: true };

async function addBulk(queue, n, make) {
  for (let i = 0; i < n; i += 1000) {
    const batch = [];
    for (let j = i; j < Math.min(n, i + 1000); j++) batch.push(make(j));
    await queue.addBulk(batch);
  }
}

async function usedMemory(redis) {
  const info = await redis.info("memory");
  return Number(/used_memory:(\d+)/.exec(info)[1]);
}

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function throughput({ n, concurrency = 50 }) {
  const queue = new Queue("bench", { connection });
  const t0 = performance.now();
  await addBulk(queue, n, (i) => ({ name: "noop", data: { i }, opts }));
  const enqueueSecs = (performance.now() - t0) / 1000;
  let done = 0;
  const t1 = performance.now();
  const finished = new Promise((resolve) => {
    const worker = new Worker("bench", async () => {}, { connection, concurrency });
    worker.on("completed", () => {
      if (++done === n) resolve(worker);
    });
  });
  const worker = await finished;
  const processSecs = (performance.now() - t1) / 1000;
  await worker.close();
  await queue.close();
  return { enqueue_per_sec: n / enqueueSecs, processed_per_sec: n / processSecs };
}

async function lateness({ n, spread_ms, lead_ms, concurrency = 50 }) {
  const queue = new Queue("bench", { connection });
  const late = [];
  let early = 0;
  let resolveAll;
  const all = new Promise((r) => (resolveAll = r));
  const worker = new Worker(
    "bench",
    async (job) => {
      const d = Date.now() - job.data.due;
      if (d < 0) early++;
      late.push(d);
      if (late.length === n) resolveAll();
    },
    { connection, concurrency },
  );
  await worker.waitUntilReady();
  const base = Date.now() + lead_ms;
  await addBulk(queue, n, () => {
    const due = base + Math.floor(Math.random() * spread_ms);
    return { name: "late", data: { due }, opts: { ...opts, delay: Math.max(0, due - Date.now()) } };
  });
  await all;
  await worker.close();
  await queue.close();
  late.sort((a, b) => a - b);
  return { p50_ms: percentile(late, 50), p99_ms: percentile(late, 99), max_ms: late[late.length - 1], early };
}

async function memory({ n }) {
  const redis = new IORedis(connection);
  const queue = new Queue("bench", { connection });
  await queue.waitUntilReady();
  const before = await usedMemory(redis);
  await addBulk(queue, n, (i) => ({ name: "mem", data: { p: payload100 }, opts: { ...opts, delay: 3_600_000 } }));
  const after = await usedMemory(redis);
  await queue.close();
  redis.disconnect();
  return { bytes_per_job: (after - before) / n };
}

async function enqueue({ n, prefill }) {
  const queue = new Queue("bench", { connection });
  await addBulk(queue, prefill, () => ({ name: "pre", data: {}, opts: { ...opts, delay: 3_600_000 } }));
  const t0 = performance.now();
  await addBulk(queue, n, () => ({ name: "new", data: {}, opts: { ...opts, delay: 3_600_000 } }));
  const us = ((performance.now() - t0) * 1000) / n;
  await queue.close();
  return { enqueue_us_per_job: us };
}

const workloads = { throughput, lateness, memory, enqueue };
if (!workloads[workload]) {
  console.error(`unknown workload ${workload}; one of ${Object.keys(workloads).join(", ")}`);
  process.exit(2);
}
const result = await workloads[workload](args);
console.log(JSON.stringify(result));
process.exit(0);
