"""The worker: claims tasks, runs handlers in lanes, heartbeats leases, reports results, drains on SIGTERM."""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import queue
import random
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import FrameType
from typing import Any, TypeVar

from . import _otel
from ._transport import Interrupt, Transport, make_transport
from .errors import (
    AbortedError,
    InvalidArgumentError,
    LeaseholdError,
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
    WorkerConfigError,
)
from .models import TaskRecord, field_of

__all__ = ["Result", "RetryableError", "Task", "TaskCancelled", "TaskError", "Worker", "error_code_of"]

log = logging.getLogger("leasehold.worker")

JsonObject = dict[str, Any]
Handler = Callable[["Task"], "Result"]
H = TypeVar("H", bound=Handler)

# Server limits (README "Limits"): error_code ^[a-z0-9_.-]{1,64}$, error_message cut at 2,000 characters,
# at most 100 tasks per claim and results per CompleteTasks, worker_id 1–128 printable ASCII.
_MAX_BATCH = 100
_ERROR_CODE_MAX = 64
_ERROR_MESSAGE_MAX = 2000
_WORKER_ID = re.compile(r"^[\x21-\x7e]{1,128}$")
_NIL_UUID = "00000000-0000-0000-0000-000000000000"
# How long a report that will claim waits for the rest of its first result's cohort (the tasks leased with
# it, still running): lanes filled together often finish together, and one report then refills them all.
_LINGER = 0.002


@dataclass(frozen=True)
class Result:
    """What a handler returns: where it wrote the result, the result's hex SHA-256, and optional metrics."""

    uri: str
    sha256: str
    metrics: Mapping[str, Any] | None = None


