// hourglass-client: enqueue and follow jobs of an hourglass job runner over
// its HTTP API, from Node 18+ (the built-in fetch), ESM, no dependencies.
// With `@opentelemetry/api` installed, each enqueue carries the active span's
// W3C trace context.

import type {
  Duration, Job, Enqueued, Batch, End, JobEvent, DeadLetter, UpgradeReport, DeadPage, JobInfo,
} from './types.js';
export type {
  Duration, Job, Enqueued, Batch, End, JobEvent, DeadLetter, UpgradeReport, DeadPage, JobInfo,
} from './types.js';

/** A request the API refused: `status` (0: no server), its message, the field at fault. */
export class HourglassError extends Error {
  constructor(readonly status: number, message: string, readonly field?: string) {
    super(status ? `${status}: ${message}${field ? ` (field ${field})` : ''}` : message);
    this.name = new.target.name;
  }
}
/** 400: bad input; `field` names it. */
export class BadRequest extends HourglassError {}
/** 401: no token, or a wrong one. */
export class Unauthorized extends HourglassError {}
/** 404: an unknown topic, job or dead letter. */
export class NotFound extends HourglassError {}
/** 409: not in a state that allows it. */
export class Conflict extends HourglassError {}
/** 503 (Redis away: nothing changed, try again), or no server at all (status 0). */
export class Unavailable extends HourglassError {}

const BY_STATUS: Record<number, typeof HourglassError> = {
  400: BadRequest, 401: Unauthorized, 404: NotFound, 409: Conflict, 503: Unavailable,
};

export interface ClientOptions {
  /** Defaults to $HOURGLASS_URL or http://127.0.0.1:9090. */
  url?: string;
  /** A bearer token; defaults to $HOURGLASS_TOKEN. */
  token?: string;
  /** Each request's time limit in ms (a long poll adds its wait); 30,000 by default. */
  timeoutMs?: number;
}

const env = (name: string): string | undefined =>
  (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env[name];

function duration(value: Duration, name: string): string {
  if (typeof value === 'string') return value;
  if (typeof value !== 'number' || !Number.isFinite(value)) {
    throw new TypeError(`${name}: seconds or text like '30m'`);
  }
  if (value < 0) throw new RangeError(`${name}: ${value} is negative`);
  return `${Math.round(value * 1000)}ms`;
}

function seconds(value: Duration): number {
  if (typeof value === 'number') return value;
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(value);
  if (!m) return 86400;
  const unit: Record<string, number> = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400 };
  return Number(m[1]) * unit[m[2]];
}

function payloadJson(payload: unknown): unknown {
  if (payload instanceof Uint8Array) {
    try {
      return new TextDecoder('utf-8', { fatal: true }).decode(payload);
    } catch {
      throw new TypeError('payload: bytes that are not UTF-8; the HTTP API takes text or JSON');
    }
  }
  if (payload === undefined || payload === null) {
    throw new TypeError('payload: send text, bytes or a JSON value');
  }
  return payload;
}

function jobBody(job: Job): Record<string, unknown> {
  const body: Record<string, unknown> = { payload: payloadJson(job.payload) };
  if (job.id !== undefined) body.id = job.id;
  if (job.delay !== undefined) body.delay = duration(job.delay, 'delay');
  if (job.at !== undefined) body.at = job.at instanceof Date ? job.at.toISOString() : job.at;
  if (job.dueAtMs !== undefined) body.due_at_ms = job.dueAtMs;
  if (job.maxAttempts !== undefined) body.max_attempts = job.maxAttempts;
  if (job.uniqueFor !== undefined) body.unique_for = duration(job.uniqueFor, 'uniqueFor');
  if (job.replace) body.replace = true;
  if (job.version !== undefined) body.version = job.version;
  if (job.account !== undefined) body.account = job.account;
  if (job.key !== undefined) body.key = job.key;
  if (job.expiresIn !== undefined) body.expires_in = duration(job.expiresIn, 'expiresIn');
  if (job.expiresAt !== undefined) {
    body.expires_at = job.expiresAt instanceof Date ? job.expiresAt.toISOString() : job.expiresAt;
  }
  if (job.priority !== undefined) body.priority = job.priority;
  return body;
}

