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

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, cast

from ._read import (
    _bool,
    _enum,
    _float,
    _int,
    _labels,
    _list,
    _msg,
    _obj,
    _str,
    _time,
)
from ._read import field_of as field_of
from ._read import parse_time as parse_time
from ._read import plain_json as plain_json
from .accounts import Billing, Settlement, Usage, usage_of
from .workloads import FailurePolicy as FailurePolicy
from .workloads import KeyLimit as KeyLimit
from .workloads import Workload as Workload
from .workloads import WorkloadKey as WorkloadKey
from .workloads import WorkloadKeys as WorkloadKeys
from .workloads import policy_of

__all__ = [
    "AttemptOutcome",
    "AttemptProgress",
    "CreatedJob",
    "Dependency",
    "DependencyPolicy",
    "EventKind",
    "FailurePolicy",
    "Job",
    "JobEvent",
    "JobFailure",
    "JobParent",
    "JobSnapshot",
    "JobStatus",
    "JobView",
    "KeyLimit",
    "ResultManifest",
    "RetriedJob",
    "Schedule",
    "TaskAttempt",
    "TaskCounts",
    "TaskDetail",
    "TaskRecord",
    "TaskSpec",
    "TaskStatus",
    "WaitingReason",
    "WatchUpdate",
    "Workload",
    "WorkloadKey",
    "WorkloadKeys",
    "plain_json",
]

JsonObject = dict[str, Any]

#: What :meth:`leasehold.Client.create_job` returns: ``"full"`` the job with its tasks, ``"basic"`` the job alone.
JobView = Literal["basic", "full"]
#: A job's status; ``""`` only for a field the coordinator left unset. ``scheduled``: pending with its ``run_at``
#: ahead; ``waiting``: its parents (``after``) are not final yet, so none of its tasks is claimable.
JobStatus = Literal["", "pending", "running", "completed", "failed", "cancelled", "scheduled", "waiting"]
#: A task's status; ``""`` only for a field the coordinator left unset. ``waiting``: its job waits for its parents.
TaskStatus = Literal["", "pending", "leased", "completed", "failed", "cancelled", "waiting"]
#: When a job with parents may run: ``all_completed`` (the default: every parent final, and every parent not marked
#: optional completed; a required parent that fails or is cancelled cancels the job) or ``all_final`` (every parent
#: final, whatever its end). ``""`` for a job without parents.
DependencyPolicy = Literal["", "all_completed", "all_final"]
#: What a :class:`JobEvent` records.
EventKind = Literal["", "task_status", "task_progress", "job_status", "settled"]
#: How an attempt of a task ended (``running``: it holds its lease now).
AttemptOutcome = Literal["", "running", "completed", "failed", "lease_expired", "cancelled"]
#: Why a pending task is not running (the proto's ``WAITING_REASON_*`` in lower case; ``""`` when the task is
#: not pending): ``queued`` (claimable, behind the tasks before it), ``retry_backoff``, ``workload_paused``,
#: ``workload_cap``, ``key_cap``, ``rate_limited``, ``labels_unmatched`` (no worker claimed the workload with
#: the labels it needs in the last minute), ``no_workers`` (nobody claimed the workload in the last minute) or
#: ``parents`` (a waiting task: its job's parents are not final yet).
WaitingReason = Literal["", "queued", "retry_backoff", "workload_paused", "workload_cap", "key_cap", "rate_limited",
                        "labels_unmatched", "no_workers", "parents"]

_TASK_STATUSES = ("", "pending", "leased", "completed", "failed", "cancelled", "waiting")
_JOB_STATUSES = ("", "pending", "running", "completed", "failed", "cancelled", "scheduled", "waiting")
_DEPENDENCY_POLICIES = ("", "all_completed", "all_final")
_EVENT_KINDS = ("", "task_status", "task_progress", "job_status", "settled")
_OUTCOMES = ("", "running", "completed", "failed", "lease_expired", "cancelled")
_WAITING_REASONS = ("", "queued", "retry_backoff", "workload_paused", "workload_cap", "key_cap", "rate_limited",
                    "labels_unmatched", "no_workers", "parents")


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