class TaskError(Exception):
    """A handler failure with an explicit ``code`` (``^[a-z0-9_.-]{1,64}$``); permanent unless ``retryable``.

    Any other exception a handler raises is a permanent failure whose code is the exception's class name in
    snake case (``ValueError`` → ``value_error``).
    """

    def __init__(self, message: str = "", *, code: str | None = None, retryable: bool = False,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retryable = retryable
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments: rebuild through a helper so the exception survives pickling (process lanes).
        return (_rebuild_task_error, (type(self), self.message, self.code, self.retryable, self.retry_after))


def _rebuild_task_error(cls: type[TaskError], message: str, code: str | None, retryable: bool,
                        retry_after: float | None) -> TaskError:
    err = cls.__new__(cls)
    TaskError.__init__(err, message, code=code, retryable=retryable, retry_after=retry_after)
    return err


class RetryableError(TaskError):
    """A handler failure another attempt may fix; retried after ``retry_after`` seconds (else the server's backoff)."""

    def __init__(self, message: str = "", *, retry_after: float | None = None, code: str | None = None) -> None:
        super().__init__(message, code=code, retryable=True, retry_after=retry_after)


class TaskCancelled(Exception):  # noqa: N818  reads as what happened, like KeyboardInterrupt
    """The task's lease is gone (job cancelled, lease lost or the worker draining); its result would be refused."""


def _snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
    return re.sub(r"[^a-z0-9_.-]+", "_", s).strip("_")


def error_code_of(exc: BaseException) -> str:
    """The ``error_code`` reported for an exception.

    The ``code`` of a :class:`TaskError` that gave one, else the class name in snake case, cut to the
    coordinator's limit (``^[a-z0-9_.-]{1,64}$``).
    """
    code = exc.code if isinstance(exc, TaskError) and exc.code else _snake(type(exc).__name__)
    code = re.sub(r"[^a-z0-9_.-]+", "_", code.lower())[:_ERROR_CODE_MAX].strip("_")
    return code or "error"


def _error_message_of(exc: BaseException) -> str:
    text = str(exc)
    msg = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return msg[:_ERROR_MESSAGE_MAX]


class Task:
    """One leased task, handed to a handler.

    Attributes mirror the coordinator's task (``id``, ``job_id``, ``chunk_index``, ``workload``, ``attempt``,
    ``max_attempts``, ``input_uri``, ``input_sha256``, ``parameters``, ``priority``, ``traceparent``,
    ``lease_expires_at``) plus ``worker_id``. The worker heartbeats the lease by itself; when a heartbeat (or
    :meth:`progress`) finds the task cancelled or the lease lost, :attr:`cancelled` turns true and
    :attr:`cancel_event` is set: the handler should stop, as its result will not be reported.
    """

    def __init__(self, record: TaskRecord, worker_id: str, worker: Worker | None) -> None:
        self.record = record
        self.id = record.id
        self.job_id = record.job_id
        self.chunk_index = record.chunk_index
        self.workload = record.workload
        self.attempt = record.attempt
        self.max_attempts = record.max_attempts
        self.input_uri = record.input_uri
        self.input_sha256 = record.input_sha256
        self.parameters: dict[str, Any] = dict(record.parameters or {})
        self.priority = record.priority
        self.traceparent = record.traceparent
        self.lease_expires_at: datetime | None = record.lease_expires_at
        self.worker_id = worker_id
        self.cancel_event = threading.Event()
        self.cancel_reason = ""
        self._worker = worker

    def __repr__(self) -> str:
        return f"Task(id={self.id!r}, job_id={self.job_id!r}, chunk_index={self.chunk_index}, attempt={self.attempt})"

    def __getstate__(self) -> dict[str, Any]:
        # Process lanes get a copy without the worker (threads, sockets) and with an event of their own.
        state = dict(self.__dict__)
        state["_worker"] = None
        state["cancel_event"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.cancel_event = threading.Event()

    @property
    def cancelled(self) -> bool:
        """Whether the task was cancelled or its lease lost (its result will be dropped)."""
        if not self.cancel_event.is_set() and _child_cancelled is not None and _child_cancelled.contains(self.id):
            self.cancel_reason = self.cancel_reason or "task cancelled or lease lost"
            self.cancel_event.set()
        return self.cancel_event.is_set()

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Blocks until the task is cancelled or ``timeout`` seconds pass; returns :attr:`cancelled`."""
        if _child_cancelled is None:
            return self.cancel_event.wait(timeout)
        # In a process lane the parent's news arrives through shared memory: look every 50 ms.
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.cancelled:
            left = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if left <= 0:
                return False
            time.sleep(left)
        return True

    def raise_if_cancelled(self) -> None:
        """Raises :class:`TaskCancelled` when the task was cancelled or its lease lost."""
        if self.cancelled:
            raise TaskCancelled(self.cancel_reason or "task cancelled")

    def progress(self, fraction: float, message: str = "", *, partial_result_uri: str | None = None) -> None:
        """Reports progress (0–1) with an optional status line; also extends the lease.

        Raises :class:`TaskCancelled` when the coordinator says the task is cancelled or the lease lost. When
        the coordinator cannot be reached the report is skipped with a log line (the heartbeat keeps trying).
        """
        self.raise_if_cancelled()
        if self._worker is not None:
            self._worker._report_progress(self, fraction, message, partial_result_uri)
        elif _child_progress is not None:
            _child_progress.put((self.id, self.attempt, fraction, message, partial_result_uri))

    def _cancel(self, reason: str) -> None:
        if not self.cancel_event.is_set():
            self.cancel_reason = reason
            self.cancel_event.set()


class _Cohort:
    """The tasks one answer leased (a claim's, or a report's next_tasks); ``running``: how many of them still run."""

    __slots__ = ("running",)

    def __init__(self) -> None:
        self.running = 0


@dataclass
class _Lease:
    task: Task
    handler: Handler
    interval: float  # seconds between heartbeats
    next_beat: float  # monotonic time of the next heartbeat
    started: bool = False
    finished: bool = False  # the handler returned (or raised)
    lost: bool = False  # the coordinator refused a heartbeat, or the drain gave the task back
    beat_failing: bool = False  # the last heartbeat got no answer (logged once per outage)
    cohort: _Cohort = field(default_factory=_Cohort)


@dataclass
class _Outcome:
    lease: _Lease
    result: Result | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)
    # The lane this outcome frees is the reporter's to refill (claim_next on the report), not the claimer's.
    reserved: bool = False


class _Backoff:
    """Full-jitter exponential backoff: up to 0.1 s, 0.2 s, ... capped at ``cap`` seconds."""

    def __init__(self, base: float = 0.1, cap: float = 5.0) -> None:
        self.base, self.cap, self.n = base, cap, 0

    def next(self) -> float:
        delay = random.uniform(0, min(self.cap, self.base * 2 ** self.n))
        self.n = min(self.n + 1, 30)
        return max(delay, self.base / 2)

    def reset(self) -> None:
        self.n = 0


class _CancelledIds:
    """Ids of cancelled tasks in shared memory, written by the parent and read by process lanes.

    A ring of the latest ``slots`` ids: more than can be running at once, so a running task's id is never
    overwritten before its handler returns.
    """

    WIDTH = 36  # a UUID as text

    def __init__(self, ctx: Any, slots: int) -> None:
        self.slots = slots
        self.buf = ctx.Array("c", self.WIDTH * slots)  # its own lock: readers never see half an id
        self.next = 0

    def add(self, task_id: str) -> None:
        raw = task_id.encode()[: self.WIDTH].ljust(self.WIDTH, b" ")
        with self.buf.get_lock():
            at = (self.next % self.slots) * self.WIDTH
            self.buf[at: at + self.WIDTH] = raw
            self.next += 1

    def contains(self, task_id: str) -> bool:
        raw = task_id.encode()[: self.WIDTH].ljust(self.WIDTH, b" ")
        with self.buf.get_lock():
            data = bytes(self.buf.raw)
        return any(data[i: i + self.WIDTH] == raw for i in range(0, len(data), self.WIDTH))


# Set in process-lane children: where Task.progress sends its reports (the parent forwards them), and
# where the parent marks cancelled tasks.
_child_progress: Any = None
_child_cancelled: _CancelledIds | None = None


def _child_init(progress_queue: Any, cancelled: _CancelledIds) -> None:
    global _child_progress, _child_cancelled
    _child_progress = progress_queue
    _child_cancelled = cancelled
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent drains; children just finish or are terminated
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _child_run(handler: Handler, task: Task) -> Result:
    return handler(task)


def _transient(e: LeaseholdError) -> bool:
    """Errors worth retrying as they are: the coordinator (or its database) is unavailable or slow."""
    return e.code in ("unavailable", "deadline_exceeded", "internal", "unknown", "cancelled", "canceled",
                      "resource_exhausted")


class Worker:
    """Runs handlers for leased tasks of ``workloads``.

    Example::

        worker = Worker("http://127.0.0.1:8080", workloads=["scimesh"], concurrency=4)

        @worker.handler("scimesh")
        def mesh(task: Task) -> Result:
            task.progress(0.5, "halfway")
            return Result(uri="s3://out/...", sha256=digest, metrics={"seconds": 1.2})

        worker.run()  # blocks; SIGTERM / SIGINT drain

    Claims long-poll (``wait_seconds``) for up to as many tasks as there are free lanes (``prefetch``); each task
    runs in one of ``concurrency`` lanes (threads, or processes with ``executor="process"`` for CPU-bound
    handlers, which must then be module-level functions). Each lease is renewed every third of its length.
    A result goes out with the others that are ready at the same moment in one ``CompleteTasks`` call
    (``batch_results``), and is sent again until the coordinator answers. That report also claims the next
    tasks for the lanes its results free (``claim_with_results``), so a busy worker makes about one call per
    batch of results rather than two; the long-poll claims take over when a report brings back fewer. A
    handler's exception fails the task: :class:`RetryableError` for another attempt, anything else for good. An
    unreachable coordinator is retried with jittered backoff.

    Args:
        url: ``http://host:port`` (or ``https://``) of the coordinator.
        workloads: Registered workloads to claim; each needs a handler before :meth:`run`.
        concurrency: Number of lanes (tasks run at once).
        token: A worker token (its prefix must begin ``worker_id``) when the coordinator requires one.
        transport: ``"json"`` (Connect JSON over HTTP/1.1, standard library) or ``"grpc"``.
        worker_id: The lease owner's id; default ``worker_prefix`` + ``<hostname>-<pid>``.
        worker_prefix: Prepended to the default ``worker_id`` (a worker token's prefix).
        lease_seconds: Lease to ask for on claims and heartbeats; default each workload's.
        wait_seconds: Long-poll of each claim (1–30); also bounds how long a drain waits for a parked claim.
        prefetch: Claim up to as many tasks as lanes are free (else one at a time).
        batch_results: Report the results that are ready together in one ``CompleteTasks``.
        claim_with_results: Let each result report claim the next tasks for the lanes it frees (the call's
            ``claim_next``; never while draining, never on failures). Off: only the long-poll claims lease tasks.
        drain_timeout: On SIGTERM/SIGINT, seconds in-flight handlers may still run before their tasks are given
            back (failed as retryable, re-leased at once).
        heartbeat_interval: Seconds between heartbeats; default a third of each lease.
        executor: ``"thread"`` or ``"process"``.
        request_timeout: Seconds a call may take (a claim: plus its wait).
    """

    def __init__(
        self,
        url: str,
        *,
        workloads: list[str],
        concurrency: int = 1,
        token: str | None = None,
        transport: str = "json",
        worker_id: str | None = None,
        worker_prefix: str = "",
        lease_seconds: int | None = None,
        wait_seconds: int = 5,
        prefetch: bool = True,
        batch_results: bool = True,
        claim_with_results: bool = True,
        drain_timeout: float = 30.0,
        heartbeat_interval: float | None = None,
        executor: str = "thread",
        request_timeout: float = 10.0,
    ) -> None:
        if not workloads:
            raise ValueError("workloads: at least one")
        if concurrency < 1:
            raise ValueError("concurrency: at least 1")
        if not 0 <= wait_seconds <= 30:
            raise ValueError("wait_seconds: 0 to 30")
        if executor not in ("thread", "process"):
            raise ValueError('executor must be "thread" or "process"')
        if transport not in ("json", "grpc"):
            raise ValueError('transport must be "json" or "grpc"')
        self.url = url
        self.workloads = list(workloads)
        self.concurrency = concurrency
        self.worker_id = worker_id or f"{worker_prefix}{socket.gethostname()}-{os.getpid()}"
        if not _WORKER_ID.match(self.worker_id):
            raise ValueError(f"worker_id must be 1 to 128 printable ASCII characters without spaces: {self.worker_id!r}")
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
        self._token = token
        self._transport_name = transport
        self._transport: Transport | None = None
        self._handlers: dict[str, Handler] = {}

        self._cond = threading.Condition()
        self._busy = 0  # tasks dispatched whose handler has not finished
        # Lanes whose outcome waits in the reporter, which claims their next tasks itself (claim_with_results):
        # the claimer leaves them alone, so the two never claim the same lane and the worker never holds
        # more than `concurrency` tasks.
        self._reserved = 0
        self._leases: dict[tuple[str, int], _Lease] = {}
        self._work: queue.SimpleQueue[_Lease | None] = queue.SimpleQueue()
        self._outbox: queue.SimpleQueue[_Outcome | None] = queue.SimpleQueue()
        self._stop = threading.Event()  # stop claiming (drain begins)
        self._hurry = threading.Event()  # a second signal: give in-flight tasks back now
        self._beat_wake = threading.Event()
        self._beats_stop = threading.Event()
        self._pool: Any = None
        self._poll = Interrupt()
        self._stats_lock = threading.Lock()
        self.stats = {"claimed": 0, "completed": 0, "failed": 0, "dropped": 0, "released": 0}

    def _count(self, what: str, n: int = 1) -> None:
        with self._stats_lock:
            self.stats[what] += n

    # ---------- registration ----------

    def handler(self, workload: str) -> Callable[[H], H]:
        """Decorator: ``fn`` handles the tasks of ``workload``; it returns a :class:`Result` or raises."""

        def register(fn: H) -> H:
            self._handlers[workload] = fn
            return fn

        return register

    # ---------- lifecycle ----------

    def stop(self) -> None:
        """Begins a drain, as SIGTERM does (callable from any thread); a second call gives in-flight tasks back now."""
        if self._stop.is_set():
            self._hurry.set()
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.info("signal %s: draining (stop claiming, finish in-flight tasks within %g s)",
                 signal.Signals(signum).name, self.drain_timeout)
        self.stop()

    def run(self) -> None:
        """Claims and runs tasks until SIGTERM/SIGINT (or :meth:`stop`), then drains and returns.

        Raises :class:`~leasehold.errors.WorkerConfigError` at start when a workload has no handler, or when
        the coordinator refuses the token or the ``worker_id`` (e.g. outside the worker token's prefix).
        """
        missing = [w for w in self.workloads if w not in self._handlers]
        if missing:
            raise WorkerConfigError(f"no handler for workload(s) {', '.join(missing)}")
        if self.executor == "process":
            # Fork before any thread or channel exists: a forked child must not inherit either.
            ctx = multiprocessing.get_context("fork")
            self._progress_queue: Any = ctx.SimpleQueue()
            self._cancelled_ids = _CancelledIds(ctx, max(64, 4 * self.concurrency))
            self._pool = ctx.Pool(self.concurrency, initializer=_child_init,
                                  initargs=(self._progress_queue, self._cancelled_ids))
        self._transport = make_transport(self.url, self._token, self._transport_name)
        previous: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            self._check_identity()
            self._run()
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
            if self._pool is not None:
                self._pool.terminate()
            self._transport.close()

    def _check_identity(self) -> None:
        """Fails fast on a token or worker_id the coordinator refuses, rather than on every claim."""
        backoff = _Backoff()
        # A heartbeat of a task that cannot exist: the coordinator checks token and worker_id before looking
        # the task up, so NOT_FOUND means both were accepted, and nothing is written either way.
        req = {"task_id": _NIL_UUID, "worker_id": self.worker_id, "attempt": 1}
        warned = False
        while not self._stop.is_set():
            try:
                self._call("RenewLease", req)
                return
            except NotFoundError:
                return
            except PermissionDeniedError as e:
                raise WorkerConfigError(
                    f"the coordinator refuses worker_id {self.worker_id!r} with this token: {e.message} "
                    "(a worker token only acts as worker_ids starting with its prefix; pass worker_id= or "
                    "worker_prefix= to match it)") from e
            except UnauthenticatedError as e:
                raise WorkerConfigError(f"the coordinator refuses the token: {e.message}") from e
            except InvalidArgumentError as e:
                raise WorkerConfigError(f"the coordinator refuses worker_id {self.worker_id!r}: {e.message}") from e
            except LeaseholdError as e:
                if not warned:
                    log.warning("coordinator not reachable at %s (%s); retrying with backoff", self.url, e)
                warned = True
                self._stop.wait(backoff.next())

    def _call(self, method: str, request: JsonObject, extra_timeout: float = 0.0,
              interrupt: Interrupt | None = None) -> JsonObject:
        assert self._transport is not None
        return self._transport.call(method, request, self.request_timeout + extra_timeout, interrupt)

    def _run(self) -> None:
        log.info("worker %s: %d lane(s) for %s at %s over %s", self.worker_id, self.concurrency,
                 ", ".join(self.workloads), self.url, self._transport_name)
        threads = [threading.Thread(target=self._lane, name=f"leasehold-lane-{i}", daemon=True)
                   for i in range(self.concurrency)]
        reporter = threading.Thread(target=self._reporter, name="leasehold-reporter", daemon=True)
        beats = threading.Thread(target=self._heartbeats, name="leasehold-heartbeats", daemon=True)
        claimer = threading.Thread(target=self._claimer, name="leasehold-claimer", daemon=True)
        if self._pool is not None:
            threading.Thread(target=self._forward_progress, name="leasehold-progress", daemon=True).start()
        for t in [*threads, reporter, beats, claimer]:
            t.start()
        # The main thread only waits, so signal handlers run at once even while a claim is parked.
        while not self._stop.wait(0.5):
            pass
        self._drain(claimer, reporter)

    def _drain(self, claimer: threading.Thread, reporter: threading.Thread) -> None:
        deadline = time.monotonic() + self.drain_timeout
        with self._cond:
            while self._busy > 0 and not self._hurry.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
        # Only now abort a claim still in flight: it is parked (a claim that finds tasks answers at once,
        # and its tasks are given back as they arrive), and waiting for it would hold the exit up to
        # wait_seconds. Aborted any earlier, a claim being answered (a lane had just freed up) would
        # leave its tasks leased to this worker until their lease expired.
        self._poll.cancel()
        claimer.join(self.wait_seconds + self.request_timeout)
        with self._cond:
            unfinished = [lease for lease in self._leases.values() if not lease.finished and not lease.lost]
        for lease in unfinished:
            lease.lost = True
            self._cancel(lease, "worker draining: the task was given back")
            self._release(lease.task, "the worker stopped before the handler finished")
        self._outbox.put(None)
        reporter.join(self.request_timeout * 3)
        self._beats_stop.set()
        self._beat_wake.set()
        for _ in range(self.concurrency):
            self._work.put(None)
        log.info("worker %s drained: %s", self.worker_id, self.stats)

    # ---------- claiming ----------

    def _claimer(self) -> None:
        backoff = _Backoff()
        outage = False
        while True:
            with self._cond:
                while self._busy + self._reserved >= self.concurrency and not self._stop.is_set():
                    self._cond.wait()
                if self._stop.is_set():
                    return
                free = self.concurrency - self._busy - self._reserved
            n = min(free if self.prefetch else 1, _MAX_BATCH)
            req: JsonObject = {"worker_id": self.worker_id, "workloads": self.workloads}
            if n > 1:
                req["max_tasks"] = n
            if self.lease_seconds is not None:
                req["lease_seconds"] = self.lease_seconds
            if self.wait_seconds > 0:
                req["wait_seconds"] = self.wait_seconds
            try:
                res = self._call("ClaimTasks", req, extra_timeout=self.wait_seconds, interrupt=self._poll)
            except LeaseholdError as e:
                if self._stop.is_set():
                    return
                delay = backoff.next()
                if not outage:
                    log.warning("claim failed (%s); retrying with backoff", e)
                outage = True
                self._stop.wait(delay)
                continue
            except Exception:
                log.exception("claim failed unexpectedly; retrying")
                self._stop.wait(backoff.next())
                continue
            if outage:
                log.info("coordinator reachable again at %s", self.url)
                outage = False
            backoff.reset()
            tasks = [TaskRecord.from_json(t) for t in field_of(res, "tasks") or []]
            cohort = _Cohort()
            for record in tasks:
                self._dispatch(record, cohort)
            if not tasks and self.wait_seconds == 0:
                self._stop.wait(1.0)

    def _dispatch(self, record: TaskRecord, cohort: _Cohort) -> None:
        task = Task(record, self.worker_id, self if self._pool is None else None)
        handler = self._handlers.get(record.workload)
        self._count("claimed")
        if self._stop.is_set() or handler is None:
            why = "the worker is draining" if handler is not None else f"no handler for workload {record.workload!r}"
            self._release(task, why)
            return
        lease_for = float(self.lease_seconds or self._lease_left(record.lease_expires_at) or 60)
        interval = self.heartbeat_interval or max(lease_for / 3, 0.2)
        lease = _Lease(task=task, handler=handler, interval=interval, next_beat=time.monotonic() + interval,
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
        base: JsonObject = {"task_id": task.id, "worker_id": self.worker_id, "attempt": task.attempt,
                            "error_code": "worker_draining", "error_message": why[:_ERROR_MESSAGE_MAX],
                            "retryable": True}
        backoff = _Backoff()
        for retry_after in (0, 1, None):
            req = dict(base)
            if retry_after is not None:
                req["retry_after_seconds"] = retry_after
            try:
                self._call("FailTask", req)
                self._count("released")
                log.info("gave task %s (attempt %d) back: %s", task.id, task.attempt, why)
                return
            except InvalidArgumentError:
                continue  # a server that takes no explicit 0 here: ask for 1 s, then for its own backoff
            except AbortedError as e:
                log.info("task %s (attempt %d) was no longer ours to give back: %s", task.id, task.attempt, e)
                return
            except LeaseholdError as e:
                if not _transient(e) or self._hurry.is_set():
                    log.warning("could not give task %s back (%s); its lease will expire", task.id, e)
                    return
                time.sleep(backoff.next())

    # ---------- running ----------

    def _lane(self) -> None:
        while True:
            lease = self._work.get()
            if lease is None:
                return
            try:
                outcome = self._execute(lease)
            except Exception:  # a bug of ours must not kill the lane
                log.exception("lane failed on task %s", lease.task.id)
                outcome = None
            # Queue the outcome before the lane counts as free: a drain that sees no busy lane then
            # finds every outcome ahead of its end-of-reports marker.
            lease.finished = True
            if outcome is not None:
                if self.claim_with_results and not self._stop.is_set():
                    # Its task stays ours until the report is answered: the report's claim_next refills the
                    # lane (a failure's too, when results go out with it), not the claimer. Reserved before
                    # the outbox gets it, so the reporter never releases a reservation not yet counted;
                    # until the lane is free below, the lane just counts twice.
                    outcome.reserved = True
                    with self._cond:
                        self._reserved += 1
                self._outbox.put(outcome)
            else:
                self._forget(lease)
            with self._cond:
                self._busy -= 1
                lease.cohort.running -= 1
                self._cond.notify_all()

    def _execute(self, lease: _Lease) -> _Outcome | None:
        task = lease.task
        if lease.lost:  # given back by the drain before a lane got to it
            return None
        if self._stop.is_set() and not lease.started:
            # Claimed before the drain began but not yet started: someone else can start it now.
            lease.lost = True
            self._release(task, "the worker is draining")
            return None
        lease.started = True
        outcome = _Outcome(lease)
        attrs = {"leasehold.task_id": task.id, "leasehold.job_id": task.job_id, "leasehold.attempt": task.attempt}
        try:
            with _otel.handler_span(task.traceparent, f"leasehold.task {task.workload}", attrs):
                if self._pool is not None:
                    result = self._pool.apply_async(_child_run, (lease.handler, task)).get()
                else:
                    result = lease.handler(task)
            if isinstance(result, Result):
                outcome.result = result
            else:
                outcome.error = TaskError(f"the handler returned {type(result).__name__}, not a Result",
                                          code="invalid_result")
        except TaskCancelled as e:
            self._drop(lease, f"handler stopped: {e}")
            return None
        except Exception as e:
            outcome.error = e
        if lease.lost or task.cancelled:
            self._drop(lease, task.cancel_reason or "lease lost")
            return None
        return outcome

    def _drop(self, lease: _Lease, why: str) -> None:
        self._count("dropped")
        log.warning("dropping the result of task %s (attempt %d): %s", lease.task.id, lease.task.attempt, why)

    def _forget(self, lease: _Lease) -> None:
        with self._cond:
            self._leases.pop((lease.task.id, lease.task.attempt), None)

    # ---------- progress and heartbeats ----------

    def _lease_request(self, task: Task) -> JsonObject:
        req: JsonObject = {"task_id": task.id, "worker_id": self.worker_id, "attempt": task.attempt}
        if self.lease_seconds is not None:
            req["lease_seconds"] = self.lease_seconds
        return req

    def _cancel(self, lease: _Lease, reason: str) -> None:
        lease.task._cancel(reason)
        if self._pool is not None:
            self._cancelled_ids.add(lease.task.id)

    def _lost(self, lease: _Lease, e: LeaseholdError) -> None:
        lease.lost = True
        self._cancel(lease, f"{e.code}: {e.message}")
        log.warning("task %s (attempt %d) is no longer ours (%s); its handler is told to stop (request id %s)",
                    lease.task.id, lease.task.attempt, e.message, e.request_id)

    def _report_progress(self, task: Task, fraction: float, message: str, partial_result_uri: str | None) -> None:
        with self._cond:
            lease = self._leases.get((task.id, task.attempt))
        if lease is None:
            return
        req = self._lease_request(task)
        req["progress"] = min(max(float(fraction), 0.0), 1.0)
        if message:
            req["message"] = message[:1000]
        if partial_result_uri:
            req["partial_result_uri"] = partial_result_uri
        try:
            res = self._call("ReportProgress", req)
        except (AbortedError, NotFoundError) as e:
            self._lost(lease, e)
            raise TaskCancelled(task.cancel_reason) from e
        except LeaseholdError as e:
            log.warning("progress of task %s not reported (%s)", task.id, e)
            return
        self._renewed(lease, res)

    def _forward_progress(self) -> None:
        while not self._beats_stop.is_set():
            item = self._progress_queue.get()
            task_id, attempt, fraction, message, uri = item
            with self._cond:
                lease = self._leases.get((task_id, attempt))
            if lease is not None:
                try:
                    self._report_progress(lease.task, fraction, message, uri)
                except TaskCancelled:
                    pass

    def _renewed(self, lease: _Lease, res: JsonObject) -> None:
        record = TaskRecord.from_json(field_of(res, "task") or {})
        if record.lease_expires_at is not None:
            lease.task.lease_expires_at = record.lease_expires_at
        lease.next_beat = time.monotonic() + lease.interval

    def _heartbeats(self) -> None:
        while not self._beats_stop.is_set():
            now = time.monotonic()
            with self._cond:
                # Finished leases too: a result waiting for delivery (a coordinator restart) keeps its lease.
                live = [lease for lease in self._leases.values() if not lease.lost]
            wake = now + 1.0
            for lease in live:
                if lease.next_beat <= now:
                    self._beat(lease)
                wake = min(wake, lease.next_beat)
            self._beat_wake.wait(max(wake - time.monotonic(), 0.01))
            self._beat_wake.clear()

    def _beat(self, lease: _Lease) -> None:
        try:
            res = self._call("RenewLease", self._lease_request(lease.task))
        except (AbortedError, NotFoundError) as e:
            if lease.finished:
                lease.lost = True  # its result was accepted meanwhile, or will be dropped as late
            else:
                self._lost(lease, e)
            return
        except LeaseholdError as e:
            # Try again soon: the lease may still be saved once the coordinator is back.
            lease.next_beat = time.monotonic() + min(lease.interval, 1.0) * random.uniform(0.5, 1.0)
            if not lease.beat_failing:
                log.warning("heartbeat of task %s failed (%s); retrying", lease.task.id, e)
            lease.beat_failing = True
            return
        lease.beat_failing = False
        self._renewed(lease, res)

    # ---------- reporting ----------

    def _reporter(self) -> None:
        closing = False
        while not closing:
            first = self._outbox.get()
            if first is None:
                return
            batch = [first]
            # Tasks leased together tend to finish together: wait a little for the rest of the first one's
            # cohort, so their lanes are refilled by one report rather than two.
            cohort = first.lease.cohort
            linger = time.monotonic() + _LINGER if first.reserved and self.batch_results else 0.0
            while len(batch) < _MAX_BATCH:
                try:
                    more = self._outbox.get_nowait()
                except queue.Empty:
                    left = linger - time.monotonic()
                    if left <= 0 or cohort.running == 0:
                        break
                    try:
                        more = self._outbox.get(timeout=left)
                    except queue.Empty:
                        break
                if more is None:
                    closing = True
                    break
                batch.append(more)
            try:
                self._report(batch)
            except Exception:
                log.exception("reporting results failed")

    def _report(self, batch: list[_Outcome]) -> None:
        reserved = sum(1 for o in batch if o.reserved)
        try:
            self._report_batch(batch, reserved)
        finally:
            if reserved:
                # Whatever the reports brought back is dispatched by now: lanes still free go to the claimer.
                with self._cond:
                    self._reserved -= reserved
                    self._cond.notify_all()

    def _report_batch(self, batch: list[_Outcome], reserved: int) -> None:
        """Sends the batch's failures, then its results; the results' report claims for ``reserved`` lanes."""
        live: list[_Outcome] = []
        for o in batch:
            if o.lease.lost:
                self._drop(o.lease, o.lease.task.cancel_reason or "lease lost")
                self._forget(o.lease)
            else:
                live.append(o)
        completes = [o for o in live if o.result is not None]
        for o in live:
            if o.error is not None:
                self._send_failure(o)
        if not completes:
            return
        if self.batch_results:
            self._send_results(completes, self._claim_next(reserved))
        else:
            budget = reserved
            for i, o in enumerate(completes):
                n = budget if i == len(completes) - 1 else min(budget, 1)
                budget -= n
                self._send_one_result(o, self._claim_next(n))

    def _claim_next(self, lanes: int) -> JsonObject | None:
        """The ``claim_next`` of a report that frees ``lanes`` lanes: as the claimer's claim, but never parked."""
        if lanes <= 0 or not self.claim_with_results or self._claims_refused or self._stop.is_set():
            return None
        # No worker_id: the coordinator takes the reporting worker's. No wait_seconds: a report that finds
        # nothing answers at once, so its results are never held up; the claimer's long poll takes over.
        req: JsonObject = {"workloads": self.workloads}
        n = min(lanes if self.prefetch else 1, _MAX_BATCH)
        if n > 1:
            req["max_tasks"] = n
        if self.lease_seconds is not None:
            req["lease_seconds"] = self.lease_seconds
        return req

    def _report_call(self, method: str, request: JsonObject) -> JsonObject:
        """:meth:`_retrying`, sent again without ``claim_next`` if the coordinator refuses that part.

        A coordinator older than ``claim_next`` refuses the field (over JSON; gRPC drops it unread, and then
        no task comes back). The refusal names the field, and nothing was written, so the results go out again
        without it, and from then on every report does without.
        """
        try:
            return self._retrying(method, request)
        except LeaseholdError as e:
            if "claim_next" not in request or "claim_next" not in e.message:
                raise
            self._claims_refused = True
            log.warning("the coordinator refuses claim_next (%s); reports claim nothing from now on", e)
            del request["claim_next"]
            return self._retrying(method, request)

    def _take_next(self, res: JsonObject) -> None:
        """Dispatches the tasks a report's ``claim_next`` leased, exactly as claimed ones."""
        cohort = _Cohort()
        for t in field_of(res, "next_tasks") or []:
            self._dispatch(TaskRecord.from_json(t), cohort)

    def _result_request(self, o: _Outcome) -> JsonObject:
        assert o.result is not None
        req = {"task_id": o.lease.task.id, "worker_id": self.worker_id, "attempt": o.lease.task.attempt,
               "result_uri": o.result.uri, "result_sha256": o.result.sha256}
        if o.result.metrics is not None:
            req["metrics"] = dict(o.result.metrics)
        return req

    def _retrying(self, method: str, request: JsonObject) -> JsonObject:
        """Calls until the coordinator answers: a result replayed after a lost answer is accepted again."""
        backoff = _Backoff()
        outage = False
        while True:
            if self._stop.is_set():
                request.pop("claim_next", None)  # a drain claims nothing new, not even through a retried report
            try:
                res = self._call(method, request)
                if outage:
                    log.info("%s delivered after the coordinator came back", method)
                return res
            except LeaseholdError as e:
                if not _transient(e):
                    raise
                if not outage:
                    log.warning("%s failed (%s); retrying with backoff", method, e)
                outage = True
                time.sleep(backoff.next())

    def _send_results(self, completes: list[_Outcome], claim: JsonObject | None) -> None:
        req: JsonObject = {"results": [self._result_request(o) for o in completes]}
        if claim is not None:
            req["claim_next"] = claim
        try:
            res = self._report_call("CompleteTasks", req)
        except InvalidArgumentError as e:
            # One malformed result refuses the whole batch: send them one by one to fail only the bad one.
            log.warning("CompleteTasks refused the batch (%s); sending the results one by one", e)
            for o in completes:
                self._send_one_result(o)
            return
        except LeaseholdError as e:
            log.error("results of %d task(s) not reported: %s", len(completes), e)
            for o in completes:
                self._forget(o.lease)
            return
        outcomes = field_of(res, "outcomes") or []
        for o, out in zip(completes, outcomes, strict=False):
            err = field_of(out, "error")
            if err:
                code = str(field_of(err, "code", "unknown"))
                self._refused(o, code, str(field_of(err, "message", "")), None)
            else:
                self._count("completed")
            self._forget(o.lease)
        self._take_next(res)

    def _send_one_result(self, o: _Outcome, claim: JsonObject | None = None) -> None:
        req = self._result_request(o)
        if claim is not None:
            req["claim_next"] = claim
        try:
            res = self._report_call("CompleteTask", req)
            self._count("completed")
        except InvalidArgumentError as e:
            o.error = TaskError(f"the coordinator refused the handler's result: {e.message}", code="invalid_result")
            self._send_failure(o)
            return
        except LeaseholdError as e:
            self._refused(o, e.code, e.message, e.request_id)
            self._forget(o.lease)
            return
        self._forget(o.lease)
        self._take_next(res)

    def _refused(self, o: _Outcome, code: str, message: str, request_id: str | None) -> None:
        """A result the coordinator would not take; never sent again (it would be refused again)."""
        self._count("dropped")
        task = o.lease.task
        if code == "aborted":
            log.warning("late result of task %s (attempt %d) refused, lease lost: %s (request id %s)",
                        task.id, task.attempt, message, request_id)
        else:
            log.error("result of task %s (attempt %d) refused: %s: %s (request id %s)",
                      task.id, task.attempt, code, message, request_id)

    def _send_failure(self, o: _Outcome) -> None:
        assert o.error is not None
        task, e = o.lease.task, o.error
        retryable = isinstance(e, TaskError) and e.retryable
        req: JsonObject = {"task_id": task.id, "worker_id": self.worker_id, "attempt": task.attempt,
                           "error_code": error_code_of(e), "error_message": _error_message_of(e),
                           "retryable": retryable}
        if isinstance(e, TaskError) and e.retryable and e.retry_after is not None:
            req["retry_after_seconds"] = min(max(math.ceil(e.retry_after), 0), 86_400)
        if not retryable:
            log.warning("task %s (attempt %d) failed for good: %s", task.id, task.attempt, req["error_message"],
                        exc_info=e if not isinstance(e, TaskError) else None)
        try:
            try:
                self._retrying("FailTask", req)
            except InvalidArgumentError:
                if "retry_after_seconds" not in req:
                    raise
                # A delay the coordinator will not take (an explicit 0, say): let it pick the backoff.
                del req["retry_after_seconds"]
                self._retrying("FailTask", req)
            self._count("failed")
        except LeaseholdError as err:
            self._refused(o, err.code, err.message, err.request_id)
        self._forget(o.lease)
