"""Typed data classes for what the coordinator returns, built alike from both transports' answers.

Both transports hand these constructors JSON objects: the JSON transport as the
coordinator sent them, the gRPC one converted from the protobuf messages. Field
names are looked up in their proto spelling (``lease_expires_at``) and in their
JSON lowerCamelCase (``leaseExpiresAt``), and absent fields take the proto
default, so answers that omit default values or use either spelling read the
same. The contents of ``parameters`` and ``metrics`` are user data: their keys
are never renamed, and their numbers are read the same way on both transports
(see :func:`plain_json`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, cast

__all__ = [
    "AttemptOutcome",
    "AttemptProgress",
    "CreatedJob",
    "EventKind",
    "FailurePolicy",
    "Job",
    "JobEvent",
    "JobFailure",
    "JobSnapshot",
    "JobStatus",
    "ResultManifest",
    "RetriedJob",
    "TaskAttempt",
    "TaskCounts",
    "TaskDetail",
    "TaskRecord",
    "TaskSpec",
    "TaskStatus",
    "WatchUpdate",
    "Workload",
    "plain_json",
]

JsonObject = dict[str, Any]

#: A job's status; ``""`` only for a field the coordinator left unset.
JobStatus = Literal["", "pending", "running", "completed", "failed", "cancelled", "scheduled"]
#: A task's status; ``""`` only for a field the coordinator left unset.
TaskStatus = Literal["", "pending", "leased", "completed", "failed", "cancelled"]
#: What a :class:`JobEvent` records.
EventKind = Literal["", "task_status", "task_progress", "job_status"]
#: What a job does when its tasks fail for good: ``fail_fast`` (the first failure past ``max_failed_tasks``
#: fails the job and cancels its unfinished tasks; the default) or ``continue`` (every other task still runs;
#: the job ends once all are final: failed when more than ``max_failed_tasks`` failed, else completed).
FailurePolicy = Literal["", "fail_fast", "continue"]
#: How an attempt of a task ended (``running``: it holds its lease now).
AttemptOutcome = Literal["", "running", "completed", "failed", "lease_expired", "cancelled"]

_CAMEL: dict[str, str] = {}


def _camel(name: str) -> str:
    c = _CAMEL.get(name)
    if c is None:
        head, *rest = name.split("_")
        c = _CAMEL[name] = head + "".join(p[:1].upper() + p[1:] for p in rest)
    return c


def field_of(d: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """``d[name]`` in its proto or its lowerCamelCase spelling, else ``default``."""
    if name in d:
        return d[name]
    return d.get(_camel(name), default)


def _str(d: Mapping[str, Any], name: str) -> str:
    v = field_of(d, name, "")
    return "" if v is None else str(v)


def _int(d: Mapping[str, Any], name: str) -> int:
    v = field_of(d, name, 0)
    return int(v) if v is not None else 0


def _float(d: Mapping[str, Any], name: str) -> float:
    v = field_of(d, name, 0.0)
    return float(v) if v is not None else 0.0


def _bool(d: Mapping[str, Any], name: str) -> bool:
    return bool(field_of(d, name, False))


# The largest magnitude up to which every integer is a double: ``google.protobuf.Struct`` carries every
# number as a double, so no integer beyond it survives the trip on either transport.
_EXACT = 2**53


def plain_json(value: Any) -> Any:
    """A ``google.protobuf.Struct`` value as the same Python value on both transports.

    A Struct carries every number as a double: over gRPC ``{"frames": 240}`` arrives as ``240.0``, over JSON
    as ``240``. Read through this function, a number is an ``int`` when it is integral and within ±2**53
    (``240.0`` → ``240``, ``-0.0`` → ``0``), else a ``float`` (``240.5``, ``1e300``; an integer beyond 2**53
    could not be carried exactly and reads as the float it became). Lists and dicts are read item by item;
    strings, booleans and ``None`` are kept.

    Example::

        >>> plain_json({"frames": 240.0, "fps": 23.976, "sizes": [1.0, 2.5], "big": 1e300})
        {'frames': 240, 'fps': 23.976, 'sizes': [1, 2.5], 'big': 1e+300}
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() and abs(value) <= _EXACT else value
    if isinstance(value, int):
        return value if abs(value) <= _EXACT else float(value)
    if isinstance(value, Mapping):
        return {str(k): plain_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_json(v) for v in value]
    return value


