"""What the parts of a worker share: its settings, its leases and lanes, the queues between its threads.

A :class:`~leasehold.Worker` is a :class:`WorkerState`; its claimer, lanes, heartbeats and reporter
(``_claimer``, ``_lanes``, ``_heartbeat``, ``_reporter``) each run in threads of their own and act on it.
Every count below changes under ``_cond``.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from . import _worker_calls as calls
from ._task import Handler, ProgressSink, Result, Task
from ._transport import Interrupt, Transport
from .errors import AbortedError, InvalidArgumentError, LeaseholdError, WorkerConfigError
from .models import TaskRecord

log = logging.getLogger("leasehold.worker")

JsonObject = dict[str, Any]

# Server limits (README "Limits"): at most 100 tasks per claim and results per CompleteTasks.
MAX_BATCH = calls.MAX_BATCH
transient = calls.transient


class Cohort:
    """The tasks one answer leased (a claim's, or a report's next_tasks); ``running``: how many of them still run."""

    __slots__ = ("running",)

    def __init__(self) -> None:
        self.running = 0


@dataclass
class Lease:
    """One task this worker holds, from its claim until its outcome is reported (or it is lost)."""

    task: Task
    handler: Handler
    interval: float  # seconds between heartbeats
    next_beat: float  # monotonic time of the next heartbeat
    started: bool = False
    finished: bool = False  # the handler returned (or raised)
    lost: bool = False  # the coordinator refused a heartbeat, or the drain gave the task back
    # The task was cancelled while we held it (its job cancelled or failed): the handler is told to stop, no
    # more heartbeats go out, but the lease stands until it expires, and a result sent within it is kept.
    cancelled: bool = False
    beat_failing: bool = False  # the last heartbeat got no answer (logged once per outage)
    cohort: Cohort = field(default_factory=Cohort)


@dataclass
class Outcome:
    """What a lane hands the reporter: the handler's result, or the exception that fails the task."""

    lease: Lease
    result: Result | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    # The lane this outcome frees is the reporter's to refill (claim_next on the report), not the claimer's.
    reserved: bool = False


class Backoff:
    """Full-jitter exponential backoff: up to 0.1 s, 0.2 s, ... capped at ``cap`` seconds."""

    def __init__(self, base: float = 0.1, cap: float = 5.0) -> None:
        self.base, self.cap, self.n = base, cap, 0

    def next(self) -> float:
        delay = random.uniform(0, min(self.cap, self.base * 2 ** self.n))
        self.n = min(self.n + 1, 30)
        return max(delay, self.base / 2)

    def reset(self) -> None:
        self.n = 0


