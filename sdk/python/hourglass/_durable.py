"""Durable handlers: steps recorded in the job's journal, sleeps and waits
for signals that end the attempt without using one, signals to other jobs.
See the docs' "Durable handlers" page."""

import json as _json

from componentize_py_types import Err as _Err
from wit_world.imports import durable as _durable

from ._outcomes import Fail, Retry, _bytes


def step(name, fn):
    """Run fn() once for this job as step `name` and record its result (as
    JSON) in the job's journal; on a later attempt, return the recorded
    result (as JSON reads it back) without calling fn. An exception in fn
    records nothing and fails the attempt as usual. Names are unique within
    a job: a name used twice in one attempt fails the job for good, as does
    an empty one, one over 256 bytes or one starting with "~". A result over
    256 KiB, or a journal past 4 MiB, fails the attempt naming the limit."""
    try:
        recorded = _durable.begin_step(name)
    except _Err as e:
        raise Fail(f"step refused: {e.value}") from None
    if recorded is not None:
        return _json.loads(bytes(recorded))
    value = fn()
    try:
        data = _json.dumps(value).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise Fail(f"step {name!r}: result is not JSON: {e}") from None
    try:
        _durable.record_step(name, data)
    except _Err as e:
        raise Retry(e.value) from None
    return value


def sleep(seconds):
    """Sleep `seconds` without holding a slot: the attempt ends here
    (suspended; no attempt is used) and the job runs again from the top when
    the time comes, when this sleep returns at once. Sleeps are told apart
    by the order they are called in."""
    _durable.sleep(max(0, int(seconds * 1000)))


def sleep_until(at_ms):
    """sleep() until `at_ms` (ms since the Unix epoch)."""
    _durable.sleep_until(max(0, int(at_ms)))


def wait_for_signal(name, timeout):
    """Wait for signal `name` (hourglass signal, the API, another handler's
    signal()) for at most `timeout` seconds: its payload (bytes), or None
    when the timeout passed first. Like sleep(), the attempt ends here while
    it waits; a signal sent before the wait is kept for it."""
    try:
        got = _durable.wait_for_signal(name, max(0, int(timeout * 1000)))
    except _Err as e:
        raise Fail(f"wait refused: {e.value}") from None
    return None if got is None else bytes(got)


def signal(topic, id, name, payload=b""):
    """Send signal `name` with `payload` (bytes, str or JSON) to job `id` of
    `topic` (this topic or one in may_enqueue), now; wrap it in a step() to
    send it once across retries."""
    try:
        _durable.signal(topic, id, name, _bytes(payload))
    except _Err as e:
        raise Retry(e.value) from None


def patched(name):
    """Whether this job takes the new path of the change named `name`: True
    for a job that gets here on code that has the change (a new job, or one
    past the end of its journal), False for one whose journal was written
    past this point by code without it, which keeps the old path:

        if hourglass.patched("reserve-stock"):
            reserved = hourglass.step("reserve-stock", lambda: reserve(order))
        else:
            reserved = hourglass.step("reserve", lambda: reserve(order))  # old jobs

    The answer is recorded in the journal the first time, so it never
    changes for a job. Once `hourglass versions` counts no live job on the
    old path, replace the branch with deprecate_patch(name). The same name
    rules as step()."""
    try:
        return _durable.patched(name)
    except _Err as e:
        if " not recorded: " in e.value:
            raise Retry(e.value) from None
        raise Fail(f"patch refused: {e.value}") from None


def deprecate_patch(name):
    """The old path of change `name` is gone from this code: a job that took
    it fails here for good (and `hourglass upgrade` does not move such a job
    to this code)."""
    try:
        _durable.deprecate_patch(name)
    except _Err as e:
        raise Fail(e.value) from None
