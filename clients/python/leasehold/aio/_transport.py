"""How an asyncio client reaches the coordinator: Connect JSON over httpx, or gRPC over ``grpc.aio``.

The twins of the standard-library and grpcio transports (``leasehold._transport``, ``leasehold._grpc``): they
take and return the same proto JSON and raise the same exceptions, through the same shared code (the
Connect pieces in ``leasehold._connect``, gRPC's request building, answer reading and error mapping in
``leasehold._grpc``); only the I/O differs. httpx is imported only for ``transport="json"``, grpcio only for
``transport="grpc"``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

from .. import _connect as connect
from .._connect import SERVICE
from .._transport import TransportName
from ..errors import DeadlineExceededError, UnavailableError

if TYPE_CHECKING:
    import httpx

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
    """The asyncio transport named ``"json"`` (httpx) or ``"grpc"`` (grpc.aio) for ``url``."""
    if transport == "json":
        return AsyncJsonTransport(url, token)
    if transport == "grpc":
        from ._grpc import AsyncGrpcTransport  # grpcio only when gRPC is wanted

        return AsyncGrpcTransport(url, token)
    raise ValueError(f'transport must be "json" or "grpc", not {transport!r}')


# Connections kept open between calls: a worker's lanes, heartbeats and reports each hold one at a time.
_KEEPALIVE = 64


class AsyncJsonTransport:
    """The Connect protocol with JSON bodies over httpx's pool of HTTP/1.1 keep-alive connections."""

    def __init__(self, url: str, token: str | None) -> None:
        try:
            import httpx
        except ImportError as e:  # pragma: no cover - the extra tells
            raise ImportError('leasehold.aio over Connect JSON needs httpx: pip install "leasehold[aio]"') from e
        https, host, port, prefix = connect.base_of(url)
        netloc = f"[{host}]" if ":" in host else host
        self._where = f"{host}:{port}"
        self._base = f"{'https' if https else 'http'}://{netloc}:{port}{prefix}/{SERVICE}/"
        self._headers = connect.headers(token)
        self._httpx = httpx
        self._http: httpx.AsyncClient = httpx.AsyncClient(
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=_KEEPALIVE), timeout=None)

    async def call(self, method: str, request: JsonObject, timeout: float) -> JsonObject:
        """A unary RPC as a Connect JSON POST."""
        headers = {**self._headers, "Connect-Timeout-Ms": connect.timeout_ms(timeout)}
        try:
            resp = await self._http.post(self._base + method, content=connect.body(request), headers=headers,
                                         timeout=timeout)
        except self._httpx.TimeoutException as e:
            raise DeadlineExceededError(f"{method}: no answer within {timeout:g} s") from e
        except self._httpx.TransportError as e:
            raise UnavailableError(f"{method}: cannot reach {self._where}: {e!r}") from e
        if resp.status_code == 200:
            return json.loads(resp.content) if resp.content else {}
        raise connect.connect_error(method, resp.status_code, resp.content, resp.headers.get("x-request-id"))

    async def stream(self, method: str, request: JsonObject, timeout: float | None) -> AsyncIterator[JsonObject]:
        """A server-streaming RPC in Connect's enveloped JSON."""
        headers = {**self._headers, **connect.STREAM_TYPES}
        if timeout is not None:
            headers["Connect-Timeout-Ms"] = connect.timeout_ms(timeout)
        httpx = self._httpx
        request_id: str | None = None
        try:
            async with self._http.stream("POST", self._base + method, content=connect.envelope(request),
                                         headers=headers, timeout=timeout) as resp:
                request_id = resp.headers.get("x-request-id")
                if resp.status_code != 200:
                    raise connect.connect_error(method, resp.status_code, await resp.aread(), request_id)
                buffer = b""
                async for chunk in resp.aiter_bytes():
                    buffer += chunk
                    while len(buffer) >= 5:
                        end, length = connect.envelope_head(buffer[:5])
                        if len(buffer) < 5 + length:
                            break
                        payload, buffer = buffer[5:5 + length], buffer[5 + length:]
                        message = json.loads(payload) if payload else {}
                        if end:
                            error = connect.end_of_stream(method, message, request_id)
                            if error is not None:
                                raise error
                            return
                        yield message
        except httpx.TimeoutException as e:
            raise DeadlineExceededError(f"{method}: no message within {timeout:g} s", request_id=request_id) from e
        except httpx.TransportError as e:
            raise UnavailableError(f"{method}: stream broken: {e!r}", request_id=request_id) from e
        raise UnavailableError(f"{method}: stream ended without an end message", request_id=request_id)

    async def close(self) -> None:
        """Closes every connection."""
        await self._http.aclose()
