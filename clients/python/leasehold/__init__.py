"""Leasehold client: workers that lease and run tasks, and submitters that create, watch and explain jobs.

Both speak to the coordinator over Connect JSON (``transport="json"``, the standard library only) or gRPC
(``transport="grpc"``, needs ``grpcio``, ``protobuf`` and ``googleapis-common-protos``), and read the same on
both: the same typed answers (:mod:`leasehold.models`), the same numbers in ``parameters`` and ``metrics``
(:func:`plain_json`), the same exceptions with the same ``code``, ``request_id`` and ``violations``
(:mod:`leasehold.errors`).
"""

from .client import Client
from .errors import (
    AbortedError,
    AlreadyExistsError,
    DeadlineExceededError,
    FailedPreconditionError,
    FieldViolation,
    InternalError,
    InvalidArgumentError,
    LeaseholdError,
    NotFoundError,
    PermissionDeniedError,
    UnauthenticatedError,
    UnavailableError,
    WorkerConfigError,
)
from .models import (
    AttemptOutcome,
    AttemptProgress,
    CreatedJob,
    EventKind,
    FailurePolicy,
    Job,
    JobEvent,
    JobFailure,
    JobSnapshot,
    JobStatus,
    KeyLimit,
    ResultManifest,
    RetriedJob,
    Schedule,
    TaskAttempt,
    TaskCounts,
    TaskDetail,
    TaskRecord,
    TaskSpec,
    TaskStatus,
    WaitingReason,
    WatchUpdate,
    Workload,
    plain_json,
)
from .worker import Result, RetryableError, Task, TaskCancelled, TaskError, Worker, error_code_of

__version__ = "0.1.0"

__all__ = [
    "AbortedError",
    "AlreadyExistsError",
    "AttemptOutcome",
    "AttemptProgress",
    "Client",
    "CreatedJob",
    "DeadlineExceededError",
    "EventKind",
    "FailedPreconditionError",
    "FailurePolicy",
    "FieldViolation",
    "InternalError",
    "InvalidArgumentError",
    "Job",
    "JobEvent",
    "JobFailure",
    "JobSnapshot",
    "JobStatus",
    "KeyLimit",
    "LeaseholdError",
    "NotFoundError",
    "PermissionDeniedError",
    "Result",
    "ResultManifest",
    "RetriedJob",
    "Schedule",
    "RetryableError",
    "Task",
    "TaskAttempt",
    "TaskCancelled",
    "TaskCounts",
    "TaskDetail",
    "TaskError",
    "TaskRecord",
    "TaskSpec",
    "TaskStatus",
    "UnauthenticatedError",
    "UnavailableError",
    "WaitingReason",
    "WatchUpdate",
    "Worker",
    "WorkerConfigError",
    "Workload",
    "error_code_of",
    "plain_json",
]