def dependency_policy_of(d: Mapping[str, Any], name: str = "dependency_policy") -> DependencyPolicy:
    """A ``dependency_policy`` field as its short name (``"all_final"``); ``""`` when unset."""
    return cast(DependencyPolicy, _enum(d, name, "DEPENDENCY_POLICY_", _DEPENDENCY_POLICIES))


@dataclass(frozen=True)
class Dependency:
    """A parent of a job, as :meth:`leasehold.Client.create_job` takes it in ``after``: a job that must end first.

    ``optional``: under ``all_completed`` the job runs whatever this parent's end (it still waits for it).

    Example::

        client.create_job("report", input_uri=uri, input_sha256=sha,
                          after=[stitch.job.id, Dependency(lint.job.id, optional=True)])
    """

    job_id: str
    optional: bool = False

    def to_json(self) -> JsonObject:
        """The proto JSON of the dependency."""
        return {"job_id": self.job_id, "optional": True} if self.optional else {"job_id": self.job_id}


@dataclass(frozen=True)
class JobParent:
    """A job's parent with its status: on :attr:`Job.parents`, and on a leased task (``task.parents``).

    A stage after others reads its inputs from here: ``result`` is the parent's one result manifest when the
    parent had exactly one task and it completed (``None`` otherwise: read them with
    :meth:`leasehold.Client.results` of ``job_id``). ``node`` is the parent's node name when both jobs are nodes
    of one workflow. On a task the statuses are as they were when the task's job was made pending.

    Example::

        @worker.handler("stitch")
        def stitch(task: Task) -> Result:
            inputs = [p.result.result_uri for p in task.parents if p.result is not None]
    """

    job_id: str
    status: JobStatus = ""
    optional: bool = False
    node: str = ""
    total_tasks: int = 0
    completed_tasks: int = 0
    result: ResultManifest | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> JobParent:
        """From its proto JSON."""
        result = field_of(d, "result")
        return cls(job_id=_str(d, "job_id"), status=_job_status(d, "status"), optional=_bool(d, "optional"),
                   node=_str(d, "node"), total_tasks=_int(d, "total_tasks"), completed_tasks=_int(d, "completed_tasks"),
                   result=ResultManifest.from_json(result) if isinstance(result, Mapping) and result else None)


def parents_of(d: Mapping[str, Any]) -> list[JobParent]:
    """The ``parents`` of a job or task."""
    return [JobParent.from_json(p) for p in _list(d, "parents") if isinstance(p, Mapping)]


@dataclass(frozen=True)
class TaskSpec:
    """One chunk of a job as submitted to :meth:`leasehold.Client.create_job`.

    ``required_labels`` are labels a worker must claim with to lease this chunk, on top of the job's (this
    chunk's value wins for a name both give).

    Example::

        TaskSpec(0, "s3://in/0.mp4", sha256_hex, parameters={"frames": 240}, required_labels={"gpu": "a100"})

    ``run_at`` (a datetime, naive read as UTC, or an RFC 3339 string) delays this task; unset, the job's.
    """

    chunk_index: int
    input_uri: str
    input_sha256: str
    parameters: JsonObject | None = None
    workload: str | None = None
    required_labels: Mapping[str, str] | None = None
    run_at: datetime | str | None = None

    def to_json(self) -> JsonObject:
        """The proto JSON of the spec, without unset fields."""
        out: JsonObject = {"chunk_index": self.chunk_index, "input_uri": self.input_uri,
                           "input_sha256": self.input_sha256}
        if self.parameters is not None:
            out["parameters"] = self.parameters
        if self.workload:
            out["workload"] = self.workload
        if self.required_labels:
            out["required_labels"] = dict(self.required_labels)
        if self.run_at is not None:
            out["run_at"] = rfc3339(self.run_at)
        return out


