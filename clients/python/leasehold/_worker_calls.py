"""What a worker sends and how it reads the coordinator's refusals: the same for both workers.

:class:`~leasehold.Worker` and :class:`~leasehold.aio.AsyncWorker` both use this module.

The two workers differ in how they wait (threads or an event loop), not in what they say: every request they
make is built here (claims, a report's ``claim_next``, heartbeats, progress, results, failures, giving a task
back, the start-up probes), and every answer that changes what they do is read here (a cancellation or a lost
lease, a refusal worth retrying, a token or workload the coordinator refuses at start). So both send the same
bytes and behave alike under the same answers.
"""

from __future__ import annotations

import math
import os
import re
import socket
from collections.abc import Mapping
from typing import Any, Protocol

from ._task import Result, TaskError, error_code_of, error_message_of
from .errors import (
    InvalidArgumentError,
    LeaseholdError,
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
    WorkerConfigError,
)
from .models import field_of

JsonObject = dict[str, Any]

# Server limits (README "Limits"): at most 100 tasks per claim and results per CompleteTasks, error_message
# cut at 2,000 characters.
MAX_BATCH = 100
ERROR_MESSAGE_MAX = 2000

_WORKER_ID = re.compile(r"^[\x21-\x7e]{1,128}$")
_NIL_UUID = "00000000-0000-0000-0000-000000000000"

# The retry_after_seconds of a task given back: 0 (another worker may lease it now); a coordinator that takes
# no explicit 0 gets 1, then no delay of ours (its own backoff).
RELEASE_DELAYS: tuple[int | None, ...] = (0, 1, None)


class Settings(Protocol):
    """What a worker's requests carry (both workers have these attributes)."""

    worker_id: str
    workloads: list[str]
    labels: dict[str, str]
    lease_seconds: int | None
    wait_seconds: int
    prefetch: bool


class LeasedTask(Protocol):
    """What a request about a leased task needs of it."""

    id: str
    attempt: int


def check_options(workloads: list[str], concurrency: int, wait_seconds: int, transport: str,
                  labels: Mapping[str, str] | None, worker_id: str | None, worker_prefix: str) -> str:
    """Raises :class:`ValueError` for options no coordinator would take; returns the ``worker_id`` to use."""
    if not workloads:
        raise ValueError("workloads: at least one")
    if concurrency < 1:
        raise ValueError("concurrency: at least 1")
    if not 0 <= wait_seconds <= 30:
        raise ValueError("wait_seconds: 0 to 30")
    if transport not in ("json", "grpc"):
        raise ValueError('transport must be "json" or "grpc"')
    if labels is not None and not (isinstance(labels, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items())):
        raise ValueError(f"labels: a mapping of label names to values, all strings: {labels!r}")
    worker_id = worker_id or f"{worker_prefix}{socket.gethostname()}-{os.getpid()}"
    if not _WORKER_ID.match(worker_id):
        raise ValueError(f"worker_id must be 1 to 128 printable ASCII characters without spaces: {worker_id!r}")
    return worker_id


def claim_request(s: Settings, free: int) -> JsonObject:
    """A long-poll claim for ``free`` free lanes (one task at a time without ``prefetch``)."""
    req: JsonObject = {"worker_id": s.worker_id, "workloads": s.workloads}
    if s.labels:
        req["labels"] = s.labels
    n = min(free if s.prefetch else 1, MAX_BATCH)
    if n > 1:
        req["max_tasks"] = n
    if s.lease_seconds is not None:
        req["lease_seconds"] = s.lease_seconds
    if s.wait_seconds > 0:
        req["wait_seconds"] = s.wait_seconds
    return req


def claim_next(s: Settings, lanes: int) -> JsonObject:
    """The ``claim_next`` of a report that frees ``lanes`` lanes: as a claim, but never parked.

    No worker_id: the coordinator takes the reporting worker's. No wait_seconds: a report that finds nothing
    answers at once, so its results are never held up; the long-poll claims take over.
    """
    req: JsonObject = {"workloads": s.workloads}
    if s.labels:
        req["labels"] = s.labels
    n = min(lanes if s.prefetch else 1, MAX_BATCH)
    if n > 1:
        req["max_tasks"] = n
    if s.lease_seconds is not None:
        req["lease_seconds"] = s.lease_seconds
    return req


def lease_request(s: Settings, task: LeasedTask) -> JsonObject:
    """A heartbeat (RenewLease) of ``task``'s lease; the base of its other lease-fenced calls."""
    req: JsonObject = {"task_id": task.id, "worker_id": s.worker_id, "attempt": task.attempt}
    if s.lease_seconds is not None:
        req["lease_seconds"] = s.lease_seconds
    return req


def progress_request(s: Settings, task: LeasedTask, fraction: float, message: str,
                     partial_result_uri: str | None) -> JsonObject:
    """A ReportProgress: the fraction clamped to 0–1, the message cut to 1,000 characters."""
    req = lease_request(s, task)
    req["progress"] = min(max(float(fraction), 0.0), 1.0)
    if message:
        req["message"] = message[:1000]
    if partial_result_uri:
        req["partial_result_uri"] = partial_result_uri
    return req


def result_request(s: Settings, task: LeasedTask, result: Result) -> JsonObject:
    """One result (a CompleteTask, or one of a CompleteTasks' ``results``)."""
    req: JsonObject = {"task_id": task.id, "worker_id": s.worker_id, "attempt": task.attempt,
                       "result_uri": result.uri, "result_sha256": result.sha256}
    if result.metrics is not None:
        req["metrics"] = dict(result.metrics)
    if result.usage:
        req["usage"] = dict(result.usage)
    return req


