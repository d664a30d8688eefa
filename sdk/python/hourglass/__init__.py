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
the time or the signal comes, and its steps replay. patched(name) keeps
jobs already past a changed place on the old path. See the docs' "Durable
handlers" and "Changing durable code" pages.

    @hourglass.handler
    def handle(job):
        order = job.json()
        charge = hourglass.step("charge", lambda: charge_card(order))
        hourglass.sleep(3600)                    # an hour, holding no slot
        hourglass.step("email", lambda: send_receipt(order, charge))
"""

import sys as _sys
import traceback as _traceback

from wit_world.imports import job_types as _types
from wit_world.imports import log as _log
from wit_world.imports import report as _report

from ._durable import deprecate_patch, patched, signal, sleep, sleep_until, step, wait_for_signal
from ._follow_ups import flow, follow_up, progress
from ._job import Batch, Dependency, Job
from ._outcomes import Fail, Retry, _Result, ack, fail, result, retry, retry_in

__all__ = [
    "Job", "handler", "batch_handler", "ack", "result", "retry", "retry_in", "fail", "Retry", "Fail",
    "follow_up", "flow", "progress", "debug", "info", "warn", "error",
    "step", "sleep", "sleep_until", "wait_for_signal", "signal", "patched", "deprecate_patch",
]


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
