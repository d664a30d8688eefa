"""The blocking client, on the standard library's urllib."""

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union

from . import _wire
from ._errors import HourglassError, Unavailable
from ._wire import Batch, DeadPage, Duration, End, Enqueued, Event, Job, Payload

_q = urllib.parse.quote


class Client:
    """A connection to an hourglass runner's HTTP API (`[http] listen`).

    `url` defaults to `$HOURGLASS_URL` or http://127.0.0.1:9090; `token` to
    `$HOURGLASS_TOKEN` (sent as a bearer token; none sends nothing).
    `timeout` bounds each request in seconds (a long poll adds its wait).
    Every refusal raises an `HourglassError` subclass carrying the status
    and, for bad input, the field at fault.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, timeout: float = 30.0):
        self.url = (url or os.environ.get("HOURGLASS_URL") or "http://127.0.0.1:9090").rstrip("/")
        self.token = token if token is not None else os.environ.get("HOURGLASS_TOKEN")
        self.timeout = timeout

    # -- requests ---------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Optional[Mapping[str, Any]] = None,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        raw: Optional[bytes] = None,
    ) -> Tuple[int, Any]:
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode("utf-8"))
        request = urllib.request.Request(url, data=data, method=method)
        if data is not None and raw is None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        for k, v in (headers or {}).items():
            request.add_header(k, v)
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as answer:
                text = answer.read()
                return answer.status, json.loads(text) if text else None
        except urllib.error.HTTPError as e:
            raise _wire.refusal(e.code, e.read()) from None
        except (urllib.error.URLError, OSError) as e:
            raise Unavailable(0, f"cannot reach {self.url}: {getattr(e, 'reason', e)}") from None

    @staticmethod
    def _topic(topic: str) -> str:
        return f"/api/topics/{_q(topic, safe='')}"

    def _job(self, topic: str, id: str) -> str:
        return f"{self._topic(topic)}/jobs/{_q(id, safe='')}"

    # -- producing ----------------------------------------------------------

    def enqueue(
        self,
        topic: str,
        payload: Payload,
        *,
        id: Optional[str] = None,
        delay: Optional[Duration] = None,
        at: Any = None,
        due_at_ms: Optional[int] = None,
        max_attempts: Optional[int] = None,
        unique_for: Optional[Duration] = None,
        replace: bool = False,
        version: Optional[str] = None,
        account: Optional[str] = None,
        key: Optional[str] = None,
        expires_in: Optional[Duration] = None,
        expires_at: Any = None,
        priority: Optional[int] = None,
    ) -> Enqueued:
        """Enqueue one job into `topic`.

        `payload`: text as is, UTF-8 bytes, or any JSON value (stored as its
        JSON text). `id`: yours (a live job with it makes this a duplicate;
        generated otherwise). When: `delay` (seconds, a timedelta or "30m"),
        `at` (an aware datetime or RFC 3339 text) or `due_at_ms`; now by
        default. `max_attempts` overrides the topic's. `unique_for` keeps
        the id taken that long even after the job is done; `replace` swaps
        the waiting job with this id for this one (both need `id`).
        `version` runs it on that kept handler version, `account` sums its
        usage under that name, `key` is its tenant key (fairness and
        per-key limits). Not started within `expires_in` (like `delay`) or by
        `expires_at` (like `at`), it expires unrun (the topic's `on_expire`:
        dead-lettered with reason "expired", or dropped). `priority`: 0 (the
        highest, the default) to 9; among the topic's due jobs a higher one
        starts first. The active OpenTelemetry span's trace context goes
        with it when opentelemetry is installed.
        """
        job = Job(
            payload, id, delay, at, due_at_ms, max_attempts, unique_for, replace, version, account, key,
            expires_in, expires_at, priority,
        )
        return _wire.enqueued(self._post_jobs(topic, _wire.job_body(job), _wire.trace_headers()))

    def enqueue_many(self, topic: str, jobs: Iterable[Union[Job, Mapping[str, Any]]]) -> Batch:
        """Enqueue up to 10,000 jobs (each a `Job` or a dict of its fields) in
        one call: all are checked first, and one bad job refuses them all
        with its index in the field (`[3].delay`)."""
        body = [_wire.job_body(_wire.as_job(j)) for j in jobs]
        return _wire.batch(self._post_jobs(topic, body, _wire.trace_headers()))

    def _post_jobs(self, topic: str, body: Any, headers: Mapping[str, str]) -> Any:
        """POST a job or jobs to `topic` with these (trace) headers: the answer."""
        return self._request("POST", f"{self._topic(topic)}/jobs", body, headers=headers)[1]

    # -- following a job ------------------------------------------------------

    def get_job(self, topic: str, id: str) -> Dict[str, Any]:
        """Everything about one job (as `hourglass inspect --json`); `NotFound`
        if it is unknown (or its end is no longer kept)."""
        return self._request("GET", self._job(topic, id))[1]

    def cancel(self, topic: str, id: str) -> str:
        """Cancel a job wherever it is; returns where it was: "waiting",
        "dead", or "running (...)" (its attempt finishes, its outcome is
        discarded). `NotFound` if there is no such job."""
        return self._request("DELETE", self._job(topic, id))[1]["was"]

    def result(self, topic: str, id: str, wait: Optional[Duration] = None) -> Optional[End]:
        """The job's end if it has ended (its topic keeps `results`), waiting up
        to `wait` for it; None while it still lives."""
        query = {"wait": None if wait is None else _wire.duration(wait, "wait")}
        extra = 0.0 if wait is None else _seconds(wait)
        status, answer = self._request("GET", self._job(topic, id) + "/result", query=query, timeout=self.timeout + extra)
        return _wire.end({"id": id, **answer}) if status == 200 else None

    def wait(self, topic: str, id: str, timeout: float = 60.0, poll: float = 25.0) -> End:
        """Block until the job ends and return its end (long polls of `poll`
        seconds); `TimeoutError` after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"job {id} of {topic} did not end within {timeout} s")
            ended = self.result(topic, id, wait=min(poll, left))
            if ended is not None:
                return ended

    def events(self, topic: str, id: str) -> Iterator[Event]:
        """The job's events as they happen (Server-Sent Events), ending after
        its "end" event. `NotFound` if there is no such job."""
        request = urllib.request.Request(self.url + self._job(topic, id) + "/events")
        request.add_header("Accept", "text/event-stream")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            answer = urllib.request.urlopen(request, timeout=None)
        except urllib.error.HTTPError as e:
            raise _wire.refusal(e.code, e.read()) from None
        except (urllib.error.URLError, OSError) as e:
            raise Unavailable(0, f"cannot reach {self.url}: {getattr(e, 'reason', e)}") from None
        parser = _wire.SseParser()
        with answer:
            for line in answer:
                event = parser.feed(line.decode("utf-8"))
                if event is not None:
                    yield event
                    if event.kind in ("end", "error"):
                        return

    def signal(self, topic: str, id: str, name: str, payload: bytes = b"") -> str:
        """Send a durable job signal `name`; returns "woken", "kept" or "duplicate"."""
        path = f"{self._job(topic, id)}/signals/{_q(name, safe='')}"
        return self._request("POST", path, raw=bytes(payload))[1]["delivered"]

    def upgrade(self, topic: str, to: str, ids: Optional[Iterable[str]] = None, *,
                all: bool = False, dry_run: bool = False) -> Dict[str, Any]:
        """Move journaled jobs (`ids`, or `all` of the topic's) to handler
        version `to`, each only if a replay check of its journal on it passes;
        `dry_run` checks and moves none. The report: `moved` (each with `id`,
        `from`, `detail`, `logs`) and `left` (each with its `reason`), as
        `hourglass upgrade --json` prints it. `Conflict` for a version the
        topic does not keep (or a server that runs no handlers)."""
        body: Dict[str, Any] = {"to": to, "dry_run": bool(dry_run)}
        if all:
            body["all"] = True
        if ids is not None:
            body["ids"] = list(ids)
        return self._request("POST", f"{self._topic(topic)}/upgrade", body)[1]

    # -- dead letters and topics ---------------------------------------------

    def dead(self, topic: str, offset: int = 0, limit: int = 50) -> DeadPage:
        """A page of the topic's dead letters, newest first (limit 1 to 500)."""
        answer = self._request("GET", f"{self._topic(topic)}/dead", query={"offset": offset, "limit": limit})[1]
        return _wire.dead_page(answer)

    def retry_dead(self, topic: str, id: Optional[str] = None, *, version: Optional[str] = None,
                   reset_journal: bool = False) -> int:
        """Run one dead letter (`id`) or all of them again, due now with
        attempts reset; `version` replays on that kept version. How many."""
        path = f"{self._topic(topic)}/dead" + (f"/{_q(id, safe='')}" if id is not None else "") + "/retry"
        body: Dict[str, Any] = {}
        if version is not None:
            body["version"] = version
        if reset_journal:
            body["reset_journal"] = True
        return int(self._request("POST", path, body or None)[1]["requeued"])  # one: true

    def purge_dead(self, topic: str, id: Optional[str] = None) -> int:
        """Delete one dead letter (`id`) or all of them; how many."""
        path = f"{self._topic(topic)}/dead" + (f"/{_q(id, safe='')}" if id is not None else "")
        return int(self._request("DELETE", path)[1]["purged"])  # one: true

    def pause(self, topic: str) -> bool:
        """Stop claiming the topic on every runner; whether this changed it."""
        return self._request("POST", f"{self._topic(topic)}/pause")[1]["changed"]

    def resume(self, topic: str) -> bool:
        """Resume claiming the topic; whether this changed it."""
        return self._request("POST", f"{self._topic(topic)}/resume")[1]["changed"]

    def topics(self) -> List[Dict[str, Any]]:
        """Every topic with its settings and counts."""
        return self._request("GET", "/api/topics")[1]["topics"]

    def stats(self) -> Dict[str, Any]:
        """Counts per topic (as `hourglass stats --json`)."""
        return self._request("GET", "/api/stats")[1]

    def scale(self, topic: Optional[str] = None) -> Dict[str, Any]:
        """What an autoscaler reads: every topic's load and the runners the
        namespace needs (`suggested_runners`), or one topic's."""
        path = f"{self._topic(topic)}/scale" if topic is not None else "/api/scale"
        return self._request("GET", path)[1]

    # -- what the console reads, and its bulk actions -------------------------

    def jobs(self, topic: str, state: str, *, cursor: Optional[str] = None, limit: int = 50,
             prefix: Optional[str] = None, key: Optional[str] = None, version: Optional[str] = None,
             error: Optional[str] = None) -> Dict[str, Any]:
        """A page of the topic's jobs in `state` (scheduled, ready, running,
        suspended, dead or ended), from `cursor` (the `next` of the page
        before; none: the first), filtered by id prefix, tenant key, handler
        version or error text. The page's `jobs` and its `next` cursor."""
        query = {"state": state, "cursor": cursor, "limit": limit, "prefix": prefix,
                 "key": key, "version": version, "error": error}
        return self._request("GET", f"{self._topic(topic)}/jobs", query=query)[1]

    def bulk(self, topic: str, action: str, ids: Iterable[str]) -> Dict[str, Any]:
        """Retry, cancel or purge (`action`) the jobs named (1 to 1,000) and
        nothing else: `done` lists those changed, `missed` those left alone."""
        body = {"action": action, "ids": list(ids)}
        return self._request("POST", f"{self._topic(topic)}/bulk", body)[1]

    def logs(self, topic: str, id: str) -> Dict[str, Any]:
        """What the job's handler logged in each attempt, oldest first: its
        `lines` and the bytes dropped (`dropped_bytes`) to keep within `logs.keep`."""
        return self._request("GET", f"{self._job(topic, id)}/logs")[1]

    def history(self, topics: Optional[Iterable[str]] = None, since: Duration = "3h") -> Dict[str, Any]:
        """Each topic's minutes (acks, failures, dead letters, CPU, starts
        and their lateness), at most 24 h back; every topic if none named."""
        query = {"topics": ",".join(topics) if topics is not None else None,
                 "since": _wire.duration(since, "since")}
        return self._request("GET", "/api/history", query=query)[1]

    def flows(self, before: Optional[int] = None, limit: int = 50) -> Dict[str, Any]:
        """The recent flows, newest first; `before` (ms) pages on from the
        last `created_ms` of the page before."""
        return self._request("GET", "/api/flows", query={"before": before, "limit": limit})[1]

    def schedules(self, next: int = 3) -> List[Dict[str, Any]]:
        """Each `[[schedule]]` with its `next` fire times (0 to 50), how far
        the runners have handled it and its last fire time's job and state."""
        return self._request("GET", "/api/schedules", query={"next": next})[1]["schedules"]


def _seconds(value: Duration) -> float:
    """A duration in seconds, for the socket's timeout (text: at most a day)."""
    if isinstance(value, str):
        units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
        for unit in ("ms", "s", "m", "h", "d"):
            if value.endswith(unit) and value[: -len(unit)].replace(".", "", 1).isdigit():
                return float(value[: -len(unit)]) * units[unit]
        return 86400.0
    if hasattr(value, "total_seconds"):
        return value.total_seconds()  # type: ignore[union-attr]
    return float(value)


__all__ = ["Client", "HourglassError"]