@dataclass(frozen=True)
class Job:
    """A job as the coordinator stores it.

    ``status`` is ``pending``, ``running``, ``completed``, ``failed`` or ``cancelled``; ``parameters`` as
    :func:`plain_json` reads them. ``failure_policy`` (``fail_fast`` or ``continue``) and ``max_failed_tasks``
    say what the job does when its tasks fail for good (see :data:`FailurePolicy`); a completed job may hold
    up to ``max_failed_tasks`` failed tasks. ``concurrency_key`` (``""`` when none) and ``required_labels``
    (empty when none) are the flow-control settings it was created with.
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
    concurrency_key: str = ""
    required_labels: dict[str, str] = field(default_factory=dict)
    schedule_name: str = ""
    schedule_fire_time: datetime | None = None
    #: When its tasks fall due, while that lies ahead (the job is ``scheduled`` until then).
    run_at: datetime | None = None
    #: The job enqueued when this one ended (its finalizer); ``""`` until then or when none ran.
    finalizer_job_id: str = ""
    #: On a finalizer job: the job whose end enqueued it.
    parent_job_id: str = ""
    #: The account the job belongs to; ``""`` for none.
    account: str = ""
    #: The caller's billing context as given to ``create_job``; ``None`` when it gave none.
    billing: Billing | None = None
    #: Usage counters summed over every accepted report of every attempt of its tasks.
    usage: Usage = field(default_factory=dict)
    #: The settlement, once :meth:`leasehold.Client.settle_job` recorded it.
    settlement: Settlement | None = None
    #: When it may run, given its parents; ``""`` for a job without parents.
    dependency_policy: DependencyPolicy = ""
    #: Its parents with their statuses now (``get_job``, ``create_job``; empty in ``list_jobs``).
    parents: list[JobParent] = field(default_factory=list)
    #: Parents not final yet: the job is ``waiting`` while this is above 0.
    waiting_parents: int = 0
    #: The workflow it is a node of, and the node's name; ``""`` otherwise.
    workflow_id: str = ""
    workflow_node: str = ""

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
            completed_at=_time(d, "completed_at"), failure_policy=policy_of(d),
            max_failed_tasks=_int(d, "max_failed_tasks"), concurrency_key=_str(d, "concurrency_key"),
            required_labels=_labels(d, "required_labels"),
            schedule_name=_str(d, "schedule_name"), schedule_fire_time=_time(d, "schedule_fire_time"),
            run_at=_time(d, "run_at"),
            finalizer_job_id=_str(d, "finalizer_job_id"), parent_job_id=_str(d, "parent_job_id"),
            account=_str(d, "account"), billing=Billing.from_json(field_of(d, "billing")), usage=usage_of(d),
            settlement=Settlement.from_json(field_of(d, "settlement")),
            dependency_policy=dependency_policy_of(d), parents=parents_of(d),
            waiting_parents=_int(d, "waiting_parents"), workflow_id=_str(d, "workflow_id"),
            workflow_node=_str(d, "workflow_node"),
        )


@dataclass(frozen=True)
class TaskRecord:
    """A task as the coordinator stores it (what CreateJob, GetTask, ListTasks and the lease calls return).

    ``error_code`` and ``error_message`` are those of the task's last failure (kept when a later attempt
    runs); ``parameters`` (the job's merged with the chunk's) and ``metrics`` as :func:`plain_json` reads them.
    ``concurrency_key`` is the job's (``""`` when none); ``required_labels`` the labels a worker must claim
    with to lease it (the job's merged with the chunk's own; empty when none).
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
    concurrency_key: str = ""
    required_labels: dict[str, str] = field(default_factory=dict)
    #: Usage counters summed over the task's attempts.
    usage: Usage = field(default_factory=dict)
    #: Its job's parents as they were when the job was made pending, each with its status and (for a parent of one
    #: completed task) its result; empty for a job without parents.
    parents: list[JobParent] = field(default_factory=list)

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
            concurrency_key=_str(d, "concurrency_key"), required_labels=_labels(d, "required_labels"),
            usage=usage_of(d), parents=parents_of(d),
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
    #: What this attempt reported it used, with its result or its failure.
    usage: Usage = field(default_factory=dict)

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
            usage=usage_of(d),
        )


