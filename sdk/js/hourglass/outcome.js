// What a handler returns or throws (ack, result, retry, retryIn, fail;
// Retry and Fail), the runner's log, and how values become bytes: the
// part of hourglass.js every other part uses.

import { log as hostLog } from 'hourglass:handler/log@0.1.0';

/** bytes as they are, a string as UTF-8, anything else as JSON. */
export function toBytes(value) {
  if (value instanceof Uint8Array) return value;
  if (typeof value === 'string') return new TextEncoder().encode(value);
  return new TextEncoder().encode(JSON.stringify(value));
}

// one decoder for every job: making one costs a JavaScript job about as much
// as the rest of its SDK work
export const STRICT_UTF8 = new TextDecoder('utf-8', { fatal: true });

/** Throw to try the job again: after `seconds`, or the topic's backoff when undefined. */
export class Retry extends Error {
  constructor(reason, seconds) {
    super(String(reason));
    this.name = 'Retry';
    this.seconds = seconds;
  }
}

/** Throw to give up on the job for good: it is dead-lettered with this reason. */
export class Fail extends Error {
  constructor(reason) {
    super(String(reason));
    this.name = 'Fail';
  }
}

/** Done: the job and its payload are deleted. */
export function ack() {
  return { tag: 'ack' };
}

/**
 * Ack with `value` as the job's result (a Uint8Array as is, a string as
 * UTF-8, anything else as JSON): kept for whoever waits on the job when the
 * topic has `results`, and handed to follow-ups started with withResult.
 */
export function result(value) {
  return { tag: 'ack', result: toBytes(value) };
}

/** Try again after the topic's backoff; `reason` is recorded as the last error. */
export function retry(reason) {
  return { tag: 'retry', val: { delayMs: undefined, reason: String(reason) } };
}

/** Try again after `seconds` (a number); `reason` is recorded as the last error. */
export function retryIn(seconds, reason) {
  const ms = BigInt(Math.max(0, Math.round(Number(seconds) * 1000)));
  return { tag: 'retry', val: { delayMs: ms, reason: String(reason) } };
}

/** Give up now: the job goes to the dead-letter set with `reason`. */
export function fail(reason) {
  return { tag: 'fail', val: String(reason) };
}

/** A response's Retry-After header in seconds, when it is a number; else undefined. */
export function retryAfter(response) {
  const value = response.headers.get('retry-after');
  const seconds = value === null ? NaN : Number(value);
  return Number.isInteger(seconds) && seconds >= 0 ? seconds : undefined;
}

/** Lines in the runner's log, tagged with topic, job and attempt. */
export const log = {
  debug: (message) => hostLog('debug', String(message)),
  info: (message) => hostLog('info', String(message)),
  warn: (message) => hostLog('warn', String(message)),
  error: (message) => hostLog('error', String(message)),
};