def _obj(d: Mapping[str, Any], name: str) -> JsonObject | None:
    v = field_of(d, name)
    return plain_json(v) if isinstance(v, Mapping) else None


_FRACTION = re.compile(r"\.(\d+)")


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp as an aware datetime (nanoseconds cut to microseconds); ``None`` when unset."""
    if not value or not isinstance(value, str):
        return None
    text = value.replace("Z", "+00:00").replace("z", "+00:00")
    text = _FRACTION.sub(lambda m: "." + (m.group(1) + "000000")[:6], text, count=1)
    return datetime.fromisoformat(text)


def _time(d: Mapping[str, Any], name: str) -> datetime | None:
    return parse_time(field_of(d, name))


def _enum(d: Mapping[str, Any], name: str, prefix: str, names: tuple[str, ...]) -> str:
    """An enum as its lower-case short name (``JOB_STATUS_FAILED`` → ``failed``); ``""`` when unspecified."""
    v = field_of(d, name)
    if isinstance(v, int):
        return names[v] if 0 <= v < len(names) else str(v)
    if not v:
        return ""
    s = str(v)
    if s.startswith(prefix):
        s = s[len(prefix):]
    s = s.lower()
    return "" if s == "unspecified" else s


_TASK_STATUSES = ("", "pending", "leased", "completed", "failed", "cancelled")
_JOB_STATUSES = ("", "pending", "running", "completed", "failed", "cancelled", "scheduled")
_EVENT_KINDS = ("", "task_status", "task_progress", "job_status")
_OUTCOMES = ("", "running", "completed", "failed", "lease_expired", "cancelled")
_POLICIES = ("", "fail_fast", "continue")


def _policy(d: Mapping[str, Any]) -> FailurePolicy:
    return cast(FailurePolicy, _enum(d, "failure_policy", "FAILURE_POLICY_", _POLICIES))


def rfc3339(at: datetime | str) -> str:
    """A time as proto JSON: an RFC 3339 string (a naive datetime is read as UTC; a string is sent as given)."""
    if isinstance(at, str):
        return at
    if at.tzinfo is None:
        at = at.replace(tzinfo=timezone.utc)
    return at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def _job_status(d: Mapping[str, Any], name: str) -> JobStatus:
    return cast(JobStatus, _enum(d, name, "JOB_STATUS_", _JOB_STATUSES))


def _task_status(d: Mapping[str, Any], name: str) -> TaskStatus:
    return cast(TaskStatus, _enum(d, name, "TASK_STATUS_", _TASK_STATUSES))


def _list(d: Mapping[str, Any], name: str) -> list[Any]:
    v = field_of(d, name)
    return list(v) if isinstance(v, (list, tuple)) else []


def _msg(d: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    v = field_of(d, name)
    return v if isinstance(v, Mapping) else {}


@dataclass(frozen=True)
class TaskSpec:
    """One chunk of a job as submitted to :meth:`leasehold.Client.create_job`.

    Example::

        TaskSpec(0, "s3://in/0.mp4", sha256_hex, parameters={"frames": 240})

    ``run_at`` (a datetime, naive read as UTC, or an RFC 3339 string) delays this task; unset, the job's.
    """

    chunk_index: int
    input_uri: str
    input_sha256: str
    parameters: JsonObject | None = None
    workload: str | None = None
    run_at: datetime | str | None = None

    def to_json(self) -> JsonObject:
        """The proto JSON of the spec, without unset fields."""
        out: JsonObject = {"chunk_index": self.chunk_index, "input_uri": self.input_uri,
                           "input_sha256": self.input_sha256}
        if self.parameters is not None:
            out["parameters"] = self.parameters
        if self.workload:
            out["workload"] = self.workload
        if self.run_at is not None:
            out["run_at"] = rfc3339(self.run_at)
        return out


@dataclass(frozen=True)
class Job:
    """A job as the coordinator stores it.

    ``status`` is ``pending``, ``running``, ``completed``, ``failed`` or ``cancelled``; ``parameters`` as
    :func:`plain_json` reads them. ``failure_policy`` (``fail_fast`` or ``continue``) and ``max_failed_tasks``
    say what the job does when its tasks fail for good (see :data:`FailurePolicy`); a completed job may hold
    up to ``max_failed_tasks`` failed tasks.
    """

    id: str
    workload: str
    status: JobStatus
    input_uri: str = ""
    input_sha256: str = ""
    parameters: JsonObject | None = None
    priority: int = 0
    idempotency_key: str = ""
    traceparent: str = ""
    cancel_reason: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    completed_at: datetime | None = None
    failure_policy: FailurePolicy = ""
    max_failed_tasks: int = 0
    #: When its tasks fall due, while that lies ahead (the job is ``scheduled`` until then).
    run_at: datetime | None = None
    #: The job enqueued when this one ended (its finalizer); ``""`` until then or when none ran.
    finalizer_job_id: str = ""
    #: On a finalizer job: the job whose end enqueued it.
    parent_job_id: str = ""

    @property
    def finished(self) -> bool:
        """Whether the job reached a final status."""
        return self.status in ("completed", "failed", "cancelled")

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Job:
        """A job from its proto JSON."""
        return cls(
            id=_str(d, "id"), workload=_str(d, "workload"), status=_job_status(d, "status"),
            input_uri=_str(d, "input_uri"), input_sha256=_str(d, "input_sha256"), parameters=_obj(d, "parameters"),
            priority=_int(d, "priority"), idempotency_key=_str(d, "idempotency_key"),
            traceparent=_str(d, "traceparent"), cancel_reason=_str(d, "cancel_reason"),
            created_at=_time(d, "created_at"), updated_at=_time(d, "updated_at"),
            completed_at=_time(d, "completed_at"), failure_policy=_policy(d),
            max_failed_tasks=_int(d, "max_failed_tasks"), run_at=_time(d, "run_at"),
            finalizer_job_id=_str(d, "finalizer_job_id"), parent_job_id=_str(d, "parent_job_id"),
        )


@dataclass(frozen=True)
class TaskRecord:
    """A task as the coordinator stores it (what CreateJob, GetTask, ListTasks and the lease calls return).

    ``error_code`` and ``error_message`` are those of the task's last failure (kept when a later attempt
    runs); ``parameters`` (the job's merged with the chunk's) and ``metrics`` as :func:`plain_json` reads them.
    """

    id: str
    job_id: str
    chunk_index: int
    workload: str
    status: TaskStatus
    attempt: int = 0
    max_attempts: int = 0
    input_uri: str = ""
    input_sha256: str = ""
    parameters: JsonObject | None = None
    priority: int = 0
    lease_owner: str = ""
    lease_expires_at: datetime | None = None
    result_uri: str = ""
    result_sha256: str = ""
    metrics: JsonObject | None = None
    error_code: str = ""
    error_message: str = ""
    traceparent: str = ""
    version: int = 0
    created_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TaskRecord:
        """A task from its proto JSON."""
        return cls(
            id=_str(d, "id"), job_id=_str(d, "job_id"), chunk_index=_int(d, "chunk_index"),
            workload=_str(d, "workload"), status=_task_status(d, "status"),
            attempt=_int(d, "attempt"), max_attempts=_int(d, "max_attempts"), input_uri=_str(d, "input_uri"),
            input_sha256=_str(d, "input_sha256"), parameters=_obj(d, "parameters"), priority=_int(d, "priority"),
            lease_owner=_str(d, "lease_owner"), lease_expires_at=_time(d, "lease_expires_at"),
            result_uri=_str(d, "result_uri"), result_sha256=_str(d, "result_sha256"), metrics=_obj(d, "metrics"),
            error_code=_str(d, "error_code"), error_message=_str(d, "error_message"),
            traceparent=_str(d, "traceparent"), version=_int(d, "version"), created_at=_time(d, "created_at"),
            started_at=_time(d, "started_at"), completed_at=_time(d, "completed_at"),
        )


@dataclass(frozen=True)
class AttemptProgress:
    """The last progress a worker reported in an attempt."""

    progress: float = 0.0
    message: str = ""
    partial_result_uri: str = ""
    reported_at: datetime | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AttemptProgress:
        """From its proto JSON."""
        return cls(progress=_float(d, "progress"), message=_str(d, "message"),
                   partial_result_uri=_str(d, "partial_result_uri"), reported_at=_time(d, "reported_at"))


@dataclass(frozen=True)
class TaskAttempt:
    """One attempt of a task: one lease, from its claim to its end.

    ``outcome`` is ``running`` (it holds its lease now), ``completed``, ``failed`` (with the worker's
    ``error_code`` and ``error_message``), ``lease_expired`` (the worker went silent) or ``cancelled``;
    ``retried`` tells whether a failed or expired attempt sent the task back for another one.
    """

    attempt: int
    worker_id: str = ""
    outcome: AttemptOutcome = ""
    error_code: str = ""
    error_message: str = ""
    retried: bool = False
    leased_at: datetime | None = None
    ended_at: datetime | None = None
    last_progress: AttemptProgress | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TaskAttempt:
        """From its proto JSON."""
        progress = field_of(d, "last_progress")
        return cls(
            attempt=_int(d, "attempt"), worker_id=_str(d, "worker_id"),
            outcome=cast(AttemptOutcome, _enum(d, "outcome", "ATTEMPT_OUTCOME_", _OUTCOMES)),
            error_code=_str(d, "error_code"), error_message=_str(d, "error_message"), retried=_bool(d, "retried"),
            leased_at=_time(d, "leased_at"), ended_at=_time(d, "ended_at"),
            last_progress=AttemptProgress.from_json(progress) if isinstance(progress, Mapping) else None,
        )


@dataclass(frozen=True)
class TaskDetail:
    """A task with the history of its attempts, oldest first (:meth:`leasehold.Client.get_task`, ``list_tasks``).

    Example::

        detail = client.get_task(task_id)
        for a in detail.attempts:
            print(a.attempt, a.worker_id, a.outcome, a.error_code, a.error_message)
    """

    task: TaskRecord
    attempts: list[TaskAttempt] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TaskDetail:
        """From GetTaskResponse or TaskDetail JSON."""
        return cls(task=TaskRecord.from_json(_msg(d, "task")),
                   attempts=[TaskAttempt.from_json(a) for a in _list(d, "attempts")])


@dataclass(frozen=True)
class TaskCounts:
    """Number of a job's tasks in each status."""

    pending: int = 0
    leased: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> TaskCounts:
        """Counts from their proto JSON (missing counts are 0)."""
        d = d or {}
        return cls(*(_int(d, n) for n in ("pending", "leased", "completed", "failed", "cancelled")))


