"""hourglass for Python handlers: a thin layer over the bindings componentize-py
generates for the contract (wit/handler.wit). `hourglass build` puts this
package on the build's Python path; nothing to install.

    import hourglass
    from hourglass import http

    @hourglass.handler
    def handle(job):
        order = job.json()
        if "id" not in order:
            return hourglass.fail("no order id")          # dead letter, with this reason
        res = http.post_json("https://orders.example.com/cancel", order)
        if res.status == 429 or res.status >= 500:
            return hourglass.retry_in(res.retry_after() or 30, f"order service: {res.status}")
        hourglass.follow_up("notify", {"order": order["id"]}, id=f"notify-{order['id']}")
        hourglass.info(f"cancelled order {order['id']}")
        # returning None (or hourglass.ack()) acks the job

A handler returns None or ack() to ack, result(value) to ack with a result
for whoever waits on the job (topics with `results` in queues.toml), retry(...)
/ retry_in(...) to try again, fail(...) to dead-letter; raising Retry(...) or Fail(...) does the same
from anywhere below it. Any other exception is a failed attempt (retried with
the topic's backoff, dead-lettered when attempts run out) whose recorded
reason is the exception's type and message; its traceback goes to the
runner's log. print() and the log functions write to the runner's log,
tagged with topic, job and attempt. progress(percent, detail) tells watchers
how far a long job has got.

Durable handlers: step(name, fn) runs fn() once for the job and records its
result (JSON) in the job's journal; a later attempt gets it back without
running fn. sleep(seconds) and wait_for_signal(name, timeout) end the attempt
here (no attempt used, no slot held); the job runs again from the top when
the time or the signal comes, and its steps replay. See the docs' "Durable
handlers" page.

    @hourglass.handler
    def handle(job):
        order = job.json()
        charge = hourglass.step("charge", lambda: charge_card(order))
        hourglass.sleep(3600)                    # an hour, holding no slot
        hourglass.step("email", lambda: send_receipt(order, charge))
"""

import json as _json
import sys as _sys
import traceback as _traceback

from componentize_py_types import Err as _Err
from wit_world.imports import durable as _durable
from wit_world.imports import follow_up as _follow_up
from wit_world.imports import job_types as _types
from wit_world.imports import log as _log
from wit_world.imports import report as _report

__all__ = [
    "Job", "handler", "batch_handler", "ack", "result", "retry", "retry_in", "fail", "Retry", "Fail",
    "follow_up", "flow", "progress", "debug", "info", "warn", "error",
    "step", "sleep", "sleep_until", "wait_for_signal", "signal",
]


def _bytes(value):
    """bytes as they are, str as UTF-8, anything else as JSON."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    return _json.dumps(value).encode("utf-8")


class Job:
    """One attempt of one job."""

    def __init__(self, raw):
        self._raw = raw

    @property
    def id(self):
        """The job's id, unique among the live jobs of its topic."""
        return self._raw.id

    @property
    def topic(self):
        return self._raw.topic

    @property
    def payload(self):
        """The bytes the producer enqueued."""
        return bytes(self._raw.payload)

    @property
    def attempt(self):
        """Which attempt this is, from 1."""
        return self._raw.attempt

    @property
    def max_attempts(self):
        return self._raw.max_attempts

    @property
    def is_last_attempt(self):
        return self._raw.attempt >= self._raw.max_attempts

    @property
    def enqueued_at_ms(self):
        """When the job was accepted, in ms since the Unix epoch."""
        return self._raw.enqueued_at

    @property
    def due_at_ms(self):
        """When this attempt became due, in ms since the Unix epoch."""
        return self._raw.due_at

    def text(self):
        """The payload as UTF-8 text; a payload that is not fails the job for good."""
        try:
            return self.payload.decode("utf-8")
        except UnicodeDecodeError as e:
            raise Fail(f"payload is not UTF-8: {e}") from None

    def json(self):
        """The payload parsed as JSON; a payload that is not JSON fails the job for good."""
        try:
            return _json.loads(self.payload)
        except ValueError as e:
            raise Fail(f"payload is not JSON: {e}") from None

    @property
    def parent_result(self):
        """The result (bytes) of the job that started this one with
        follow_up(..., with_result=True), or None."""
        value = _report.parent_result()
        return None if value is None else bytes(value)

    def parent_json(self):
        """parent_result parsed as JSON (None without one); not JSON fails the job for good."""
        value = self.parent_result
        if value is None:
            return None
        try:
            return _json.loads(value)
        except ValueError as e:
            raise Fail(f"parent result is not JSON: {e}") from None

    def dependencies(self):
        """The jobs this one waits for in its flow, in the order the flow names
        them, each with how it ended (a Dependency); [] outside a flow."""
        return [Dependency(d) for d in _report.dependencies()]

    def batch(self):
        """For a batch's callback (on_complete, on_success): how the batch
        stands (a Batch: id, jobs, acked, dead, cancelled, failed ids); None for
        any other job."""
        raw = _report.batch()
        return None if raw is None else Batch(raw)

    def __repr__(self):
        return f"Job(topic={self.topic!r}, id={self.id!r}, attempt={self.attempt})"


