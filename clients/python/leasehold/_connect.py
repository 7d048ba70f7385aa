"""The Connect protocol's JSON side, shared by the JSON transports (``_transport`` and ``aio._transport``).

The path of a method, the headers, the envelopes of a streaming call, and an error answer read as the typed
exception: the same in the standard-library transport and the asyncio one, so both raise alike.
"""

from __future__ import annotations

import json
import struct
from typing import Any
from urllib.parse import urlsplit

from .errors import FieldViolation, LeaseholdError, error_for

JsonObject = dict[str, Any]

SERVICE = "leasehold.queue.v1.QueueService"

# HTTP statuses of Connect errors whose body did not say (e.g. a proxy's 502).
HTTP_CODES = {400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied", 404: "not_found",
               408: "deadline_exceeded", 409: "aborted", 429: "unavailable", 502: "unavailable",
               503: "unavailable", 504: "deadline_exceeded"}


def base_of(url: str) -> tuple[bool, str, int, str]:
    """``(https, host, port, path prefix)`` of a coordinator URL (``http://host:port`` or ``https://…``)."""
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"coordinator URL must be http://host:port or https://host:port, not {url!r}")
    https = parts.scheme == "https"
    return https, parts.hostname, parts.port or (443 if https else 80), parts.path.rstrip("/")


def headers(token: str | None) -> dict[str, str]:
    """The headers of every unary call (a streaming call changes the content type)."""
    h = {"Content-Type": "application/json", "Accept": "application/json", "Connect-Protocol-Version": "1"}
    if token:
        h["Authorization"] = f"Bearer {token}"
    return h


STREAM_TYPES = {"Content-Type": "application/connect+json", "Accept": "application/connect+json"}


def timeout_ms(timeout: float) -> str:
    """The ``Connect-Timeout-Ms`` of a call given ``timeout`` seconds."""
    return str(max(1, int(timeout * 1000)))


def body(request: JsonObject) -> bytes:
    """A request in compact JSON."""
    return json.dumps(request, separators=(",", ":")).encode()


def envelope(request: JsonObject) -> bytes:
    """A streaming call's request: one enveloped JSON message (flags 0, its length, the message)."""
    raw = body(request)
    return struct.pack(">BI", 0, len(raw)) + raw


def envelope_head(head: bytes) -> tuple[bool, int]:
    """``(end of stream, length)`` of an envelope's 5-byte head."""
    flags, length = struct.unpack(">BI", head)
    return bool(flags & 0x02), int(length)


def end_of_stream(method: str, message: JsonObject, request_id: str | None) -> LeaseholdError | None:
    """The error a stream's end message carries, if any (``None``: the stream ended well)."""
    err = message.get("error")
    if not err:
        return None
    return error_for(str(err.get("code", "unknown")), f"{method}: {err.get('message', '')}", request_id=request_id,
                     **details_of(err))


def details_of(err: dict[str, Any]) -> dict[str, Any]:
    """The rich details of an error body as :func:`~leasehold.errors.error_for` keywords.

    The field violations come from the REST routes' ``violations`` or Connect's ``google.rpc.BadRequest``
    detail, the reason and metadata from its ``google.rpc.ErrorInfo``. Connect sends each detail as its
    type, its binary ``value`` and a JSON ``debug`` copy; the copy is read, so the JSON transport needs no
    protobuf runtime.
    """
    found = err.get("violations")
    violations: list[Any] = found if isinstance(found, list) else []
    reason, metadata = "", {}
    for detail in err.get("details") or ():
        debug = detail.get("debug") if isinstance(detail, dict) else None
        if not isinstance(debug, dict):
            continue
        kind = str(detail.get("type", ""))
        if kind.endswith("google.rpc.BadRequest") and not isinstance(found, list):
            violations.extend(debug.get("field_violations") or debug.get("fieldViolations") or ())
        elif kind.endswith("google.rpc.ErrorInfo"):
            reason = str(debug.get("reason", ""))
            metadata = {str(k): str(v) for k, v in (debug.get("metadata") or {}).items()}
    return {"violations": [FieldViolation(str(v.get("field", "")), str(v.get("description", "")))
                           for v in violations if isinstance(v, dict)],
            "reason": reason, "metadata": metadata}



def connect_error(method: str, status: int, raw: bytes, request_id: str | None) -> LeaseholdError:
    """A Connect (or REST) error answer as the typed exception: its code, message, request id and details."""
    code, message = HTTP_CODES.get(status, "unknown"), raw.decode("utf-8", "replace")[:500]
    details: dict[str, Any] = {}
    try:
        payload = json.loads(raw)
        # Connect puts code and message at the top level; the REST routes under "error".
        err = payload.get("error", payload) if isinstance(payload, dict) else {}
        if isinstance(err, dict):
            code = str(err.get("code") or code)
            message = str(err.get("message") or message)
            request_id = err.get("request_id") or request_id
            details = details_of(err)
    except ValueError:
        pass
    return error_for(code, f"{method}: {message}", request_id=request_id, http_status=status, **details)
