"""Outcomes: what a handler returns or raises (ack, result, retry, fail;
Retry and Fail), and how values become bytes."""

import json as _json

from wit_world.imports import job_types as _types


def _bytes(value):
    """bytes as they are, str as UTF-8, anything else as JSON."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return _json.dumps(value).encode("utf-8")


class Retry(Exception):
    """Raise to try the job again: after `seconds`, or the topic's backoff when None."""

    def __init__(self, reason, seconds=None):
        super().__init__(str(reason))
        self.seconds = seconds


class Fail(Exception):
    """Raise to give up on the job for good: it is dead-lettered with this reason."""


def ack():
    """Done: the job and its payload are deleted."""
    return _types.Outcome_Ack()


class _Result:
    """An ack with a result: what result() returns."""

    def __init__(self, data):
        self.data = data


def result(value):
    """Ack with `value` as the job's result (bytes as they are, str as UTF-8,
    anything else as JSON): kept for whoever waits on the job when the topic
    has `results`, and handed to follow-ups started with with_result=True."""
    return _Result(_bytes(value))


def retry(reason):
    """Try again after the topic's backoff; `reason` is recorded as the last error."""
    return _types.Outcome_Retry(_types.Retry(delay_ms=None, reason=str(reason)))


def retry_in(seconds, reason):
    """Try again after `seconds` (a number); `reason` is recorded as the last error."""
    return _types.Outcome_Retry(
        _types.Retry(delay_ms=max(0, int(seconds * 1000)), reason=str(reason))
    )


def fail(reason):
    """Give up now: the job goes to the dead-letter set with `reason`."""
    return _types.Outcome_Fail(str(reason))
