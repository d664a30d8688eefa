// The shapes the API takes and answers (docs/openapi.json), as
// hourglass-client's calls (index.ts) take and return them.

/** A duration: seconds (a number) or the API's text ("30m", "1500ms"). */
export type Duration = number | string;

/** One job to enqueue. `payload`: a string as is, a Uint8Array of UTF-8, or any JSON value. */
export interface Job {
  payload: unknown;
  /** Yours: a live job with it makes this a duplicate; generated otherwise. */
  id?: string;
  /** Start after this long. */
  delay?: Duration;
  /** Start at this time (a Date or RFC 3339 text). */
  at?: Date | string;
  /** Start at this time, ms since the epoch. */
  dueAtMs?: number;
  /** Attempts before dead-lettering (the topic's by default). */
  maxAttempts?: number;
  /** Keep the id taken this long from the enqueue, even after the job is done (needs `id`). */
  uniqueFor?: Duration;
  /** Replace the waiting job with this id (needs `id`). */
  replace?: boolean;
  /** Run it on this kept handler version. */
  version?: string;
  /** Sum its usage under this account. */
  account?: string;
  /** Its tenant key (fairness and per-key limits). */
  key?: string;
  /** Not started this long after the enqueue, it expires unrun (dead-lettered or dropped: the topic's `on_expire`). */
  expiresIn?: Duration;
  /** Not started by this time, it expires unrun. */
  expiresAt?: Date | string;
  /** 0 (the highest, the default) to 9: among the topic's due jobs a higher priority starts first. */
  priority?: number;
}

/** What became of one job: "new", "duplicate", "replaced", or "running" / "journaled" (not replaced). */
export interface Enqueued {
  id: string;
  status: 'new' | 'duplicate' | 'replaced' | 'running' | 'journaled';
  replaced?: boolean;
}

/** The answer to `enqueueMany`: counts and one `Enqueued` per job, in order. */
export interface Batch {
  new: number;
  duplicate: number;
  jobs: Enqueued[];
}

/** How a job ended, as its topic keeps it (topics with `results`). */
export interface End {
  id: string;
  state: 'acked' | 'dead' | 'cancelled' | string;
  /** The bytes it acked with, if any. */
  result?: Uint8Array;
  reason?: string;
  version?: string;
  attempts?: number;
  /** The result parsed as JSON (undefined without one). */
  json(): unknown;
}

/** One Server-Sent Event of a job: "progress", "attempt" (a failed one) or "end". */
export interface JobEvent {
  kind: string;
  data: unknown;
  end?: End;
}

/** One dead letter: why it was given up, after how many attempts, on which handler. */
export interface DeadLetter {
  id: string;
  reason: string;
  attempts: number;
  failed_at_ms: number;
  /** The content hash of the handler that ran the last attempt. */
  handler?: string;
  /** What each attempt used (the most recent 25). */
  costs?: Array<Record<string, unknown>>;
}

/** A page of dead letters, newest first. */
/** What `upgrade` did: jobs moved (in a dry run, movable) and those left, each with why. */
export interface UpgradeReport {
  topic: string;
  to: string;
  dry_run: boolean;
  checked: number;
  moved: Array<{ id: string; from?: string | null; detail: string; logs?: string[] }>;
  left: Array<{ id: string; version?: string | null; reason: string; logs?: string[] }>;
  cpu_us: number;
  wall_us: number;
  replayed: number;
}

export interface DeadPage {
  topic: string;
  total: number;
  offset: number;
  limit: number;
  letters: DeadLetter[];
}

/**
 * One job as `hourglass inspect --json` shows it (`LiveJson` in docs/openapi.json), or,
 * once it has left the pipeline, its kept end (`EndJson`: state "acked", "dead" or "cancelled").
 */
export interface JobInfo {
  topic: string;
  id: string;
  state: 'scheduled' | 'ready' | 'running' | 'dead' | 'acked' | 'cancelled' | 'expired';
  attempts: number;
  /** Due at, leased until, or dead since (ms); live jobs only. */
  at_ms?: number;
  max_attempts?: number | null;
  /** The payload as text, when it is UTF-8. */
  payload?: string | null;
  key?: string | null;
  /** Its priority among its topic's due jobs: 0 (the highest) to 9 (live jobs). */
  priority?: number;
  /** Its own deadline (ms): not started by then, it expires. */
  expires_at_ms?: number | null;
  version?: string | null;
  last_failure?: { error: string; at: number; handler?: string } | null;
  progress?: { attempt: number; percent?: number; detail?: unknown; at_ms: number } | null;
  /** When an ended job ended (ms). */
  ended_at_ms?: number;
  [field: string]: unknown;
}