function toEnd(id: string, a: Record<string, unknown>): End {
  let result: Uint8Array | undefined;
  if (typeof a.result_base64 === 'string') {
    result = Uint8Array.from(atob(a.result_base64), (c) => c.charCodeAt(0));
  } else if (a.result !== undefined && a.result !== null) {
    const r = a.result;
    result = new TextEncoder().encode(typeof r === 'string' ? r : JSON.stringify(r));
  }
  return {
    id: (a.id as string) ?? id,
    state: a.state as string,
    result,
    reason: (a.reason as string) ?? undefined,
    version: (a.version as string) ?? undefined,
    attempts: (a.attempts as number) ?? undefined,
    json() {
      return result === undefined ? undefined : JSON.parse(new TextDecoder().decode(result));
    },
  };
}

async function traceHeaders(): Promise<Record<string, string>> {
  const name = '@opentelemetry/api';
  try {
    const otel = await import(name);
    const carrier: Record<string, string> = {};
    otel.propagation.inject(otel.context.active(), carrier);
    const out: Record<string, string> = {};
    for (const k of ['traceparent', 'tracestate']) if (carrier[k]) out[k] = carrier[k];
    return out;
  } catch {
    return {};
  }
}

const q = encodeURIComponent;

/** A connection to an hourglass runner's HTTP API (`[http] listen`). */
export class Client {
  readonly url: string;
  readonly token?: string;
  readonly timeoutMs: number;

  constructor(options: ClientOptions = {}) {
    this.url = (options.url ?? env('HOURGLASS_URL') ?? 'http://127.0.0.1:9090').replace(/\/+$/, '');
    this.token = options.token ?? env('HOURGLASS_TOKEN');
    this.timeoutMs = options.timeoutMs ?? 30_000;
  }

  private headers(extra: Record<string, string> = {}): Record<string, string> {
    return { ...(this.token ? { authorization: `Bearer ${this.token}` } : {}), ...extra };
  }

  private async fetch(path: string, init: RequestInit & { timeoutMs?: number } = {}): Promise<Response> {
    let answer: Response;
    try {
      answer = await fetch(this.url + path, {
        ...init,
        signal: init.signal ?? AbortSignal.timeout(init.timeoutMs ?? this.timeoutMs),
      });
    } catch (e) {
      throw new Unavailable(0, `cannot reach ${this.url}: ${(e as Error).message}`);
    }
    if (!answer.ok) {
      const text = await answer.text();
      let message = text.trim();
      let field: string | undefined;
      try {
        const data = JSON.parse(text);
        message = data.error ?? message;
        field = data.field ?? undefined;
      } catch { /* not JSON: the text is the message */ }
      const Kind = BY_STATUS[answer.status] ?? HourglassError;
      throw new Kind(answer.status, message || `HTTP ${answer.status}`, field);
    }
    return answer;
  }

