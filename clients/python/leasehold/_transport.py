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
import threading
from collections.abc import Iterator
from typing import Any, Literal, Protocol

from . import _connect as connect
from ._connect import SERVICE
from ._interrupt import Interrupt
from .errors import DeadlineExceededError, UnavailableError

JsonObject = dict[str, Any]

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


class JsonTransport:
    """The Connect protocol with JSON bodies over HTTP/1.1 keep-alive connections (one per thread)."""

    def __init__(self, url: str, token: str | None) -> None:
        self._https, self._host, self._port, self._prefix = connect.base_of(url)
        self._headers = connect.headers(token)
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
        body = connect.body(request)
        path = f"{self._prefix}/{SERVICE}/{method}"
        headers = {**self._headers, "Connect-Timeout-Ms": connect.timeout_ms(timeout)}
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
            raise connect.connect_error(method, resp.status, raw, resp.getheader("X-Request-Id"))
        raise AssertionError("unreachable")

    def stream(self, method: str, request: JsonObject, timeout: float | None) -> Iterator[JsonObject]:
        """A server-streaming RPC in Connect's enveloped JSON, on a connection of its own."""
        headers = {**self._headers, **connect.STREAM_TYPES}
        if timeout is not None:
            headers["Connect-Timeout-Ms"] = connect.timeout_ms(timeout)
        conn = self._new_connection(timeout)
        try:
            try:
                conn.request("POST", f"{self._prefix}/{SERVICE}/{method}", connect.envelope(request), headers)
                resp = conn.getresponse()
            except OSError as e:
                raise UnavailableError(f"{method}: cannot reach {self._host}:{self._port}: {e}") from e
            request_id = resp.getheader("X-Request-Id")
            if resp.status != 200:
                raise connect.connect_error(method, resp.status, resp.read(), request_id)
            while True:
                try:
                    head = resp.read(5)
                    if len(head) < 5:
                        raise UnavailableError(f"{method}: stream ended without an end message", request_id=request_id)
                    end, length = connect.envelope_head(head)
                    payload = resp.read(length)
                except (OSError, http.client.HTTPException) as e:
                    raise UnavailableError(f"{method}: stream broken: {e!r}", request_id=request_id) from e
                message = json.loads(payload) if payload else {}
                if end:
                    error = connect.end_of_stream(method, message, request_id)
                    if error is not None:
                        raise error
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