class Batch:
    """How a batch stands when its callback runs: id, jobs (the callbacks not
    counted), acked, dead, cancelled, failed (the dead jobs' ids)."""

    def __init__(self, raw):
        self.id = raw.id
        self.jobs = raw.jobs
        self.acked = raw.acked
        self.dead = raw.dead
        self.cancelled = raw.cancelled
        self.failed = list(raw.failed)

    def __repr__(self):
        return f"Batch({self.id!r}, jobs={self.jobs}, acked={self.acked}, dead={self.dead})"


class Dependency:
    """A job a flow job waits for: name, topic, id, ended ("acked", "dead" or
    "cancelled"), result (bytes or None), reason (why it is dead, or None)."""

    def __init__(self, raw):
        self.name = raw.name
        self.topic = raw.topic
        self.id = raw.id
        self.ended = raw.ended.name.lower()
        self.result = None if raw.result is None else bytes(raw.result)
        self.reason = raw.reason

    def json(self):
        """result parsed as JSON (None without one); not JSON fails the job for good."""
        if self.result is None:
            return None
        try:
            return _json.loads(self.result)
        except ValueError as e:
            raise Fail(f"result of dependency {self.name!r} is not JSON: {e}") from None

    def __repr__(self):
        return f"Dependency({self.name!r}, {self.ended})"


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


def progress(percent=None, detail=None):
    """Tell watchers how far the job has got: `percent` (0-100) and/or
    `detail`, a dict (JSON, at most 4 KiB). Call it as often as you like: the
    runner writes a few reports a second at most."""
    text = None if detail is None else _json.dumps(detail)
    pct = None if percent is None else max(0, min(100, int(percent)))
    try:
        _report.progress(pct, text)
    except _Err as e:
        raise Fail(f"progress refused: {e.value}") from None


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


def follow_up(topic, payload, *, delay=None, id=None, unique_for=None, with_result=False, key=None,
              expires_in=None, priority=None):
    """Enqueue a job to `topic` when this attempt acks; returns its id.

    `payload` is bytes, a str, or anything JSON can encode; `delay`,
    `unique_for` and `expires_in` are seconds; `unique_for` (which needs `id`)
    keeps the id taken that long even after that job is done. `with_result`
    hands the job this attempt's result (its job.parent_result). `key` is its
    tenant key in the target topic (without one it takes this job's).
    `expires_in` (more than `delay`): not started by then, it is not run (the
    target's on_expire; without it, the target's expire_after). `priority` 0
    (the highest, the default) to 9 among the target's due jobs. A refusal (a
    topic not in may_enqueue, a bad id or key, a payload over the limit, an
    option out of range) fails the job.
    """
    data = _bytes(payload)
    if priority is not None and not (isinstance(priority, int) and 0 <= priority <= 9):
        raise Fail(f"follow-up priority {priority!r} is out of range: 0 (the highest) to 9")
    ms = lambda seconds: max(0, int(seconds * 1000))  # noqa: E731
    job = _follow_up.NewJob(
        topic=topic,
        payload=data,
        delay_ms=None if delay is None else ms(delay),
        id=id,
    )
    given = [o for o in (key, unique_for, with_result or None, expires_in, priority) if o is not None]
    try:
        # one option alone goes through the call that predates enqueue_with
        if len(given) > 1 or expires_in is not None or priority is not None:
            return _follow_up.enqueue_with(job, _follow_up.EnqueueOptions(
                key=None if key is None else str(key),
                unique_for_ms=None if unique_for is None else ms(unique_for),
                with_result=bool(with_result),
                expires_in_ms=None if expires_in is None else ms(expires_in),
                priority=priority,
            ))
        if key is not None:
            return _follow_up.enqueue_keyed(job, str(key))
        if with_result:
            return _follow_up.enqueue_with_result(job)
        if unique_for is None:
            return _follow_up.enqueue(job)
        return _follow_up.enqueue_unique(job, ms(unique_for))
    except _Err as e:
        raise Fail(f"follow-up refused: {e.value}") from None