def failure_request(s: Settings, task: LeasedTask, e: BaseException) -> JsonObject:
    """The FailTask of a handler's exception: retryable for a :class:`RetryableError`, else for good."""
    retryable = isinstance(e, TaskError) and e.retryable
    req: JsonObject = {"task_id": task.id, "worker_id": s.worker_id, "attempt": task.attempt,
                       "error_code": error_code_of(e), "error_message": error_message_of(e), "retryable": retryable}
    if isinstance(e, TaskError) and e.retryable and e.retry_after is not None:
        req["retry_after_seconds"] = min(max(math.ceil(e.retry_after), 0), 86_400)
    if isinstance(e, TaskError) and e.usage:
        req["usage"] = dict(e.usage)
    return req


def release_request(s: Settings, task: LeasedTask, why: str, retry_after: int | None) -> JsonObject:
    """Giving a task back: a retryable failure (``worker_draining``) due after ``retry_after`` seconds."""
    req: JsonObject = {"task_id": task.id, "worker_id": s.worker_id, "attempt": task.attempt,
                       "error_code": "worker_draining", "error_message": why[:ERROR_MESSAGE_MAX], "retryable": True}
    if retry_after is not None:
        req["retry_after_seconds"] = retry_after
    return req


def identity_probe(s: Settings) -> JsonObject:
    """A heartbeat of a task that cannot exist: the coordinator checks token and worker_id before the task.

    NOT_FOUND then means both were accepted; nothing is written either way.
    """
    return {"task_id": _NIL_UUID, "worker_id": s.worker_id, "attempt": 1}


def identity_refusal(s: Settings, e: LeaseholdError) -> WorkerConfigError | None:
    """The start-up error of an identity probe's refusal; ``None`` when it is no refusal of the worker's own."""
    if isinstance(e, PermissionDeniedError):
        return WorkerConfigError(
            f"the coordinator refuses worker_id {s.worker_id!r} with this token: {e.message} "
            "(a worker token only acts as worker_ids starting with its prefix; pass worker_id= or "
            "worker_prefix= to match it)")
    if isinstance(e, UnauthenticatedError):
        return WorkerConfigError(f"the coordinator refuses the token: {e.message}")
    if isinstance(e, InvalidArgumentError):
        return WorkerConfigError(f"the coordinator refuses worker_id {s.worker_id!r}: {e.message}")
    return None


def workloads_probe(s: Settings) -> JsonObject:
    """A result for a task that cannot exist, whose ``claim_next`` names the worker's workloads (and labels).

    The coordinator checks a claim_next's workloads before it looks the task up, so NOT_FOUND of the task
    means every workload is known (and the labels good); nothing is written either way.
    """
    claim: JsonObject = {"workloads": s.workloads}
    if s.labels:
        claim["labels"] = s.labels
    return {"task_id": _NIL_UUID, "worker_id": s.worker_id, "attempt": 1, "result_uri": "leasehold:probe",
            "result_sha256": "0" * 64, "claim_next": claim}


def workloads_refusal(s: Settings, e: LeaseholdError) -> tuple[str, WorkerConfigError | None]:
    """What a workloads probe's refusal means.

    ``("unknown_workloads", None)``: a workload is unknown (make the error with :func:`unknown_workloads`);
    ``("labels", error)``: labels no claim can carry; ``("no_claim_next", None)``: a coordinator older than
    claim_next (no report will carry one); ``("", None)``: nothing to act on.
    """
    if isinstance(e, (NotFoundError, InvalidArgumentError)):
        if e.reason == "WORKLOAD_NOT_FOUND" or "claim_next.workloads" in e.message:
            return "unknown_workloads", None
        if isinstance(e, InvalidArgumentError) and ("claim_next.labels" in e.message or any(
                v.field.startswith("claim_next.labels") for v in e.violations)):
            return "labels", WorkerConfigError(f"the coordinator refuses the worker's labels {s.labels!r}: {e.message}")
        if isinstance(e, InvalidArgumentError) and "claim_next" in e.message:
            return "no_claim_next", None
    return "", None


def known_workloads_of(e: LeaseholdError) -> list[str] | None:
    """The registered workloads an unknown-workload refusal names (its ErrorInfo), else ``None``."""
    if "known_workloads" not in e.metadata:
        return None
    return [w for w in e.metadata["known_workloads"].split(",") if w]


def workload_names(res: JsonObject) -> list[str]:
    """The names in a ListWorkloads answer."""
    return [str(field_of(x, "name")) for x in field_of(res, "workloads") or []]


def unknown_workloads(s: Settings, e: LeaseholdError, known: list[str] | None) -> WorkerConfigError:
    """The error of a worker whose workloads the coordinator refuses, naming the ones it knows (when known)."""
    listed = "" if known is None else f"; known workloads: {', '.join(known) or '(none)'}"
    return WorkerConfigError(f"the coordinator refuses a workload of {', '.join(s.workloads)} ({e.message}{listed}); "
                             "check the names, or register the workload with PutWorkload")


def cancellation(e: LeaseholdError) -> bool:
    """Whether a refusal says the task was cancelled (its job cancelled or failed), not that the lease is gone.

    The coordinator keeps the result of a task cancelled while leased when it arrives within that lease, so
    such a result is still worth sending; a lease lost to expiry or to another worker's attempt is not.
    """
    return e.code == "aborted" and "was cancelled" in e.message


def transient(e: LeaseholdError) -> bool:
    """Errors worth retrying as they are: the coordinator (or its database) is unavailable or slow."""
    return e.code in ("unavailable", "deadline_exceeded", "internal", "unknown", "cancelled", "canceled",
                      "resource_exhausted")
