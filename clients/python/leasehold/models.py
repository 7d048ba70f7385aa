"""Plain data classes for what the coordinator returns, built from its JSON.

Both transports hand these constructors JSON objects: the JSON transport as the
coordinator sent them, the gRPC one via ``MessageToDict``. Field names are
looked up in their proto spelling (``lease_expires_at``) and in their JSON
lowerCamelCase (``leaseExpiresAt``), and absent fields take the proto default,
so answers that omit default values or use either spelling read the same. The
contents of ``parameters`` and ``metrics`` are user data and are never renamed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = [
    "CreatedJob",
    "Job",
    "JobEvent",
    "JobSnapshot",
    "ResultManifest",
    "RetriedJob",
    "TaskCounts",
    "TaskRecord",
    "TaskSpec",
    "WatchUpdate",
    "Workload",
]

JsonObject = dict[str, Any]

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


def _obj(d: Mapping[str, Any], name: str) -> JsonObject | None:
    v = field_of(d, name)
    return dict(v) if isinstance(v, Mapping) else None


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
_JOB_STATUSES = ("", "pending", "running", "completed", "failed", "cancelled")
_EVENT_KINDS = ("", "task_status", "task_progress", "job_status")


@dataclass(frozen=True)
class TaskSpec:
    """One chunk of a job as submitted to :meth:`leasehold.Client.create_job`."""

    chunk_index: int
    input_uri: str
    input_sha256: str
    parameters: JsonObject | None = None
    workload: str | None = None

    def to_json(self) -> JsonObject:
        """The proto JSON of the spec, without unset fields."""
        out: JsonObject = {"chunk_index": self.chunk_index, "input_uri": self.input_uri,
                           "input_sha256": self.input_sha256}
        if self.parameters is not None:
            out["parameters"] = self.parameters
        if self.workload:
            out["workload"] = self.workload
        return out


@dataclass(frozen=True)
class Job:
    """A job as the coordinator stores it. ``status`` is ``pending``, ``running``, ``completed``, ``failed`` or ``cancelled``."""

    id: str
    workload: str
    status: str
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

    @property
    def finished(self) -> bool:
        """Whether the job reached a final status."""
        return self.status in ("completed", "failed", "cancelled")

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Job:
        """A job from its proto JSON."""
        return cls(
            id=_str(d, "id"), workload=_str(d, "workload"), status=_enum(d, "status", "JOB_STATUS_", _JOB_STATUSES),
            input_uri=_str(d, "input_uri"), input_sha256=_str(d, "input_sha256"), parameters=_obj(d, "parameters"),
            priority=_int(d, "priority"), idempotency_key=_str(d, "idempotency_key"),
            traceparent=_str(d, "traceparent"), cancel_reason=_str(d, "cancel_reason"),
            created_at=_time(d, "created_at"), updated_at=_time(d, "updated_at"),
            completed_at=_time(d, "completed_at"),
        )


@dataclass(frozen=True)
class TaskRecord:
    """A task as the coordinator stores it (what CreateJob and the lease calls return)."""

    id: str
    job_id: str
    chunk_index: int
    workload: str
    status: str
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

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TaskRecord:
        """A task from its proto JSON."""
        return cls(
            id=_str(d, "id"), job_id=_str(d, "job_id"), chunk_index=_int(d, "chunk_index"),
            workload=_str(d, "workload"), status=_enum(d, "status", "TASK_STATUS_", _TASK_STATUSES),
            attempt=_int(d, "attempt"), max_attempts=_int(d, "max_attempts"), input_uri=_str(d, "input_uri"),
            input_sha256=_str(d, "input_sha256"), parameters=_obj(d, "parameters"), priority=_int(d, "priority"),
            lease_owner=_str(d, "lease_owner"), lease_expires_at=_time(d, "lease_expires_at"),
            result_uri=_str(d, "result_uri"), result_sha256=_str(d, "result_sha256"), metrics=_obj(d, "metrics"),
            error_code=_str(d, "error_code"), error_message=_str(d, "error_message"),
            traceparent=_str(d, "traceparent"), version=_int(d, "version"),
        )


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
class JobSnapshot:
    """A job with the status of its tasks, as GetJob (and the first WatchJob message) returns it."""

    job: Job
    task_counts: TaskCounts
    total_tasks: int
    progress: float

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> JobSnapshot:
        """A snapshot from its proto JSON."""
        return cls(job=Job.from_json(field_of(d, "job") or {}), task_counts=TaskCounts.from_json(field_of(d, "task_counts")),
                   total_tasks=_int(d, "total_tasks"), progress=_float(d, "progress"))


@dataclass(frozen=True)
class CreatedJob:
    """What :meth:`leasehold.Client.create_job` returns: the job (new, or the original for an idempotent replay) and its tasks."""

    job: Job
    tasks: list[TaskRecord]

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CreatedJob:
        """From CreateJobResponse JSON."""
        return cls(job=Job.from_json(field_of(d, "job") or {}),
                   tasks=[TaskRecord.from_json(t) for t in field_of(d, "tasks") or []])


@dataclass(frozen=True)
class RetriedJob:
    """What :meth:`leasehold.Client.retry` returns."""

    job: Job
    retried_tasks: int


@dataclass(frozen=True)
class ResultManifest:
    """The result manifest of one completed task."""

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
    """One committed change of a job or one of its tasks. ``kind`` is ``task_status``, ``task_progress`` or ``job_status``."""

    id: int
    job_id: str
    kind: str
    task_id: str = ""
    chunk_index: int = 0
    task_status: str = ""
    previous_task_status: str = ""
    job_status: str = ""
    previous_job_status: str = ""
    attempt: int = 0
    worker_id: str = ""
    progress: float = 0.0
    message: str = ""
    partial_result_uri: str = ""
    error_code: str = ""
    created_at: datetime | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> JobEvent:
        """From its proto JSON."""
        ts = ("TASK_STATUS_", _TASK_STATUSES)
        js = ("JOB_STATUS_", _JOB_STATUSES)
        return cls(
            id=_int(d, "id"), job_id=_str(d, "job_id"), kind=_enum(d, "kind", "JOB_EVENT_KIND_", _EVENT_KINDS),
            task_id=_str(d, "task_id"), chunk_index=_int(d, "chunk_index"),
            task_status=_enum(d, "task_status", *ts), previous_task_status=_enum(d, "previous_task_status", *ts),
            job_status=_enum(d, "job_status", *js), previous_job_status=_enum(d, "previous_job_status", *js),
            attempt=_int(d, "attempt"), worker_id=_str(d, "worker_id"), progress=_float(d, "progress"),
            message=_str(d, "message"), partial_result_uri=_str(d, "partial_result_uri"),
            error_code=_str(d, "error_code"), created_at=_time(d, "created_at"),
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
        return cls(event=JobEvent.from_json(field_of(d, "event") or {}))


@dataclass(frozen=True)
class Workload:
    """A registered workload and its defaults."""

    name: str
    max_attempts: int = 0
    lease_seconds: int = 0
    max_pending_seconds: int = 0
    parameters_schema: JsonObject | None = field(default=None)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Workload:
        """From its proto JSON."""
        return cls(name=_str(d, "name"), max_attempts=_int(d, "max_attempts"), lease_seconds=_int(d, "lease_seconds"),
                   max_pending_seconds=_int(d, "max_pending_seconds"),
                   parameters_schema=_obj(d, "parameters_schema"))
