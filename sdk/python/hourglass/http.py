"""Outbound HTTP for Python handlers, over wasi:http: blocking calls that
reach only the hosts the topic is granted in queues.toml
(`grants = { http = ["https://api.example.com"] }`).

    from hourglass import http

    res = http.get("https://api.example.com/orders/42")
    order = res.json()
    res = http.post_json("https://api.example.com/cancel", {"order": 42})
    if res.status >= 500:
        ...

A request that cannot be made (denied by the grants, refused, timed out)
raises HttpError; left uncaught it fails the attempt, which is retried with
the topic's backoff and the error as its reason. Redirects are not followed.
"""

import json as _json
from urllib.parse import urlsplit as _urlsplit

from componentize_py_types import Err as _Err
from componentize_py_types import Ok as _Ok
from wit_world.imports import outgoing_handler as _outgoing
from wit_world.imports import streams as _streams
from wit_world.imports import types as _http

__all__ = ["HttpError", "Response", "request", "get", "post", "post_json"]

# wasi streams take at most 4096 bytes per blocking write
_WRITE = 4096
_READ = 64 * 1024

_METHODS = {
    "GET": _http.Method_Get, "HEAD": _http.Method_Head, "POST": _http.Method_Post,
    "PUT": _http.Method_Put, "DELETE": _http.Method_Delete, "OPTIONS": _http.Method_Options,
    "PATCH": _http.Method_Patch, "TRACE": _http.Method_Trace, "CONNECT": _http.Method_Connect,
}


class HttpError(Exception):
    """A request that got no response. `denied` is true when the topic's
    grants do not allow the host (nothing was sent)."""

    def __init__(self, message, denied=False):
        super().__init__(message)
        self.denied = denied


class Response:
    """A response: `status`, `headers` (a list of (name, value) pairs) and `body` (bytes)."""

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def ok(self):
        """True for a 2xx status."""
        return 200 <= self.status < 300

    def header(self, name):
        """The first value of header `name` (any case), or None."""
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def text(self):
        return self.body.decode("utf-8", errors="replace")

    def json(self):
        """The body parsed as JSON (ValueError if it is not)."""
        return _json.loads(self.body)

    def retry_after(self):
        """The Retry-After header in seconds, when it is a number; else None."""
        value = self.header("retry-after")
        try:
            return max(0, int(value)) if value is not None else None
        except ValueError:
            return None

    def __repr__(self):
        return f"Response(status={self.status}, {len(self.body)} bytes)"


def _describe(code):
    """A readable reason for a wasi:http error-code."""
    name = type(code).__name__.removeprefix("ErrorCode_")
    if name == "HttpRequestDenied":
        return "denied: the topic's grants do not allow this host"
    words = "".join(" " + c.lower() if c.isupper() else c for c in name).strip()
    value = getattr(code, "value", None)
    return f"{words} ({value})" if value not in (None, "") else words


def request(method, url, *, headers=None, body=None, timeout=None):
    """Send one request and read the whole response.

    `headers` is a dict or a list of (name, value) pairs; `body` bytes or a
    str; `timeout` seconds until the response starts (the topic's limits and
    the attempt's time limit apply too).
    """
    parts = _urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise HttpError(f"{url!r} is not an http:// or https:// URL")
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    verb = method.upper()
    data = body.encode() if isinstance(body, str) else bytes(body or b"")
    # a body's length goes with it, as curl and browsers send it: without one the
    # upload is chunked, which some servers refuse (411, S3's presigned PUT)
    if (data or verb in ("POST", "PUT", "PATCH")) and not any(
        str(k).lower() == "content-length" for k, _ in pairs
    ):
        pairs.append(("content-length", str(len(data))))
    fields = _http.Fields.from_list(
        [(str(k), v if isinstance(v, bytes) else str(v).encode()) for k, v in pairs]
    )
    req = _http.OutgoingRequest(fields)
    req.set_method(_METHODS[verb]() if verb in _METHODS else _http.Method_Other(verb))
    req.set_scheme(_http.Scheme_Https() if parts.scheme == "https" else _http.Scheme_Http())
    req.set_authority(parts.netloc)
    req.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    out_body = req.body()
    options = None
    if timeout is not None:
        options = _http.RequestOptions()
        options.set_first_byte_timeout(int(timeout * 1_000_000_000))
    try:
        future = _outgoing.handle(req, options)
    except _Err as e:
        raise HttpError(f"{verb} {url}: {_describe(e.value)}",
                        denied=isinstance(e.value, _http.ErrorCode_HttpRequestDenied)) from None
    sent = True
    with out_body.write() as stream:
        for i in range(0, len(data), _WRITE):
            try:
                stream.blocking_write_and_flush(data[i:i + _WRITE])
            except _Err:
                sent = False  # the request failed; the response says why
                break
    try:
        _http.OutgoingBody.finish(out_body, None)
    except _Err as e:
        # short of its length after a broken upload: the response says why
        if sent:
            raise HttpError(f"{verb} {url}: {_describe(e.value)}") from None
    with future:
        while (answer := future.get()) is None:
            with future.subscribe() as ready:
                ready.block()
    if isinstance(answer, _Err) or isinstance(answer.value, _Err):
        code = answer.value.value if isinstance(answer, _Ok) else None
        denied = isinstance(code, _http.ErrorCode_HttpRequestDenied)
        reason = _describe(code) if code is not None else "no response"
        raise HttpError(f"{verb} {url}: {reason}", denied=denied)
    with answer.value.value as response:
        status = response.status()
        with response.headers() as fields:
            pairs = [(k, v.decode("latin-1")) for k, v in fields.entries()]
        incoming = response.consume()
        chunks = []
        with incoming.stream() as stream:
            while True:
                try:
                    chunks.append(stream.blocking_read(_READ))
                except _Err as e:
                    if isinstance(e.value, _streams.StreamError_Closed):
                        break
                    raise HttpError(f"{verb} {url}: the response body broke off") from None
        _http.IncomingBody.finish(incoming).__exit__(None, None, None)
    return Response(status, pairs, b"".join(chunks))


def get(url, **kwargs):
    """GET `url`."""
    return request("GET", url, **kwargs)


def post(url, body, **kwargs):
    """POST `body` (bytes or str) to `url`."""
    return request("POST", url, body=body, **kwargs)


def post_json(url, value, **kwargs):
    """POST `value` as JSON to `url` (Content-Type: application/json)."""
    headers = dict(kwargs.pop("headers", None) or {})
    headers.setdefault("content-type", "application/json")
    return request("POST", url, body=_json.dumps(value), headers=headers, **kwargs)
