"""How an asyncio client reaches the coordinator: Connect JSON over aiohttp, or gRPC over ``grpc.aio``.

The twins of the standard-library and grpcio transports (``leasehold._transport``, ``leasehold._grpc``): they
take and return the same proto JSON and raise the same exceptions, through the same shared code (the
Connect pieces in ``leasehold._connect``, gRPC's request building, answer reading and error mapping in
``leasehold._grpc``); only the I/O differs. aiohttp is imported only for ``transport="json"``, grpcio only for
``transport="grpc"``.

Why aiohttp for Connect JSON: measured against a keep-alive HTTP server on this kind of machine, one call cost
the client 0.16-0.22 ms of CPU through aiohttp and 0.6-1.8 ms through httpx (its pure-Python HTTP/1.1 stack
and connection pool), where the sync transport's ``http.client`` costs 0.1 ms; a worker makes a call per batch
of tasks, so that difference is most of its CPU per task.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

from .. import _connect as connect
from .._connect import SERVICE
from .._transport import TransportName
from ..errors import DeadlineExceededError, UnavailableError

if TYPE_CHECKING:
    import aiohttp

JsonObject = dict[str, Any]

__all__ = ["AsyncJsonTransport", "AsyncTransport", "make_async_transport"]


class AsyncTransport(Protocol):
    """One coordinator connection for coroutines of one event loop."""

    async def call(self, method: str, request: JsonObject, timeout: float) -> JsonObject:
        """A unary RPC; raises a :class:`~leasehold.errors.LeaseholdError` subclass on failure."""
        ...

    def stream(self, method: str, request: JsonObject, timeout: float | None) -> AsyncIterator[JsonObject]:
        """A server-streaming RPC; the iterator raises on failure."""
        ...

    async def close(self) -> None:
        """Closes the connections."""
        ...


def make_async_transport(url: str, token: str | None, transport: TransportName) -> AsyncTransport:
    """The asyncio transport named ``"json"`` (aiohttp) or ``"grpc"`` (grpc.aio) for ``url``."""
    if transport == "json":
        return AsyncJsonTransport(url, token)
    if transport == "grpc":
        from ._grpc import AsyncGrpcTransport  # grpcio only when gRPC is wanted

        return AsyncGrpcTransport(url, token)
    raise ValueError(f'transport must be "json" or "grpc", not {transport!r}')


# Connections kept open between calls: a worker's lanes, heartbeats and reports each hold one at a time.
_KEEPALIVE_SECONDS = 30.0


class AsyncJsonTransport:
    """The Connect protocol with JSON bodies over aiohttp's pool of HTTP/1.1 keep-alive connections.

    The session is made on the first call, inside the event loop that runs it (aiohttp binds it to that
    loop), so a client may be created before the loop starts.
    """

    def __init__(self, url: str, token: str | None) -> None:
        try:
            import aiohttp
        except ImportError as e:  # pragma: no cover - the extra tells
            raise ImportError('leasehold.aio over Connect JSON needs aiohttp: pip install "leasehold[aio]"') from e
        https, host, port, prefix = connect.base_of(url)
        netloc = f"[{host}]" if ":" in host else host
        self._where = f"{host}:{port}"
        self._base = f"{'https' if https else 'http'}://{netloc}:{port}{prefix}/{SERVICE}/"
        self._headers = connect.headers(token)
        self._aiohttp = aiohttp
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            aiohttp = self._aiohttp
            # No cap on connections (the worker bounds its calls), no cookies, the system's proxies ignored:
            # a coordinator is reached directly.
            connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=_KEEPALIVE_SECONDS)
            self._session = aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                                                  skip_auto_headers=("User-Agent",))
        return self._session

    async def call(self, method: str, request: JsonObject, timeout: float) -> JsonObject:
        """A unary RPC as a Connect JSON POST."""
        aiohttp = self._aiohttp
        headers = {**self._headers, "Connect-Timeout-Ms": connect.timeout_ms(timeout)}
        try:
            async with self._http().post(self._base + method, data=connect.body(request), headers=headers,
                                         timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                raw = await resp.read()
                status, request_id = resp.status, resp.headers.get("X-Request-Id")
        except asyncio.TimeoutError as e:
            raise DeadlineExceededError(f"{method}: no answer within {timeout:g} s") from e
        except aiohttp.ClientError as e:
            raise UnavailableError(f"{method}: cannot reach {self._where}: {e!r}") from e
        if status == 200:
            return json.loads(raw) if raw else {}
        raise connect.connect_error(method, status, raw, request_id)

    async def stream(self, method: str, request: JsonObject, timeout: float | None) -> AsyncIterator[JsonObject]:
        """A server-streaming RPC in Connect's enveloped JSON."""
        aiohttp = self._aiohttp
        headers = {**self._headers, **connect.STREAM_TYPES}
        if timeout is not None:
            headers["Connect-Timeout-Ms"] = connect.timeout_ms(timeout)
        request_id: str | None = None
        try:
            async with self._http().post(self._base + method, data=connect.envelope(request), headers=headers,
                                         timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout)) as resp:
                request_id = resp.headers.get("X-Request-Id")
                if resp.status != 200:
                    raise connect.connect_error(method, resp.status, await resp.read(), request_id)
                while True:
                    try:
                        head = await resp.content.readexactly(5)
                    except asyncio.IncompleteReadError:
                        break
                    end, length = connect.envelope_head(head)
                    payload = await resp.content.readexactly(length) if length else b""
                    message = json.loads(payload) if payload else {}
                    if end:
                        error = connect.end_of_stream(method, message, request_id)
                        if error is not None:
                            raise error
                        return
                    yield message
        except asyncio.TimeoutError as e:
            raise DeadlineExceededError(f"{method}: no message within {timeout:g} s", request_id=request_id) from e
        except (aiohttp.ClientError, asyncio.IncompleteReadError) as e:
            raise UnavailableError(f"{method}: stream broken: {e!r}", request_id=request_id) from e
        raise UnavailableError(f"{method}: stream ended without an end message", request_id=request_id)

    async def close(self) -> None:
        """Closes every connection."""
        if self._session is not None:
            await self._session.close()
            self._session = None