def flow(jobs, *, id=None, fail_fast=False):
    """Create a flow when this attempt acks (all of it with the ack, or
    nothing if the attempt does not ack); returns its id.

    `jobs` as a flow file lists them: dicts with name, topic, payload (bytes,
    a str, or anything JSON can encode), after (names, or dicts with name and
    policy "require" or "ignore") and max_attempts. A refusal (a cycle, a
    dependency not in the flow, a topic not in may_enqueue, a payload over the
    limit) fails the job.
    """
    def dep(d):
        if isinstance(d, str):
            d = {"name": d}
        policy = d.get("policy", "require")
        if policy not in ("require", "ignore"):
            raise Fail(f"flow dependency {d.get('name')!r}: policy {policy!r} is not require or ignore")
        return _follow_up.FlowDependency(
            name=d["name"],
            policy=_follow_up.Policy.IGNORE if policy == "ignore" else _follow_up.Policy.REQUIRE,
        )

    described = _follow_up.NewFlow(
        id=id,
        jobs=[
            _follow_up.FlowJob(
                name=j["name"],
                topic=j["topic"],
                payload=_bytes(j.get("payload", b"")),
                after=[dep(d) for d in j.get("after", [])],
                max_attempts=j.get("max_attempts"),
            )
            for j in jobs
        ],
        fail_fast=fail_fast,
    )
    try:
        return _follow_up.enqueue_flow(described)
    except _Err as e:
        raise Fail(f"flow refused: {e.value}") from None


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


def _logger(level):
    def log(message):
        _log.log(level, str(message))

    return log


debug = _logger(_log.Level.DEBUG)
info = _logger(_log.Level.INFO)
warn = _logger(_log.Level.WARN)
error = _logger(_log.Level.ERROR)

_OUTCOMES = (_types.Outcome_Ack, _types.Outcome_Retry, _types.Outcome_Fail)


def _thrown(e):
    """What a handler raised, as the outcome the host takes."""
    if isinstance(e, Fail):
        return fail(e)
    if isinstance(e, Retry):
        return retry(e) if e.seconds is None else retry_in(e.seconds, e)
    # a failed attempt: retried with backoff
    error("".join(_traceback.format_exception(e)).rstrip())
    return retry(f"{type(e).__name__}: {e}")


def _answer(fn, raw):
    """Run the handler on one attempt; its outcome, whatever it did."""
    try:
        outcome = fn(Job(raw))
    except Exception as e:
        return _thrown(e)
    return _settle(outcome)


def _settle(outcome):
    """What a handler returned, as the outcome the host takes."""
    if outcome is None:
        return ack()
    if isinstance(outcome, _Result):
        _report.set_result(outcome.data)
        return ack()
    if isinstance(outcome, _OUTCOMES):
        return outcome
    return retry(
        f"TypeError: the handler returned {type(outcome).__name__}; "
        "return None, ack(), result(...), retry(...), retry_in(...) or fail(...)"
    )


def handler(fn):
    """Make `fn(job)` this component's handler (one per component)."""

    class WitWorld:
        def handle(self, raw):
            return _answer(fn, raw)

    # componentize-py looks for `WitWorld` in the handler's module
    _sys.modules[fn.__module__].WitWorld = WitWorld
    return fn


def _answers(fn, raws):
    """Run a batch handler on `raws`: one outcome per job, whatever it did
    (an exception is every job's)."""
    try:
        outcomes = list(fn([Job(raw) for raw in raws]))
    except Exception as e:
        return [_thrown(e)] * len(raws)
    if len(outcomes) != len(raws):
        why = f"the batch handler answered {len(outcomes)} outcomes for {len(raws)} jobs: one per job, in order"
        return [fail(why)] * len(raws)
    return [_settle(o) for o in outcomes]


def batch_handler(fn):
    """Make `fn(jobs)` this component's handler, taking jobs in batches: on
    a topic with `batch = { max = 100 }` it gets a list of up to 100 due
    jobs and returns a list of as many outcomes, in order (None or ack() to
    ack, retry(...), fail(...)); each job ends on its own. An exception fails
    every job of the call. Elsewhere it gets one job at a time. A batch call
    cannot enqueue follow-ups, set results, report progress or use durable
    steps (they belong to one job)."""

    class WitWorld:
        def handle(self, raw):
            return _answers(fn, [raw])[0]

        def handle_batch(self, raws):
            return _answers(fn, raws)

    _sys.modules[fn.__module__].WitWorld = WitWorld
    return fn
