"""What an ``async def`` handler sees: the leased :class:`AsyncTask`, whose cancellation is asyncio's own."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from .._task import TaskCancelled, TaskFields
from ..models import TaskRecord

__all__ = ["AsyncTask"]

#: Where an async task's progress reports go: the worker's ReportProgress (raises TaskCancelled when refused).
AsyncProgressSink = Callable[["AsyncTask", float, str, "str | None"], Awaitable[None]]


class AsyncTask(TaskFields):
    """One leased task, handed to an ``async def`` handler of an :class:`~leasehold.aio.AsyncWorker`.

    Its fields are :class:`~leasehold.Task`'s (``id``, ``job_id``, ``chunk_index``, ``parameters``, ...). The
    worker heartbeats the lease by itself. When the task is cancelled (its job cancelled, or failed by another
    chunk) or its lease lost, or a drain gives it back, the handler's coroutine is cancelled: an
    :class:`asyncio.CancelledError` is raised at the ``await`` it is waiting on, as asyncio cancels any task.
    Let it propagate and nothing is reported; catch it to clean up (``try``/``finally`` is enough), and a
    :class:`~leasehold.Result` the handler still returns is reported as the sync worker reports one (kept when
    the task was cancelled and the result arrives within the lease; dropped when the lease is lost). Work that
    must not be interrupted goes under :func:`asyncio.shield`. :attr:`cancelled` and :attr:`cancel_event`
    tell the same for code that would rather look.
    """

    def __init__(self, record: TaskRecord, worker_id: str, progress: AsyncProgressSink) -> None:
        super().__init__(record, worker_id)
        self.cancel_event = asyncio.Event()
        self._progress = progress

    @property
    def cancelled(self) -> bool:
        """Whether the task was cancelled or its lease lost (a result it returns may be dropped)."""
        return self.cancel_event.is_set()

    async def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Waits until the task is cancelled or ``timeout`` seconds pass; returns :attr:`cancelled`."""
        try:
            await asyncio.wait_for(self.cancel_event.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return self.cancelled

    def raise_if_cancelled(self) -> None:
        """Raises :class:`asyncio.CancelledError` when the task was cancelled or its lease lost."""
        if self.cancelled:
            raise asyncio.CancelledError(self.cancel_reason or "task cancelled")

    async def progress(self, fraction: float, message: str = "", *, partial_result_uri: str | None = None) -> None:
        """Reports progress (0–1) with an optional status line; also extends the lease.

        Raises :class:`asyncio.CancelledError` when the coordinator says the task is cancelled or the lease
        lost. When the coordinator cannot be reached the report is skipped with a log line (the heartbeat
        keeps trying).
        """
        self.raise_if_cancelled()
        try:
            await self._progress(self, fraction, message, partial_result_uri)
        except TaskCancelled as e:
            raise asyncio.CancelledError(str(e) or "task cancelled") from None

    def _cancel(self, reason: str) -> None:
        if not self.cancel_event.is_set():
            self.cancel_reason = reason
            self.cancel_event.set()
