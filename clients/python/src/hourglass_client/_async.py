"""The asyncio client: the blocking client's calls, each run in a worker
thread (`asyncio.to_thread`), so it needs no dependency and never blocks the
event loop."""

import asyncio
import functools
from typing import Any, AsyncIterator, Dict, Iterable, List, Mapping, Optional, Union

from . import _wire
from ._client import Client
from ._wire import Batch, DeadPage, Duration, End, Enqueued, Event, Job, Payload


class AsyncClient:
    """`Client`'s surface with `await` (and `async for` over `events`); the
    same arguments, answers and exceptions."""

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None, timeout: float = 30.0):
        self.sync = Client(url, token, timeout)

    async def _run(self, method: str, *args: Any, **kwargs: Any) -> Any:
        call = functools.partial(getattr(self.sync, method), *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(None, call)

    async def enqueue(self, topic: str, payload: Payload, **options: Any) -> Enqueued:
        """As `Client.enqueue`. The trace context is read here, in the
        caller's context, not in the worker thread."""
        body = _wire.job_body(Job(payload, **options))
        return _wire.enqueued(await self._run("_post_jobs", topic, body, _wire.trace_headers()))

    async def enqueue_many(self, topic: str, jobs: Iterable[Union[Job, Mapping[str, Any]]]) -> Batch:
        """As `Client.enqueue_many`."""
        body = [_wire.job_body(_wire.as_job(j)) for j in jobs]
        return _wire.batch(await self._run("_post_jobs", topic, body, _wire.trace_headers()))

    async def get_job(self, topic: str, id: str) -> Dict[str, Any]:
        return await self._run("get_job", topic, id)

    async def cancel(self, topic: str, id: str) -> str:
        return await self._run("cancel", topic, id)

    async def result(self, topic: str, id: str, wait: Optional[Duration] = None) -> Optional[End]:
        return await self._run("result", topic, id, wait)

    async def wait(self, topic: str, id: str, timeout: float = 60.0, poll: float = 25.0) -> End:
        return await self._run("wait", topic, id, timeout, poll)

    async def events(self, topic: str, id: str) -> AsyncIterator[Event]:
        """As `Client.events`, one event per `await`."""
        loop = asyncio.get_running_loop()
        stream = self.sync.events(topic, id)
        while True:
            event = await loop.run_in_executor(None, next, stream, None)
            if event is None:
                return
            yield event

    async def signal(self, topic: str, id: str, name: str, payload: bytes = b"") -> str:
        return await self._run("signal", topic, id, name, payload)

    async def upgrade(self, topic: str, to: str, ids: Optional[Iterable[str]] = None, **options: Any) -> Dict[str, Any]:
        return await self._run("upgrade", topic, to, ids, **options)

    async def dead(self, topic: str, offset: int = 0, limit: int = 50) -> DeadPage:
        return await self._run("dead", topic, offset, limit)

    async def retry_dead(self, topic: str, id: Optional[str] = None, **options: Any) -> int:
        return await self._run("retry_dead", topic, id, **options)

    async def purge_dead(self, topic: str, id: Optional[str] = None) -> int:
        return await self._run("purge_dead", topic, id)

    async def pause(self, topic: str) -> bool:
        return await self._run("pause", topic)

    async def resume(self, topic: str) -> bool:
        return await self._run("resume", topic)

    async def topics(self) -> List[Dict[str, Any]]:
        return await self._run("topics")

    async def stats(self) -> Dict[str, Any]:
        return await self._run("stats")

    async def scale(self, topic: Optional[str] = None) -> Dict[str, Any]:
        return await self._run("scale", topic)

    async def jobs(self, topic: str, state: str, **filters: Any) -> Dict[str, Any]:
        return await self._run("jobs", topic, state, **filters)

    async def bulk(self, topic: str, action: str, ids: Iterable[str]) -> Dict[str, Any]:
        return await self._run("bulk", topic, action, list(ids))

    async def logs(self, topic: str, id: str) -> Dict[str, Any]:
        return await self._run("logs", topic, id)

    async def history(self, topics: Optional[Iterable[str]] = None, since: Duration = "3h") -> Dict[str, Any]:
        return await self._run("history", None if topics is None else list(topics), since)

    async def flows(self, before: Optional[int] = None, limit: int = 50) -> Dict[str, Any]:
        return await self._run("flows", before, limit)

    async def schedules(self, next: int = 3) -> List[Dict[str, Any]]:
        return await self._run("schedules", next)
