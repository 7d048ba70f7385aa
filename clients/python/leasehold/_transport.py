"""How calls reach the coordinator: Connect JSON over HTTP/1.1 (standard library) or gRPC (grpcio).

Both take and return JSON objects with proto field names, so everything above
this module is transport-agnostic. gRPC is imported only when asked for, so the
JSON transport works where grpcio and protobuf are not installed.
"""

from __future__ import annotations

import functools
import http.client
import json
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from ._interrupt import Interrupt
from .errors import DeadlineExceededError, FieldViolation, LeaseholdError, UnavailableError, error_for

JsonObject = dict[str, Any]

SERVICE = "leasehold.queue.v1.QueueService"

__all__ = ["Interrupt", "JsonTransport", "Transport", "TransportName", "make_transport"]


class Transport(Protocol):
    """One coordinator connection (thread-safe)."""

    def call(self, method: str, request: JsonObject, timeout: float, interrupt: Interrupt | None = None) -> JsonObject:
        """A unary RPC; raises a :class:`~leasehold.errors.LeaseholdError` subclass on failure."""
        ...

    def stream(self, method: str, request: JsonObject, timeout: float | None) -> Iterator[JsonObject]:
        """A server-streaming RPC; the iterator raises on failure."""
        ...

    def close(self) -> None:
        """Closes the connections."""
        ...


TransportName = Literal["json", "grpc"]


def make_transport(url: str, token: str | None, transport: TransportName) -> Transport:
    """The transport named ``"json"`` or ``"grpc"`` for ``url`` (``http://host:port`` or ``https://…``)."""
    if transport == "json":
        return JsonTransport(url, token)
    if transport == "grpc":
        from ._grpc import GrpcTransport  # grpcio only when gRPC is wanted

        return GrpcTransport(url, token)
    raise ValueError(f'transport must be "json" or "grpc", not {transport!r}')


# HTTP statuses of Connect errors whose body did not say (e.g. a proxy's 502).
_HTTP_CODES = {400: "invalid_argument", 401: "unauthenticated", 403: "permission_denied", 404: "not_found",
               408: "deadline_exceeded", 409: "aborted", 429: "unavailable", 502: "unavailable",
               503: "unavailable", 504: "deadline_exceeded"}

# Errors of a kept-alive connection the server closed while idle: nothing was
# processed, so the request is sent again once on a fresh connection.
_STALE = (http.client.RemoteDisconnected, http.client.BadStatusLine, BrokenPipeError, ConnectionResetError,
          ConnectionAbortedError)


def _shutdown(sock: socket.socket | None) -> None:
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _details_of(err: dict[str, Any]) -> dict[str, Any]:
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


class JsonTransport:
    """The Connect protocol with JSON bodies over HTTP/1.1 keep-alive connections (one per thread)."""

    def __init__(self, url: str, token: str | None) -> None:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"coordinator URL must be http://host:port or https://host:port, not {url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._headers = {"Content-Type": "application/json", "Accept": "application/json",
                         "Connect-Protocol-Version": "1"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._local = threading.local()
        self._all: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._ssl = ssl.create_default_context() if self._https else None

    def _new_connection(self, timeout: float | None) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _connection(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        reused = conn is not None
        if conn is None:
            conn = self._new_connection(timeout)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, reused

    def _drop(self) -> None:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
            with self._lock:
                if conn in self._all:
                    self._all.remove(conn)

    def call(self, method: str, request: JsonObject, timeout: float, interrupt: Interrupt | None = None) -> JsonObject:
        """A unary RPC as a Connect JSON POST."""
        body = json.dumps(request, separators=(",", ":")).encode()
        path = f"{self._prefix}/{SERVICE}/{method}"
        headers = {**self._headers, "Connect-Timeout-Ms": str(max(1, int(timeout * 1000)))}
        for attempt in (1, 2):
            conn, reused = self._connection(timeout)
            try:
                conn.request("POST", path, body, headers)
                if interrupt is not None:
                    interrupt.arm(functools.partial(_shutdown, conn.sock))
                try:
                    resp = conn.getresponse()
                    raw = resp.read()
                finally:
                    if interrupt is not None:
                        interrupt.disarm()
            except _STALE as e:
                self._drop()
                if reused and attempt == 1:
                    continue
                raise UnavailableError(f"{method}: connection lost: {e!r}") from e
            except TimeoutError as e:
                self._drop()
                raise DeadlineExceededError(f"{method}: no answer within {timeout:g} s") from e
            except OSError as e:
                self._drop()
                raise UnavailableError(f"{method}: cannot reach {self._host}:{self._port}: {e}") from e
            if resp.getheader("Connection", "").lower() == "close":
                self._drop()
            if resp.status == 200:
                return json.loads(raw) if raw else {}
            raise self._error(method, resp.status, raw, resp.getheader("X-Request-Id"))
        raise AssertionError("unreachable")

    @staticmethod
    def _error(method: str, status: int, raw: bytes, request_id: str | None) -> LeaseholdError:
        code, message = _HTTP_CODES.get(status, "unknown"), raw.decode("utf-8", "replace")[:500]
        details: dict[str, Any] = {}
        try:
            payload = json.loads(raw)
            # Connect puts code and message at the top level; the REST routes under "error".
            err = payload.get("error", payload) if isinstance(payload, dict) else {}
            if isinstance(err, dict):
                code = str(err.get("code") or code)
                message = str(err.get("message") or message)
                request_id = err.get("request_id") or request_id
                details = _details_of(err)
        except ValueError:
            pass
        return error_for(code, f"{method}: {message}", request_id=request_id, http_status=status, **details)

    def stream(self, method: str, request: JsonObject, timeout: float | None) -> Iterator[JsonObject]:
        """A server-streaming RPC in Connect's enveloped JSON, on a connection of its own."""
        body = json.dumps(request, separators=(",", ":")).encode()
        headers = {**self._headers, "Content-Type": "application/connect+json", "Accept": "application/connect+json"}
        if timeout is not None:
            headers["Connect-Timeout-Ms"] = str(max(1, int(timeout * 1000)))
        conn = self._new_connection(timeout)
        try:
            try:
                conn.request("POST", f"{self._prefix}/{SERVICE}/{method}", struct.pack(">BI", 0, len(body)) + body,
                             headers)
                resp = conn.getresponse()
            except OSError as e:
                raise UnavailableError(f"{method}: cannot reach {self._host}:{self._port}: {e}") from e
            request_id = resp.getheader("X-Request-Id")
            if resp.status != 200:
                raise self._error(method, resp.status, resp.read(), request_id)
            while True:
                try:
                    head = resp.read(5)
                    if len(head) < 5:
                        raise UnavailableError(f"{method}: stream ended without an end message", request_id=request_id)
                    flags, length = struct.unpack(">BI", head)
                    payload = resp.read(length)
                except (OSError, http.client.HTTPException) as e:
                    raise UnavailableError(f"{method}: stream broken: {e!r}", request_id=request_id) from e
                message = json.loads(payload) if payload else {}
                if flags & 0x02:
                    err = message.get("error")
                    if err:
                        raise error_for(str(err.get("code", "unknown")), f"{method}: {err.get('message', '')}",
                                        request_id=request_id, **_details_of(err))
                    return
                yield message
        finally:
            conn.close()

    def close(self) -> None:
        """Closes every connection of every thread."""
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            conn.close()
