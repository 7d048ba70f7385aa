"""Leasehold for asyncio: the submitter's :class:`AsyncClient` and the :class:`AsyncWorker`.

:class:`AsyncClient` has every :class:`~leasehold.Client` call as a coroutine; :class:`AsyncWorker` runs
``async def`` handlers (and plain ones in a thread pool) as :class:`~leasehold.Worker` runs its handlers.

Over Connect JSON (``transport="json"``, the default) through aiohttp, and over gRPC (``transport="grpc"``)
through ``grpc.aio``; ``pip install "leasehold[aio]"`` brings aiohttp. Answers, exceptions, results and task
failures are the very classes of :mod:`leasehold`, read and raised by the same code.
"""

from ._task import AsyncTask
from .client import AsyncClient
from .worker import AsyncWorker

__all__ = ["AsyncClient", "AsyncTask", "AsyncWorker"]