@dataclass(frozen=True)
class JobFailure:
    """Why a job failed: the task whose failure failed it.

    ``error_code`` is the worker's (its handler's exception), ``"lease_expired"`` (the last attempt's worker
    went silent) or ``"expired"`` (nobody claimed the task in time); ``attempt`` and ``worker_id`` are those
    of its last attempt (``0`` and ``""`` when it was never leased).
    """

    task_id: str
    chunk_index: int
    error_code: str
    error_message: str = ""
    attempt: int = 0
    worker_id: str = ""
    failed_at: datetime | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> JobFailure:
        """From its proto JSON."""
        return cls(task_id=_str(d, "task_id"), chunk_index=_int(d, "chunk_index"), error_code=_str(d, "error_code"),
                   error_message=_str(d, "error_message"), attempt=_int(d, "attempt"),
                   worker_id=_str(d, "worker_id"), failed_at=_time(d, "failed_at"))


@dataclass(frozen=True)
class JobSnapshot:
    """A job with the status of its tasks, as GetJob (and the first WatchJob message) returns it.

    ``failure`` is set while the job is failed: the task failure that failed it. Every failed chunk (with its
    attempts) is in ``client.list_tasks(job_id, status="failed")``.
    """

    job: Job
    task_counts: TaskCounts
    total_tasks: int
    progress: float
    failure: JobFailure | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> JobSnapshot:
        """A snapshot from its proto JSON."""
        failure = field_of(d, "failure")
        return cls(job=Job.from_json(_msg(d, "job")), task_counts=TaskCounts.from_json(field_of(d, "task_counts")),
                   total_tasks=_int(d, "total_tasks"), progress=_float(d, "progress"),
                   failure=JobFailure.from_json(failure) if isinstance(failure, Mapping) and failure else None)


