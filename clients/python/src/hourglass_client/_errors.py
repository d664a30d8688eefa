"""What the API answers when it refuses: one exception per kind, each with
the HTTP status, the message and, for bad input, the field at fault."""

from typing import Optional


class HourglassError(Exception):
    """A request the API refused or could not serve.

    `status` is the HTTP status (0 when the server could not be reached),
    `message` the API's `error`, `field` the field at fault (`delay`,
    `[3].max_attempts`, ...) when the API names one.
    """

    def __init__(self, status: int, message: str, field: Optional[str] = None):
        self.status = status
        self.message = message
        self.field = field
        where = f" (field {field})" if field else ""
        super().__init__(f"{status}: {message}{where}" if status else f"{message}{where}")


class BadRequest(HourglassError):
    """400: bad input; `field` names what is wrong."""


class Unauthorized(HourglassError):
    """401: no token, or a wrong one."""


class NotFound(HourglassError):
    """404: an unknown topic, job, flow or dead letter."""


class Conflict(HourglassError):
    """409: the job or topic is not in a state that allows it."""


class Unavailable(HourglassError):
    """503 (Redis unreachable: nothing was changed, try again) or the server
    could not be reached at all (status 0)."""


_BY_STATUS = {400: BadRequest, 401: Unauthorized, 404: NotFound, 409: Conflict, 503: Unavailable}


def error_for(status: int, message: str, field: Optional[str]) -> HourglassError:
    """The exception for an answer with this status."""
    return _BY_STATUS.get(status, HourglassError)(status, message, field)
