// The job a handler receives: its fields and payload, what its parent
// handed it, its flow's dependencies and its batch.

import {
  parentResult, dependencies as hostDependencies, batch as hostBatch,
} from 'hourglass:handler/report@0.1.0';
import { Fail, STRICT_UTF8 } from './outcome.js';

/** One attempt of one job. */
export class Job {
  constructor(raw) {
    this.raw = raw;
  }
  /** The job's id, unique among the live jobs of its topic. */
  get id() { return this.raw.id; }
  get topic() { return this.raw.topic; }
  /** The bytes the producer enqueued (a Uint8Array). */
  get payload() { return this.raw.payload; }
  /** Which attempt this is, from 1. */
  get attempt() { return this.raw.attempt; }
  get maxAttempts() { return this.raw.maxAttempts; }
  get isLastAttempt() { return this.raw.attempt >= this.raw.maxAttempts; }
  /** When the job was accepted, in ms since the Unix epoch. */
  get enqueuedAtMs() { return Number(this.raw.enqueuedAt); }
  /** When this attempt became due, in ms since the Unix epoch. */
  get dueAtMs() { return Number(this.raw.dueAt); }
  /** The payload as UTF-8 text; a payload that is not fails the job for good. */
  text() {
    try {
      return STRICT_UTF8.decode(this.raw.payload);
    } catch (e) {
      throw new Fail(`payload is not UTF-8: ${e.message}`);
    }
  }
  /** The payload parsed as JSON; a payload that is not JSON fails the job for good. */
  json() {
    const text = this.text();
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new Fail(`payload is not JSON: ${e.message}`);
    }
  }
  /**
   * The result (a Uint8Array) of the job that started this one with
   * followUp(..., { withResult: true }), or undefined.
   */
  get parentResult() { return parentResult() ?? undefined; }
  /** parentResult parsed as JSON (undefined without one); not JSON fails the job for good. */
  parentJson() {
    const bytes = this.parentResult;
    if (bytes === undefined) return undefined;
    try {
      return JSON.parse(new TextDecoder('utf-8').decode(bytes));
    } catch (e) {
      throw new Fail(`parent result is not JSON: ${e.message}`);
    }
  }
  /**
   * The jobs this one waits for in its flow, in the order the flow names
   * them, each with how it ended: { name, topic, id, ended ('acked', 'dead'
   * or 'cancelled'), result (a Uint8Array or undefined), reason, json() };
   * [] outside a flow.
   */
  dependencies() {
    return hostDependencies().map((d) => ({
      name: d.name,
      topic: d.topic,
      id: d.id,
      ended: d.ended,
      result: d.result ?? undefined,
      reason: d.reason ?? undefined,
      /** result parsed as JSON (undefined without one); not JSON fails the job for good. */
      json() {
        if (this.result === undefined) return undefined;
        try {
          return JSON.parse(new TextDecoder('utf-8').decode(this.result));
        } catch (e) {
          throw new Fail(`result of dependency ${d.name} is not JSON: ${e.message}`);
        }
      },
    }));
  }
  /**
   * For a batch's callback (on_complete, on_success): how the batch stands,
   * `{id, jobs, acked, dead, cancelled, failed}` (failed: the dead jobs'
   * ids); undefined for any other job.
   */
  batch() {
    const b = hostBatch();
    if (b === undefined || b === null) return undefined;
    return {
      id: b.id, jobs: b.jobs, acked: b.acked, dead: b.dead, cancelled: b.cancelled,
      failed: [...b.failed],
    };
  }
}
