"""What a handler starts or tells while it runs: follow-up jobs and flows
(enqueued when the attempt acks) and progress."""

import json as _json

from componentize_py_types import Err as _Err
from wit_world.imports import follow_up as _follow_up
from wit_world.imports import report as _report

from ._outcomes import Fail, _bytes


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