class WorkerState:
    """The settings and shared state of a worker (see :class:`~leasehold.Worker` for the settings)."""

    def __init__(self, url: str, workloads: list[str], concurrency: int, worker_id: str, lease_seconds: int | None,
                 wait_seconds: int, prefetch: bool, batch_results: bool, claim_with_results: bool,
                 drain_timeout: float, heartbeat_interval: float | None, executor: str, request_timeout: float,
                 labels: dict[str, str] | None = None) -> None:
        self.url = url
        self.workloads = list(workloads)
        self.labels: dict[str, str] = dict(labels or {})  # sent on every claim; none: the claim carries no labels
        self.concurrency = concurrency
        self.worker_id = worker_id
        self.lease_seconds = lease_seconds
        self.wait_seconds = wait_seconds
        self.prefetch = prefetch
        self.batch_results = batch_results
        self.claim_with_results = claim_with_results
        self._claims_refused = False  # the coordinator does not take claim_next (it predates it)
        self.drain_timeout = drain_timeout
        self.heartbeat_interval = heartbeat_interval
        self.executor = executor
        self.request_timeout = request_timeout
        self._transport: Transport | None = None
        self._handlers: dict[str, Handler] = {}
        self._progress_sink: ProgressSink | None = None  # the heartbeats' report_progress, for thread lanes

        self._cond = threading.Condition()
        self._busy = 0  # tasks dispatched whose handler has not finished
        # Lanes whose outcome waits in the reporter, which claims their next tasks itself (claim_with_results):
        # the claimer leaves them alone, so the two never claim the same lane and the worker never holds
        # more than `concurrency` tasks.
        self._reserved = 0
        self._leases: dict[tuple[str, int], Lease] = {}
        self._work: queue.SimpleQueue[Lease | None] = queue.SimpleQueue()
        self._outbox: queue.SimpleQueue[Outcome | None] = queue.SimpleQueue()
        self._stop = threading.Event()  # stop claiming (drain begins)
        self._hurry = threading.Event()  # a second signal: give in-flight tasks back now
        self._beat_wake = threading.Event()
        self._beats_stop = threading.Event()
        self._pool: Any = None  # a multiprocessing pool of process lanes (executor="process")
        self._progress_queue: Any = None  # process lanes' progress reports, to the parent
        self._cancelled_ids: Any = None  # process lanes' view of cancelled tasks (a _task._CancelledIds)
        self._poll = Interrupt()  # aborts the claimer's parked long poll when a drain ends
        self._fatal: WorkerConfigError | None = None  # the claimer found the worker misconfigured: run() raises it
        self._stats_lock = threading.Lock()
        self.stats = {"claimed": 0, "completed": 0, "failed": 0, "dropped": 0, "released": 0}

    def _count(self, what: str, n: int = 1) -> None:
        with self._stats_lock:
            self.stats[what] += n

    def _call(self, method: str, request: JsonObject, extra_timeout: float = 0.0,
              interrupt: Interrupt | None = None) -> JsonObject:
        assert self._transport is not None
        return self._transport.call(method, request, self.request_timeout + extra_timeout, interrupt)

    def _dispatch(self, record: TaskRecord, cohort: Cohort) -> None:
        task = Task(record, self.worker_id, self._progress_sink if self._pool is None else None)
        handler = self._handlers.get(record.workload)
        self._count("claimed")
        if self._stop.is_set() or handler is None:
            why = "the worker is draining" if handler is not None else f"no handler for workload {record.workload!r}"
            self._release(task, why)
            return
        lease_for = float(self.lease_seconds or self._lease_left(record.lease_expires_at) or 60)
        interval = self.heartbeat_interval or max(lease_for / 3, 0.2)
        lease = Lease(task=task, handler=handler, interval=interval, next_beat=time.monotonic() + interval,
                       cohort=cohort)
        with self._cond:
            self._leases[(task.id, task.attempt)] = lease
            self._busy += 1
            cohort.running += 1
        self._beat_wake.set()
        self._work.put(lease)

    @staticmethod
    def _lease_left(expires: datetime | None) -> float | None:
        if expires is None:
            return None
        return max((expires - datetime.now(timezone.utc)).total_seconds(), 1.0)

    def _release(self, task: Task, why: str) -> None:
        """Gives a task back: a retryable failure due at once, so another worker re-leases it now."""
        backoff = Backoff()
        for retry_after in calls.RELEASE_DELAYS:
            try:
                self._call("FailTask", calls.release_request(self, task, why, retry_after))
                self._count("released")
                log.info("gave task %s (attempt %d) back: %s", task.id, task.attempt, why)
                return
            except InvalidArgumentError:
                continue  # a server that takes no explicit 0 here: ask for 1 s, then for its own backoff
            except AbortedError as e:
                log.info("task %s (attempt %d) was no longer ours to give back: %s", task.id, task.attempt, e)
                return
            except LeaseholdError as e:
                if not transient(e) or self._hurry.is_set():
                    log.warning("could not give task %s back (%s); its lease will expire", task.id, e)
                    return
                time.sleep(backoff.next())

    def _drop(self, lease: Lease, why: str) -> None:
        self._count("dropped")
        log.warning("dropping the result of task %s (attempt %d): %s", lease.task.id, lease.task.attempt, why)

    def _forget(self, lease: Lease) -> None:
        with self._cond:
            self._leases.pop((lease.task.id, lease.task.attempt), None)

    def _lease_request(self, task: Task) -> JsonObject:
        return calls.lease_request(self, task)

    def _cancel(self, lease: Lease, reason: str) -> None:
        lease.task._cancel(reason)
        if self._pool is not None:
            self._cancelled_ids.add(lease.task.id)