@dataclass(frozen=True)
class CreatedJob:
    """What :meth:`leasehold.Client.create_job` returns: the job (new, or the original for an idempotent replay) and its tasks."""

    job: Job
    tasks: list[TaskRecord]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CreatedJob:
        """From CreateJobResponse JSON."""
        return cls(job=Job.from_json(_msg(d, "job")), tasks=[TaskRecord.from_json(t) for t in _list(d, "tasks")])


@dataclass(frozen=True)
class RetriedJob:
    """What :meth:`leasehold.Client.retry` returns."""

    job: Job
    retried_tasks: int


@dataclass(frozen=True)
class ResultManifest:
    """The result manifest of one completed task; ``metrics`` as :func:`plain_json` reads them."""

    chunk_index: int
    task_id: str
    result_uri: str
    result_sha256: str
    metrics: JsonObject | None = None
    completed_at: datetime | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ResultManifest:
        """From its proto JSON."""
        return cls(chunk_index=_int(d, "chunk_index"), task_id=_str(d, "task_id"), result_uri=_str(d, "result_uri"),
                   result_sha256=_str(d, "result_sha256"), metrics=_obj(d, "metrics"),
                   completed_at=_time(d, "completed_at"))


@dataclass(frozen=True)
class JobEvent:
    """One committed change of a job or one of its tasks.

    ``kind`` is ``task_status`` (``task_status`` is the task's new status; a failure or retry carries
    ``error_code`` and ``error_message``), ``task_progress`` (``progress``, ``message``,
    ``partial_result_uri``) or ``job_status`` (``job_status``).
    """

    id: int
    job_id: str
    kind: EventKind
    task_id: str = ""
    chunk_index: int = 0
    task_status: TaskStatus = ""
    previous_task_status: TaskStatus = ""
    job_status: JobStatus = ""
    previous_job_status: JobStatus = ""
    attempt: int = 0
    worker_id: str = ""
    progress: float = 0.0
    message: str = ""
    partial_result_uri: str = ""
    error_code: str = ""
    created_at: datetime | None = None
    error_message: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> JobEvent:
        """From its proto JSON."""
        return cls(
            id=_int(d, "id"), job_id=_str(d, "job_id"),
            kind=cast(EventKind, _enum(d, "kind", "JOB_EVENT_KIND_", _EVENT_KINDS)),
            task_id=_str(d, "task_id"), chunk_index=_int(d, "chunk_index"),
            task_status=_task_status(d, "task_status"), previous_task_status=_task_status(d, "previous_task_status"),
            job_status=_job_status(d, "job_status"), previous_job_status=_job_status(d, "previous_job_status"),
            attempt=_int(d, "attempt"), worker_id=_str(d, "worker_id"), progress=_float(d, "progress"),
            message=_str(d, "message"), partial_result_uri=_str(d, "partial_result_uri"),
            error_code=_str(d, "error_code"), created_at=_time(d, "created_at"),
            error_message=_str(d, "error_message"),
        )


