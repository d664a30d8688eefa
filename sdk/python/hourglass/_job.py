"""The job a handler receives: its fields and payload, what its parent
handed it, its flow's dependencies and its batch."""

import json as _json

from wit_world.imports import report as _report

from ._outcomes import Fail


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
