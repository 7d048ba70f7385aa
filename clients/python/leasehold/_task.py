"""What a handler sees and returns: the leased :class:`Task`, its :class:`Result`, and the exceptions that fail it.

Also the process-lane side of a task (a handler run in a child process by ``executor="process"``): where its
progress reports go, and how it learns that its task was cancelled.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .accounts import Usage, check_usage
from .models import JobParent, TaskRecord

__all__ = ["Handler", "Result", "RetryableError", "Task", "TaskCancelled", "TaskError", "error_code_of",
           "error_message_of"]

Handler = Callable[["Task"], "Result"]
#: Where a task's progress reports go: the worker's heartbeats (thread lanes) or a queue to the parent (process lanes).
ProgressSink = Callable[["Task", float, str, "str | None"], None]

# Server limits (README "Limits"): error_code ^[a-z0-9_.-]{1,64}$, error_message cut at 2,000 characters.
_ERROR_CODE_MAX = 64
_ERROR_MESSAGE_MAX = 2000


@dataclass(frozen=True)
class Result:
    """What a handler returns: where it wrote the result, the result's hex SHA-256, optional metrics and usage.

    ``usage`` is what the attempt used, as named counters (``{"gpu_ms": 1200, "tokens": 5000}``: keys
    ``^[a-z][a-z0-9_.]{0,62}$``, at most 32, ints from 0 to 2**53 - 1); it is recorded once with the accepted
    result and summed into the job's usage. Unlike ``metrics`` it is part of the report's identity: a result
    sent again must carry the same usage. A counter outside those rules raises :class:`ValueError` here, in
    the handler, which fails the task with that message.
    """

    uri: str
    sha256: str
    metrics: Mapping[str, Any] | None = None
    usage: Mapping[str, int] | None = None

    def __post_init__(self) -> None:
        if self.usage is not None:
            object.__setattr__(self, "usage", check_usage(self.usage, "Result.usage"))


class TaskError(Exception):
    """A handler failure with an explicit ``code`` (``^[a-z0-9_.-]{1,64}$``); permanent unless ``retryable``.

    Any other exception a handler raises is a permanent failure whose code is the exception's class name in
    snake case (``ValueError`` → ``value_error``).

    ``usage`` is what the failed attempt used before it failed (as :attr:`Result.usage`): failed attempts
    consume resources too, and it is summed into the job's usage like a result's.

    Example::

        raise TaskError("out of memory", code="oom", usage={"gpu_ms": 90_000})
    """

    def __init__(self, message: str = "", *, code: str | None = None, retryable: bool = False,
                 retry_after: float | None = None, usage: Mapping[str, int] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retryable = retryable
        self.retry_after = retry_after
        self.usage: Usage | None = check_usage(usage, "TaskError.usage") if usage is not None else None

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments: rebuild through a helper so the exception survives pickling (process lanes).
        return (_rebuild_task_error, (type(self), self.message, self.code, self.retryable, self.retry_after,
                                      self.usage))


def _rebuild_task_error(cls: type[TaskError], message: str, code: str | None, retryable: bool,
                        retry_after: float | None, usage: Usage | None = None) -> TaskError:
    err = cls.__new__(cls)
    TaskError.__init__(err, message, code=code, retryable=retryable, retry_after=retry_after, usage=usage)
    return err


class RetryableError(TaskError):
    """A handler failure another attempt may fix; retried after ``retry_after`` seconds (else the server's backoff)."""

    def __init__(self, message: str = "", *, retry_after: float | None = None, code: str | None = None,
                 usage: Mapping[str, int] | None = None) -> None:
        super().__init__(message, code=code, retryable=True, retry_after=retry_after, usage=usage)


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


def error_message_of(exc: BaseException) -> str:
    """The ``error_message`` reported for an exception.

    A :class:`TaskError`'s message as it was given (its class already speaks through the code); for any other
    exception ``"ClassName: message"``, so ``ValueError("bad frame")`` reads ``ValueError: bad frame``. Cut to
    the coordinator's limit of 2,000 characters.
    """
    text = str(exc)
    if not text:
        return type(exc).__name__
    return (text if isinstance(exc, TaskError) else f"{type(exc).__name__}: {text}")[:_ERROR_MESSAGE_MAX]


class TaskFields:
    """The leased task's fields, as both kinds of task show them to a handler.

    ``id``, ``job_id``, ``chunk_index``, ``workload``, ``attempt``, ``max_attempts``, ``input_uri``,
    ``input_sha256``, ``parameters``, ``priority``, ``traceparent``, ``lease_expires_at``, ``concurrency_key``,
    ``required_labels``, ``parents`` (the coordinator's task; ``parents`` are its job's parents as
    :class:`~leasehold.models.JobParent` s, each with its status and, for a parent of one task, its result),
    ``worker_id``, and ``record`` (the whole :class:`~leasehold.models.TaskRecord`).
    """

    def __init__(self, record: TaskRecord, worker_id: str) -> None:
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
        self.concurrency_key = record.concurrency_key
        self.required_labels: dict[str, str] = dict(record.required_labels)
        self.parents: list[JobParent] = list(record.parents)
        self.worker_id = worker_id
        self.cancel_reason = ""

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(id={self.id!r}, job_id={self.job_id!r}, chunk_index={self.chunk_index}, "
                f"attempt={self.attempt})")


class Task(TaskFields):
    """One leased task, handed to a handler.

    Attributes mirror the coordinator's task (``id``, ``job_id``, ``chunk_index``, ``workload``, ``attempt``,
    ``max_attempts``, ``input_uri``, ``input_sha256``, ``parameters``, ``priority``, ``traceparent``,
    ``lease_expires_at``, ``concurrency_key``, ``required_labels``, ``parents``) plus ``worker_id``. A stage after
    others reads its inputs from ``parents``: each parent job's status and, for a parent of one task, its
    result manifest (``task.parents[0].result.result_uri``); a parent of many tasks by ``Client.results``. The worker heartbeats
    the lease by itself; when a heartbeat (or :meth:`progress`) finds the task cancelled or the lease lost,
    :attr:`cancelled` turns true and :attr:`cancel_event` is set: the handler should stop, as its result will
    not be reported.
    """

    def __init__(self, record: TaskRecord, worker_id: str, progress: ProgressSink | None = None) -> None:
        super().__init__(record, worker_id)
        self.cancel_event = threading.Event()
        self._progress = progress

    def __getstate__(self) -> dict[str, Any]:
        # Process lanes get a copy without the worker's reporter (threads, sockets) and with an event of their own.
        state = dict(self.__dict__)
        state["_progress"] = None
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
        if self._progress is not None:
            self._progress(self, fraction, message, partial_result_uri)
        elif _child_progress is not None:
            _child_progress.put((self.id, self.attempt, fraction, message, partial_result_uri))

    def _cancel(self, reason: str) -> None:
        if not self.cancel_event.is_set():
            self.cancel_reason = reason
            self.cancel_event.set()


class CancelledIds:
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
_child_cancelled: CancelledIds | None = None


def child_init(progress_queue: Any, cancelled: CancelledIds) -> None:
    global _child_progress, _child_cancelled
    _child_progress = progress_queue
    _child_cancelled = cancelled
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent drains; children just finish or are terminated
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def child_run(handler: Handler, task: Task) -> Result:
    return handler(task)