@dataclass(frozen=True)
class WatchUpdate:
    """One message of :meth:`leasehold.Client.watch`: the first carries ``snapshot``, every later one ``event``."""

    snapshot: JobSnapshot | None = None
    event: JobEvent | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WatchUpdate:
        """From WatchJobResponse JSON."""
        snap = field_of(d, "snapshot")
        if snap is not None:
            return cls(snapshot=JobSnapshot.from_json(snap))
        return cls(event=JobEvent.from_json(_msg(d, "event")))


@dataclass(frozen=True)
class Workload:
    """A registered workload and its defaults (a job's ``failure_policy`` and ``max_failed_tasks`` among them)."""

    name: str
    max_attempts: int = 0
    lease_seconds: int = 0
    max_pending_seconds: int = 0
    parameters_schema: JsonObject | None = field(default=None)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    failure_policy: FailurePolicy = ""
    max_failed_tasks: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Workload:
        """From its proto JSON."""
        return cls(name=_str(d, "name"), max_attempts=_int(d, "max_attempts"), lease_seconds=_int(d, "lease_seconds"),
                   max_pending_seconds=_int(d, "max_pending_seconds"),
                   parameters_schema=_obj(d, "parameters_schema"), created_at=_time(d, "created_at"),
                   updated_at=_time(d, "updated_at"), failure_policy=_policy(d),
                   max_failed_tasks=_int(d, "max_failed_tasks"))
