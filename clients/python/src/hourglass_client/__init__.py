"""hourglass-client: enqueue and follow jobs of an hourglass job runner over
its HTTP API, blocking (`Client`) or with asyncio (`AsyncClient`).

    from hourglass_client import Client

    hg = Client("http://127.0.0.1:9090", token="...")
    hg.enqueue("order_cancel", {"order_id": 1042}, id="order-1042", delay="30m")

No dependency beyond the standard library; with `opentelemetry-api`
installed (the `otel` extra), each enqueue carries the active span's trace
context.
"""

from ._async import AsyncClient
from ._client import Client
from ._errors import BadRequest, Conflict, HourglassError, NotFound, Unauthorized, Unavailable
from ._wire import Batch, DeadPage, End, Enqueued, Event, Job

__version__ = "0.1.0"

__all__ = [
    "AsyncClient", "Client", "Job", "Enqueued", "Batch", "End", "Event", "DeadPage",
    "HourglassError", "BadRequest", "Unauthorized", "NotFound", "Conflict", "Unavailable",
]
