"""What the sync and asyncio clients share: turning arguments into request
bodies and answers into values. No I/O here."""

import base64
import datetime as _dt
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Union

from ._errors import error_for, HourglassError

#: A duration: seconds (int or float), a timedelta, or the API's text ("30m", "1500ms").
Duration = Union[int, float, _dt.timedelta, str]
#: A payload: text as is, bytes that are UTF-8, or any other JSON value (sent as its JSON text).
Payload = Any


@dataclass(frozen=True)
class Job:
    """One job to enqueue, with every option the API takes (see
    `Client.enqueue` for what each means)."""

    payload: Payload
    id: Optional[str] = None
    delay: Optional[Duration] = None
    at: Optional[Union[_dt.datetime, str]] = None
    due_at_ms: Optional[int] = None
    max_attempts: Optional[int] = None
    unique_for: Optional[Duration] = None
    replace: bool = False
    version: Optional[str] = None
    account: Optional[str] = None
    key: Optional[str] = None
    expires_in: Optional[Duration] = None
    expires_at: Optional[Union[_dt.datetime, str]] = None
    priority: Optional[int] = None


@dataclass(frozen=True)
class Enqueued:
    """What became of one job: `status` is "new", "duplicate" (a live job has
    this id), "replaced", or "running" / "journaled" (a replace that did not
    happen: `replaced` is False)."""

    id: str
    status: str
    replaced: Optional[bool] = None


@dataclass(frozen=True)
class Batch:
    """The answer to `enqueue_many`: counts and one `Enqueued` per job, in order."""

    new: int
    duplicate: int
    jobs: List[Enqueued]


@dataclass(frozen=True)
class End:
    """How a job ended, as its topic keeps it (topics with `results`): `state`
    is "acked", "dead" or "cancelled"; `result` the bytes it acked with
    (None without one), `reason` why it died."""

    id: str
    state: str
    result: Optional[bytes] = None
    reason: Optional[str] = None
    version: Optional[str] = None
    attempts: Optional[int] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    def json(self) -> Any:
        """The result parsed as JSON (None without one)."""
        return None if self.result is None else json.loads(self.result)


@dataclass(frozen=True)
class Event:
    """One Server-Sent Event of a job: `kind` is "progress", "attempt" (a
    failed attempt) or "end" (then `end` holds it), `data` its JSON."""

    kind: str
    data: Any
    end: Optional[End] = None


@dataclass(frozen=True)
class DeadPage:
    """A page of a topic's dead letters, newest first."""

    total: int
    offset: int
    limit: int
    letters: List[Dict[str, Any]]


def duration(value: Duration, name: str) -> str:
    """The API's text for a duration."""
    if isinstance(value, str):
        return value
    if isinstance(value, _dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}: seconds, a timedelta or text like '30m', not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name}: {value} is negative")
    return f"{int(round(value * 1000))}ms"


def payload_json(payload: Payload) -> Any:
    """The payload as the API's JSON takes it."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        try:
            return bytes(payload).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("payload: bytes that are not UTF-8; the HTTP API takes text or JSON") from None
    if payload is None:
        raise ValueError("payload: None; send text, bytes or a JSON value")
    return payload


def job_body(job: Job) -> Dict[str, Any]:
    """One job as the API's JSON takes it."""
    body: Dict[str, Any] = {"payload": payload_json(job.payload)}
    if job.id is not None:
        body["id"] = job.id
    if job.delay is not None:
        body["delay"] = duration(job.delay, "delay")
    for name in ("at", "expires_at"):
        value = getattr(job, name)
        if isinstance(value, _dt.datetime):
            if value.tzinfo is None:
                raise ValueError(f"{name}: a datetime without a time zone; give it one (e.g. timezone.utc)")
            body[name] = value.isoformat()
        elif value is not None:
            body[name] = value
    if job.expires_in is not None:
        body["expires_in"] = duration(job.expires_in, "expires_in")
    if job.priority is not None:
        body["priority"] = job.priority
    if job.due_at_ms is not None:
        body["due_at_ms"] = job.due_at_ms
    if job.max_attempts is not None:
        body["max_attempts"] = job.max_attempts
    if job.unique_for is not None:
        body["unique_for"] = duration(job.unique_for, "unique_for")
    if job.replace:
        body["replace"] = True
    for name in ("version", "account", "key"):
        if getattr(job, name) is not None:
            body[name] = getattr(job, name)
    return body


def as_job(job: Union[Job, Mapping[str, Any]]) -> Job:
    """A `Job` from a Job or a dict of its fields."""
    return job if isinstance(job, Job) else Job(**job)


def enqueued(answer: Mapping[str, Any]) -> Enqueued:
    return Enqueued(id=answer["id"], status=answer["status"], replaced=answer.get("replaced"))


def batch(answer: Mapping[str, Any]) -> Batch:
    return Batch(new=answer["new"], duplicate=answer["duplicate"], jobs=[enqueued(j) for j in answer["jobs"]])


def end(answer: Mapping[str, Any]) -> End:
    result = None
    if answer.get("result_base64") is not None:
        result = base64.b64decode(answer["result_base64"])
    elif answer.get("result") is not None:
        r = answer["result"]
        result = (r if isinstance(r, str) else json.dumps(r)).encode("utf-8")
    return End(
        id=answer.get("id", ""),
        state=answer["state"],
        result=result,
        reason=answer.get("reason"),
        version=answer.get("version"),
        attempts=answer.get("attempts"),
        raw=dict(answer),
    )


def dead_page(answer: Mapping[str, Any]) -> DeadPage:
    return DeadPage(total=answer["total"], offset=answer["offset"], limit=answer["limit"], letters=answer["letters"])


def refusal(status: int, body: bytes) -> HourglassError:
    """The exception for a non-2xx answer."""
    try:
        data = json.loads(body)
        message, fld = data.get("error", ""), data.get("field")
    except (ValueError, AttributeError):
        message, fld = body.decode("utf-8", "replace").strip(), None
    return error_for(status, message or f"HTTP {status}", fld)


def trace_headers() -> Dict[str, str]:
    """The active OpenTelemetry span's W3C trace context (`traceparent`,
    `tracestate`), when opentelemetry is installed; else nothing."""
    try:
        from opentelemetry import propagate  # type: ignore
    except ImportError:
        return {}
    carrier: Dict[str, str] = {}
    propagate.inject(carrier)
    return {k: v for k, v in carrier.items() if k in ("traceparent", "tracestate")}


class SseParser:
    """Server-Sent Events, fed line by line."""

    def __init__(self) -> None:
        self.kind = "message"
        self.data: List[str] = []

    def feed(self, line: str) -> Optional[Event]:
        line = line.rstrip("\r\n")
        if line == "":
            if not self.data:
                return None
            kind, text = self.kind, "\n".join(self.data)
            self.kind, self.data = "message", []
            data = json.loads(text)
            return Event(kind=kind, data=data, end=end(data) if kind == "end" else None)
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self.kind = value
        elif name == "data":
            self.data.append(value)
        return None
