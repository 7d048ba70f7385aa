"""What the parts of an :class:`~leasehold.aio.AsyncWorker` share: its settings, its leases, the outbox.

The asyncio twin of ``leasehold._state``: one event loop instead of threads, so the counts need no lock;
the requests and the reading of refusals are the sync worker's (``leasehold._worker_calls``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .. import _worker_calls as calls
from .._state import Backoff, Cohort, WorkerState, log
from .._task import Result, Task, TaskCancelled
from ..errors import AbortedError, InvalidArgumentError, LeaseholdError, NotFoundError, WorkerConfigError
from ..models import TaskRecord, field_of
from ._task import AsyncTask
from ._transport import AsyncTransport

JsonObject = dict[str, Any]

#: A handler of an AsyncWorker: ``async def`` (gets an :class:`AsyncTask`) or plain (a :class:`~leasehold.Task`,
#: run in the worker's thread pool).
AsyncHandler = Callable[[AsyncTask], Awaitable[Result]]
AnyHandler = AsyncHandler | Callable[[Task], Result]


@dataclass
class ALease:
    """One task this worker holds, from its claim until its outcome is reported (or it is lost)."""

    task: AsyncTask | Task
    handler: AnyHandler
    is_async: bool
    interval: float  # seconds between heartbeats
    next_beat: float  # monotonic time of the next heartbeat
    started: bool = False
    finished: bool = False  # the handler returned (or raised)
    lost: bool = False  # the coordinator refused a heartbeat, or the drain gave the task back
    cancelled: bool = False  # the task was cancelled while held (its result, within the lease, is still kept)
    beat_failing: bool = False  # the last heartbeat got no answer (logged once per outage)
    beating: bool = False  # a heartbeat is in flight
    cohort: Cohort = field(default_factory=Cohort)
    lane: asyncio.Task[None] | None = None  # the lane's task, which runs an async handler: cancelled to stop it
    cancel_sent: bool = False  # the worker cancelled the lane's task (not the lane's own doing)


@dataclass
class AOutcome:
    """What a lane hands the reporter: the handler's result, or the exception that fails the task."""

    lease: ALease
    result: Result | None = None
    error: BaseException | None = None
    reserved: bool = False  # the lane it frees is the reporter's to refill (claim_next on the report)


