"""Leasehold client: workers that lease and run tasks, and submitters that create and watch jobs.

Both speak to the coordinator over Connect JSON (``transport="json"``, the standard library only) or gRPC
(``transport="grpc"``, needs ``grpcio`` and ``protobuf``).
"""

from .client import Client
from .errors import (
    AbortedError,
    AlreadyExistsError,
    DeadlineExceededError,
    FailedPreconditionError,
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
    CreatedJob,
    Job,
    JobEvent,
    JobSnapshot,
    ResultManifest,
    RetriedJob,
    TaskCounts,
    TaskRecord,
    TaskSpec,
    WatchUpdate,
    Workload,
)
from .worker import Result, RetryableError, Task, TaskCancelled, TaskError, Worker, error_code_of

__version__ = "0.1.0"

__all__ = [
    "AbortedError",
    "AlreadyExistsError",
    "Client",
    "CreatedJob",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "InternalError",
    "InvalidArgumentError",
    "Job",
    "JobEvent",
    "JobSnapshot",
    "LeaseholdError",
    "NotFoundError",
    "PermissionDeniedError",
    "Result",
    "ResultManifest",
    "RetriedJob",
    "RetryableError",
    "Task",
    "TaskCancelled",
    "TaskCounts",
    "TaskError",
    "TaskRecord",
    "TaskSpec",
    "UnauthenticatedError",
    "UnavailableError",
    "WatchUpdate",
    "Worker",
    "WorkerConfigError",
    "Workload",
    "error_code_of",
]