@dataclass(frozen=True)
class TaskDetail:
    """A task with the history of its attempts, oldest first (:meth:`leasehold.Client.get_task`, ``list_tasks``).

    ``waiting_reason`` and ``waiting_detail`` say why a pending task is not running (a :data:`WaitingReason`
    and a sentence with its numbers, such as ``workload cap reached: 8 of 8 leased``),
    computed when :meth:`~leasehold.Client.get_task` asks; ``""`` for a task that is not pending, and in
    ``list_tasks``, which does not compute them.

    Example::

        detail = client.get_task(task_id)
        for a in detail.attempts:
            print(a.attempt, a.worker_id, a.outcome, a.error_code, a.error_message)
        if detail.waiting_reason:
            print(detail.waiting_reason, detail.waiting_detail)   # labels_unmatched needs labels gpu=a100: ...
    """

    task: TaskRecord
    attempts: list[TaskAttempt] = field(default_factory=list)
    waiting_reason: WaitingReason = ""
    waiting_detail: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TaskDetail:
        """From GetTaskResponse or TaskDetail JSON."""
        return cls(task=TaskRecord.from_json(_msg(d, "task")),
                   attempts=[TaskAttempt.from_json(a) for a in _list(d, "attempts")],
                   waiting_reason=cast(WaitingReason, _enum(d, "waiting_reason", "WAITING_REASON_", _WAITING_REASONS)),
                   waiting_detail=_str(d, "waiting_detail"))


@dataclass(frozen=True)
class TaskCounts:
    """Number of a job's tasks in each status."""

    pending: int = 0
    leased: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    #: Tasks waiting for their job's parents.
    waiting: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> TaskCounts:
        """Counts from their proto JSON (missing counts are 0)."""
        d = d or {}
        return cls(*(_int(d, n) for n in ("pending", "leased", "completed", "failed", "cancelled", "waiting")))


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
    """What :meth:`leasehold.Client.create_job` returns: the job (new, or the original for an idempotent replay) and its tasks.

    ``tasks`` is empty when the job was created with ``view="basic"``.
    """

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

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RetriedJob:
        """From RetryJobResponse JSON."""
        return cls(job=Job.from_json(_msg(d, "job")), retried_tasks=_int(d, "retried_tasks"))


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
    ``partial_result_uri``), ``job_status`` (``job_status``) or ``settled`` (``settlement_key``,
    ``settled_units``).
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
    #: ``settled``: the settlement recorded.
    settlement_key: str = ""
    settled_units: int = 0

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
            settlement_key=_str(d, "settlement_key"), settled_units=_int(d, "settled_units"),
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
class Schedule:
    """A periodic schedule: a job made from ``job`` (a CreateJob request as proto JSON) on every tick of ``cron``.

    ``overlap`` is ``allow`` or ``skip`` (no job while the previous tick's is not final); ``catch_up`` is
    ``skip``, ``one`` or ``all`` (at most ``max_catch_up``) for the ticks missed while no coordinator ran.
    ``next_fire_times`` are the next ticks, earliest first (empty while paused). A schedule of workflows has
    ``workflow`` (a CreateWorkflow request as proto JSON) in place of ``job`` (then ``{}``), and its last tick's
    workflow in ``last_workflow_id``.
    """

    name: str
    cron: str
    timezone: str
    job: JsonObject
    overlap: str = ""
    catch_up: str = ""
    max_catch_up: int = 0
    paused: bool = False
    next_fire_times: list[datetime] = field(default_factory=list)
    last_fire_time: datetime | None = None
    last_job_id: str = ""
    created_at: datetime | None = None
    updated_at: datetime | None = None
    workflow: JsonObject | None = None
    last_workflow_id: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Schedule:
        """From its proto JSON."""
        return cls(
            name=_str(d, "name"), cron=_str(d, "cron"), timezone=_str(d, "timezone"), job=dict(_msg(d, "job")),
            overlap=_enum(d, "overlap", "OVERLAP_POLICY_", ("", "allow", "skip")),
            catch_up=_enum(d, "catch_up", "CATCH_UP_POLICY_", ("", "skip", "one", "all")),
            max_catch_up=_int(d, "max_catch_up"), paused=_bool(d, "paused"),
            next_fire_times=[t for t in (parse_time(v) for v in _list(d, "next_fire_times")) if t is not None],
            last_fire_time=_time(d, "last_fire_time"), last_job_id=_str(d, "last_job_id"),
            created_at=_time(d, "created_at"), updated_at=_time(d, "updated_at"),
            workflow=dict(_msg(d, "workflow")) or None, last_workflow_id=_str(d, "last_workflow_id"),
        )