class AsyncWorkerState:
    """The settings and shared state of an async worker (see :class:`~leasehold.aio.AsyncWorker`)."""

    def __init__(self, url: str, workloads: list[str], concurrency: int, worker_id: str, lease_seconds: int | None,
                 wait_seconds: int, prefetch: bool, batch_results: bool, claim_with_results: bool,
                 drain_timeout: float, heartbeat_interval: float | None, request_timeout: float,
                 labels: dict[str, str] | None) -> None:
        self.url = url
        self.workloads = list(workloads)
        self.labels: dict[str, str] = dict(labels or {})
        self.concurrency = concurrency
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.wait_seconds = wait_seconds
        self.prefetch = prefetch
        self.batch_results = batch_results
        self.claim_with_results = claim_with_results
        self.drain_timeout = drain_timeout
        self.heartbeat_interval = heartbeat_interval
        self.request_timeout = request_timeout
        self.stats = {"claimed": 0, "completed": 0, "failed": 0, "dropped": 0, "released": 0}
        self._handlers: dict[str, AnyHandler] = {}
        self._claims_refused = False  # the coordinator does not take claim_next (it predates it)
        self._fatal: WorkerConfigError | None = None
        self._transport: AsyncTransport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._threads: concurrent.futures.ThreadPoolExecutor | None = None  # sync handlers run here
        self._busy = 0  # tasks dispatched whose handler has not finished
        self._reserved = 0  # lanes whose outcome waits in the reporter, which claims their next tasks itself
        self._leases: dict[tuple[str, int], ALease] = {}
        self._lanes: set[asyncio.Task[None]] = set()
        self._chores: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._hurrying = False

    def _start_state(self) -> None:
        """Made inside the running loop: the events and the outbox belong to it."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._stop = asyncio.Event()
        self._hurry = asyncio.Event()
        self._freed = asyncio.Event()  # a lane freed up (or the worker stops): the claimer looks again
        self._beat_wake = asyncio.Event()
        self._outbox: asyncio.Queue[AOutcome | None] = asyncio.Queue()

    def _count(self, what: str, n: int = 1) -> None:
        self.stats[what] += n

    async def _call(self, method: str, request: JsonObject, extra_timeout: float = 0.0) -> JsonObject:
        assert self._transport is not None
        return await self._transport.call(method, request, self.request_timeout + extra_timeout)

    async def _sleep_unless_stopped(self, delay: float) -> None:
        try:
            await asyncio.wait_for(self._stop.wait(), delay)
        except asyncio.TimeoutError:
            pass

    def _keep(self, chore: asyncio.Task[None]) -> None:
        """Holds a background call (a heartbeat) until it ends: the loop keeps only weak references."""
        self._chores.add(chore)
        chore.add_done_callback(self._chores.discard)

    def _changed(self) -> None:
        self._freed.set()

    # ---------- leases ----------

    async def _dispatch(self, records: list[JsonObject]) -> None:
        """Runs the tasks a claim or a report's ``claim_next`` leased (given back at once while draining)."""
        cohort = Cohort()
        for raw in records:
            record = TaskRecord.from_json(raw)
            handler = self._handlers.get(record.workload)
            self._count("claimed")
            is_async = handler is not None and _is_async(handler)
            task: AsyncTask | Task = (AsyncTask(record, self.worker_id, self._report_progress) if is_async
                                      else Task(record, self.worker_id, self._progress_from_thread))
            if self._stopping or handler is None:
                why = "the worker is draining" if handler is not None else f"no handler for workload {record.workload!r}"
                await self._release(task, why)
                continue
            lease_for = float(self.lease_seconds or WorkerState._lease_left(record.lease_expires_at) or 60)
            interval = self.heartbeat_interval or max(lease_for / 3, 0.2)
            lease = ALease(task=task, handler=handler, is_async=is_async, interval=interval,
                           next_beat=time.monotonic() + interval, cohort=cohort)
            self._leases[(task.id, task.attempt)] = lease
            self._busy += 1
            cohort.running += 1
            lane = lease.lane = asyncio.create_task(self._run_lane(lease), name=f"leasehold-task-{task.id}")
            self._lanes.add(lane)
            lane.add_done_callback(self._lanes.discard)
        self._beat_wake.set()

    async def _run_lane(self, lease: ALease) -> None:
        """Runs one task's handler and hands its outcome to the reporter (``_lanes.Lanes``)."""
        raise NotImplementedError

    async def _release(self, task: AsyncTask | Task, why: str) -> None:
        """Gives a task back: a retryable failure due at once, so another worker re-leases it now."""
        backoff = Backoff()
        for retry_after in calls.RELEASE_DELAYS:
            try:
                await self._call("FailTask", calls.release_request(self, task, why, retry_after))
                self._count("released")
                log.info("gave task %s (attempt %d) back: %s", task.id, task.attempt, why)
                return
            except InvalidArgumentError:
                continue  # a server that takes no explicit 0 here: ask for 1 s, then for its own backoff
            except AbortedError as e:
                log.info("task %s (attempt %d) was no longer ours to give back: %s", task.id, task.attempt, e)
                return
            except LeaseholdError as e:
                if not calls.transient(e) or self._hurrying:
                    log.warning("could not give task %s back (%s); its lease will expire", task.id, e)
                    return
                await asyncio.sleep(backoff.next())

    def _drop(self, lease: ALease, why: str) -> None:
        self._count("dropped")
        log.warning("dropping the result of task %s (attempt %d): %s", lease.task.id, lease.task.attempt, why)

    def _forget(self, lease: ALease) -> None:
        self._leases.pop((lease.task.id, lease.task.attempt), None)

    def _cancel(self, lease: ALease, reason: str) -> None:
        """Tells the handler to stop: the task's flag, and for an async handler, asyncio's cancellation."""
        lease.task._cancel(reason)
        lane = lease.lane
        # Only a started async handler, once, and not from inside it (its own progress report was refused:
        # it gets the CancelledError raised there, and a cancel requested too would strike again in its
        # clean-up). A plain handler's thread cannot be interrupted: its task's flag tells it.
        if (lease.is_async and lease.started and not lease.finished and not lease.cancel_sent and lane is not None
                and not lane.done() and lane is not asyncio.current_task()):
            lease.cancel_sent = True
            lane.cancel()

    # ---------- heartbeats and progress ----------

    async def _report_progress(self, task: AsyncTask | Task, fraction: float, message: str,
                               partial_result_uri: str | None) -> None:
        """ReportProgress; raises :class:`~leasehold.TaskCancelled` when the coordinator refuses the lease."""
        lease = self._leases.get((task.id, task.attempt))
        if lease is None:
            return
        try:
            res = await self._call("ReportProgress", calls.progress_request(self, task, fraction, message,
                                                                           partial_result_uri))
        except (AbortedError, NotFoundError) as e:
            self._refused(lease, e)
            raise TaskCancelled(task.cancel_reason) from e
        except LeaseholdError as e:
            log.warning("progress of task %s not reported (%s)", task.id, e)
            return
        self._renewed(lease, res)

    def _progress_from_thread(self, task: Task, fraction: float, message: str, partial_result_uri: str | None) -> None:
        """A sync handler's ``task.progress()``, from its thread: sent by the loop, waited for here."""
        assert self._loop is not None
        coro = self._report_progress(task, fraction, message, partial_result_uri)
        asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def _renewed(self, lease: ALease, res: JsonObject) -> None:
        record = TaskRecord.from_json(field_of(res, "task") or {})
        if record.lease_expires_at is not None:
            lease.task.lease_expires_at = record.lease_expires_at
        lease.next_beat = time.monotonic() + lease.interval

    def _refused(self, lease: ALease, e: LeaseholdError) -> None:
        """A heartbeat or progress report the coordinator refused: the task was cancelled, or the lease lost."""
        if calls.cancellation(e):
            lease.cancelled = True
            self._cancel(lease, f"{e.code}: {e.message}")
            log.info("task %s (attempt %d) was cancelled (%s); its handler is told to stop, and a result it still "
                     "returns within the lease is reported and kept (request id %s)",
                     lease.task.id, lease.task.attempt, e.message, e.request_id)
        else:
            lease.lost = True
            self._cancel(lease, f"{e.code}: {e.message}")
            log.warning("task %s (attempt %d) is no longer ours (%s); its handler is told to stop (request id %s)",
                        lease.task.id, lease.task.attempt, e.message, e.request_id)


def _is_async(handler: AnyHandler) -> bool:
    """An ``async def`` handler (or a callable object whose ``__call__`` is one)."""
    if inspect.iscoroutinefunction(handler):
        return True
    return not inspect.isroutine(handler) and inspect.iscoroutinefunction(type(handler).__call__)
