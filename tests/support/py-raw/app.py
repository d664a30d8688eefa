"""A Python handler without the SDK: the bindings only. A payload that starts
with "raise " raises ValueError with the rest as its message, uncaught (the
component traps; the runner reads the traceback); anything else acks."""

from wit_world.imports import job_types


class WitWorld:
    def handle(self, job):
        text = bytes(job.payload).decode()
        if text.startswith("raise "):
            raise ValueError(text.removeprefix("raise "))
        return job_types.Outcome_Ack()
