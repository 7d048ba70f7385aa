"""The asyncio gRPC transport: ``grpc.aio`` over HTTP/2 (cleartext for http://, TLS for https://).

Requests are built, answers read and errors mapped by the functions of the grpcio transport
(``leasehold._grpc``); this module only awaits the calls. The channel is made on the first call, inside the
event loop that runs it, so a client may be created before the loop starts (at a module's top, say).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import grpc.aio

from .._grpc import CHANNEL_OPTIONS, metadata_of, request_message, response_json, rpc_error, target_of
from ..queue.v1 import queue_pb2_grpc

JsonObject = dict[str, Any]


class AsyncGrpcTransport:
    """Awaits generated ``QueueServiceStub`` methods on a ``grpc.aio`` channel; messages from and to proto JSON."""

    def __init__(self, url: str, token: str | None) -> None:
        self._https, self._target = target_of(url)
        self._metadata = metadata_of(token)
        self._channel: Any = None
        self._stub: Any = None

    def _stub_now(self) -> Any:
        if self._stub is None:
            if self._https:
                self._channel = grpc.aio.secure_channel(self._target, grpc.ssl_channel_credentials(),
                                                        options=CHANNEL_OPTIONS)
            else:
                self._channel = grpc.aio.insecure_channel(self._target, options=CHANNEL_OPTIONS)
            self._stub = queue_pb2_grpc.QueueServiceStub(self._channel)  # type: ignore[no-untyped-call]
        return self._stub

    async def call(self, method: str, request: JsonObject, timeout: float) -> JsonObject:
        """A unary RPC."""
        message = request_message(method, request)
        try:
            response = await getattr(self._stub_now(), method)(message, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise rpc_error(method, e) from None
        return response_json(response)

    async def stream(self, method: str, request: JsonObject, timeout: float | None) -> AsyncIterator[JsonObject]:
        """A server-streaming RPC."""
        call = getattr(self._stub_now(), method)(request_message(method, request), timeout=timeout,
                                                 metadata=self._metadata)
        try:
            async for message in call:
                yield response_json(message)
        except grpc.RpcError as e:
            raise rpc_error(method, e) from None
        finally:
            call.cancel()

    async def close(self) -> None:
        """Closes the channel."""
        if self._channel is not None:
            await self._channel.close()
            self._channel = self._stub = None