  private async call(method: string, path: string, body?: unknown,
    extra: { headers?: Record<string, string>; timeoutMs?: number } = {}): Promise<[number, any]> {
    const headers = this.headers(extra.headers);
    if (body !== undefined) headers['content-type'] = 'application/json';
    const answer = await this.fetch(path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body), timeoutMs: extra.timeoutMs,
    });
    const text = await answer.text();
    return [answer.status, text ? JSON.parse(text) : undefined];
  }

  private topic(topic: string): string { return `/api/topics/${q(topic)}`; }
  private job(topic: string, id: string): string { return `${this.topic(topic)}/jobs/${q(id)}`; }

  /** Enqueue one job into `topic` (see `Job` for the options). */
  async enqueue(topic: string, payload: unknown, options: Omit<Job, 'payload'> = {}): Promise<Enqueued> {
    const body = jobBody({ ...options, payload });
    const [, a] = await this.call('POST', `${this.topic(topic)}/jobs`, body, { headers: await traceHeaders() });
    return a as Enqueued;
  }

  /** Enqueue up to 10,000 jobs in one call; one bad job refuses all, naming `[i].field`. */
  async enqueueMany(topic: string, jobs: Job[]): Promise<Batch> {
    const body = jobs.map(jobBody);
    const [, a] = await this.call('POST', `${this.topic(topic)}/jobs`, body, { headers: await traceHeaders() });
    return a as Batch;
  }

  /** Everything about one job (as `hourglass inspect --json`); `NotFound` if unknown. */
  async getJob(topic: string, id: string): Promise<JobInfo> {
    return (await this.call('GET', this.job(topic, id)))[1];
  }

  /** Cancel a job wherever it is; where it was: "waiting", "dead" or "running (...)" (its outcome is discarded). */
  async cancel(topic: string, id: string): Promise<string> {
    return (await this.call('DELETE', this.job(topic, id)))[1].was;
  }

  /** The job's end if it has ended, waiting up to `wait`; undefined while it lives. */
  async result(topic: string, id: string, wait?: Duration): Promise<End | undefined> {
    const query = wait === undefined ? '' : `?wait=${q(duration(wait, 'wait'))}`;
    const extra = wait === undefined ? 0 : seconds(wait) * 1000;
    const [status, a] = await this.call('GET', `${this.job(topic, id)}/result${query}`, undefined,
      { timeoutMs: this.timeoutMs + extra });
    return status === 200 ? toEnd(id, a) : undefined;
  }

  /** Wait until the job ends (long polls of `pollS` seconds); rejects after `timeoutS`. */
  async wait(topic: string, id: string, timeoutS = 60, pollS = 25): Promise<End> {
    const deadline = Date.now() + timeoutS * 1000;
    for (;;) {
      const left = (deadline - Date.now()) / 1000;
      if (left <= 0) throw new Error(`job ${id} of ${topic} did not end within ${timeoutS} s`);
      const end = await this.result(topic, id, Math.min(pollS, left));
      if (end) return end;
    }
  }

  /** The job's events as they happen (Server-Sent Events), ending after "end". */
  async *events(topic: string, id: string): AsyncGenerator<JobEvent> {
    const answer = await this.fetch(`${this.job(topic, id)}/events`, {
      headers: this.headers({ accept: 'text/event-stream' }), signal: new AbortController().signal,
    });
    const reader = answer.body!.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    let kind = 'message';
    let data: string[] = [];
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += value;
        let nl: number;
        while ((nl = buffer.indexOf('\n')) >= 0) {
          const line = buffer.slice(0, nl).replace(/\r$/, '');
          buffer = buffer.slice(nl + 1);
          if (line === '') {
            if (data.length === 0) continue;
            const parsed = JSON.parse(data.join('\n'));
            const event: JobEvent = { kind, data: parsed, end: kind === 'end' ? toEnd(id, parsed) : undefined };
            kind = 'message';
            data = [];
            yield event;
            if (event.kind === 'end' || event.kind === 'error') return;
          } else if (!line.startsWith(':')) {
            const at = line.indexOf(':');
            const name = at < 0 ? line : line.slice(0, at);
            const v = at < 0 ? '' : line.slice(at + 1).replace(/^ /, '');
            if (name === 'event') kind = v;
            else if (name === 'data') data.push(v);
          }
        }
      }
    } finally {
      await reader.cancel().catch(() => {});
    }
  }

  /** Send a durable job signal `name`: "woken", "kept" or "duplicate". */
  async signal(topic: string, id: string, name: string, payload: Uint8Array = new Uint8Array()): Promise<string> {
    const answer = await this.fetch(`${this.job(topic, id)}/signals/${q(name)}`, {
      method: 'POST', headers: this.headers(), body: payload,
    });
    return (await answer.json()).delivered;
  }

  /**
   * Move journaled jobs (`ids`, or `all` of the topic's) to handler version
   * `to`, each only if a replay check of its journal on it passes; `dryRun`
   * checks and moves none. The report (`UpgradeReport` in docs/openapi.json):
   * `moved` and `left`, each job with why. `Conflict` for a version the topic
   * does not keep, or a server that runs no handlers.
   */
  async upgrade(
    topic: string,
    to: string,
    options: { ids?: string[]; all?: boolean; dryRun?: boolean } = {},
  ): Promise<UpgradeReport> {
    const body: Record<string, unknown> = { to, dry_run: Boolean(options.dryRun) };
    if (options.all) body.all = true;
    if (options.ids !== undefined) body.ids = options.ids;
    return (await this.call('POST', `${this.topic(topic)}/upgrade`, body))[1];
  }

  /** A page of the topic's dead letters, newest first (limit 1 to 500). */
  async dead(topic: string, offset = 0, limit = 50): Promise<DeadPage> {
    return (await this.call('GET', `${this.topic(topic)}/dead?offset=${offset}&limit=${limit}`))[1];
  }

  /** Run one dead letter (`id`) or all again, due now, attempts reset: how many. */
  async retryDead(topic: string, id?: string, options: { version?: string; resetJournal?: boolean } = {}): Promise<number> {
    const path = `${this.topic(topic)}/dead${id === undefined ? '' : `/${q(id)}`}/retry`;
    const body: Record<string, unknown> = {};
    if (options.version !== undefined) body.version = options.version;
    if (options.resetJournal) body.reset_journal = true;
    // one letter answers true, all of them a count
    return Number((await this.call('POST', path, Object.keys(body).length ? body : undefined))[1].requeued);
  }

  /** Delete one dead letter (`id`) or all: how many. */
  async purgeDead(topic: string, id?: string): Promise<number> {
    return Number((await this.call('DELETE', `${this.topic(topic)}/dead${id === undefined ? '' : `/${q(id)}`}`))[1].purged);
  }

  /** Stop claiming the topic on every runner; whether this changed it. */
  async pause(topic: string): Promise<boolean> {
    return (await this.call('POST', `${this.topic(topic)}/pause`))[1].changed;
  }

  /** Resume claiming the topic; whether this changed it. */
  async resume(topic: string): Promise<boolean> {
    return (await this.call('POST', `${this.topic(topic)}/resume`))[1].changed;
  }

  /** Every topic with its settings and counts. */
  async topics(): Promise<Array<Record<string, any>>> {
    return (await this.call('GET', '/api/topics'))[1].topics;
  }

  /** Counts per topic (as `hourglass stats --json`). */
  async stats(): Promise<Record<string, any>> {
    return (await this.call('GET', '/api/stats'))[1];
  }

  /** What an autoscaler reads: every topic's load and `suggested_runners`, or one topic's. */
  async scale(topic?: string): Promise<Record<string, any>> {
    const path = topic === undefined ? '/api/scale' : `${this.topic(topic)}/scale`;
    return (await this.call('GET', path))[1];
  }

  /**
   * A page of the topic's jobs in `state` (scheduled, ready, running,
   * suspended, dead or ended) from `cursor` (the page before's `next`),
   * filtered by id `prefix`, tenant `key`, handler `version` or `error` text.
   */
  async jobs(topic: string, state: string, options: {
    cursor?: string; limit?: number; prefix?: string; key?: string; version?: string; error?: string;
  } = {}): Promise<Record<string, any>> {
    return (await this.call('GET', `${this.topic(topic)}/jobs?${query({ state, ...options })}`))[1];
  }

  /** Retry, cancel or purge the jobs named (1 to 1,000) and nothing else: `done` and `missed`. */
  async bulk(topic: string, action: 'retry' | 'cancel' | 'purge', ids: string[]): Promise<{ done: string[]; missed: string[] }> {
    return (await this.call('POST', `${this.topic(topic)}/bulk`, { action, ids }))[1];
  }

  /** What the job's handler logged in each attempt: `lines`, oldest first, and `dropped_bytes`. */
  async logs(topic: string, id: string): Promise<Record<string, any>> {
    return (await this.call('GET', `${this.job(topic, id)}/logs`))[1];
  }

  /** Each topic's minutes, at most 24 h back (`since`, "3h"); every topic if none named. */
  async history(topics?: string[], since = '3h'): Promise<Record<string, any>> {
    return (await this.call('GET', `/api/history?${query({ topics: topics?.join(','), since })}`))[1];
  }

  /** The recent flows, newest first; `before` (ms) pages on from the last `created_ms`. */
  async flows(options: { before?: number; limit?: number } = {}): Promise<Record<string, any>> {
    return (await this.call('GET', `/api/flows?${query(options)}`))[1];
  }

  /** Each `[[schedule]]` with its `next` fire times (0 to 50), its cursor and its last fire time's job. */
  async schedules(next = 3): Promise<Array<Record<string, any>>> {
    return (await this.call('GET', `/api/schedules?next=${next}`))[1].schedules;
  }
}

/** `a=1&b=x` of the values given (undefined ones left out). */
function query(values: Record<string, string | number | undefined>): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(values)) if (v !== undefined) p.set(k, String(v));
  return p.toString();
}
