import datetime

from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATUS_UNSPECIFIED: _ClassVar[TaskStatus]
    TASK_STATUS_PENDING: _ClassVar[TaskStatus]
    TASK_STATUS_LEASED: _ClassVar[TaskStatus]
    TASK_STATUS_COMPLETED: _ClassVar[TaskStatus]
    TASK_STATUS_FAILED: _ClassVar[TaskStatus]
    TASK_STATUS_CANCELLED: _ClassVar[TaskStatus]
    TASK_STATUS_WAITING: _ClassVar[TaskStatus]

class JobStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATUS_UNSPECIFIED: _ClassVar[JobStatus]
    JOB_STATUS_PENDING: _ClassVar[JobStatus]
    JOB_STATUS_RUNNING: _ClassVar[JobStatus]
    JOB_STATUS_COMPLETED: _ClassVar[JobStatus]
    JOB_STATUS_FAILED: _ClassVar[JobStatus]
    JOB_STATUS_CANCELLED: _ClassVar[JobStatus]
    JOB_STATUS_SCHEDULED: _ClassVar[JobStatus]
    JOB_STATUS_WAITING: _ClassVar[JobStatus]

class DependencyPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEPENDENCY_POLICY_UNSPECIFIED: _ClassVar[DependencyPolicy]
    DEPENDENCY_POLICY_ALL_COMPLETED: _ClassVar[DependencyPolicy]
    DEPENDENCY_POLICY_ALL_FINAL: _ClassVar[DependencyPolicy]

class FailurePolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_POLICY_UNSPECIFIED: _ClassVar[FailurePolicy]
    FAILURE_POLICY_FAIL_FAST: _ClassVar[FailurePolicy]
    FAILURE_POLICY_CONTINUE: _ClassVar[FailurePolicy]

class JobView(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_VIEW_UNSPECIFIED: _ClassVar[JobView]
    JOB_VIEW_BASIC: _ClassVar[JobView]
    JOB_VIEW_FULL: _ClassVar[JobView]

class JobEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_EVENT_KIND_UNSPECIFIED: _ClassVar[JobEventKind]
    JOB_EVENT_KIND_TASK_STATUS: _ClassVar[JobEventKind]
    JOB_EVENT_KIND_TASK_PROGRESS: _ClassVar[JobEventKind]
    JOB_EVENT_KIND_JOB_STATUS: _ClassVar[JobEventKind]
    JOB_EVENT_KIND_SETTLED: _ClassVar[JobEventKind]

class WaitingReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WAITING_REASON_UNSPECIFIED: _ClassVar[WaitingReason]
    WAITING_REASON_QUEUED: _ClassVar[WaitingReason]
    WAITING_REASON_RETRY_BACKOFF: _ClassVar[WaitingReason]
    WAITING_REASON_WORKLOAD_PAUSED: _ClassVar[WaitingReason]
    WAITING_REASON_WORKLOAD_CAP: _ClassVar[WaitingReason]
    WAITING_REASON_KEY_CAP: _ClassVar[WaitingReason]
    WAITING_REASON_RATE_LIMITED: _ClassVar[WaitingReason]
    WAITING_REASON_LABELS_UNMATCHED: _ClassVar[WaitingReason]
    WAITING_REASON_NO_WORKERS: _ClassVar[WaitingReason]
    WAITING_REASON_PARENTS: _ClassVar[WaitingReason]

class AttemptOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTEMPT_OUTCOME_UNSPECIFIED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_RUNNING: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_COMPLETED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_FAILED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_LEASE_EXPIRED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_CANCELLED: _ClassVar[AttemptOutcome]

class OverlapPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OVERLAP_POLICY_UNSPECIFIED: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_ALLOW: _ClassVar[OverlapPolicy]
    OVERLAP_POLICY_SKIP: _ClassVar[OverlapPolicy]

class CatchUpPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CATCH_UP_POLICY_UNSPECIFIED: _ClassVar[CatchUpPolicy]
    CATCH_UP_POLICY_SKIP: _ClassVar[CatchUpPolicy]
    CATCH_UP_POLICY_ONE: _ClassVar[CatchUpPolicy]
    CATCH_UP_POLICY_ALL: _ClassVar[CatchUpPolicy]
TASK_STATUS_UNSPECIFIED: TaskStatus
TASK_STATUS_PENDING: TaskStatus
TASK_STATUS_LEASED: TaskStatus
TASK_STATUS_COMPLETED: TaskStatus
TASK_STATUS_FAILED: TaskStatus
TASK_STATUS_CANCELLED: TaskStatus
TASK_STATUS_WAITING: TaskStatus
JOB_STATUS_UNSPECIFIED: JobStatus
JOB_STATUS_PENDING: JobStatus
JOB_STATUS_RUNNING: JobStatus
JOB_STATUS_COMPLETED: JobStatus
JOB_STATUS_FAILED: JobStatus
JOB_STATUS_CANCELLED: JobStatus
JOB_STATUS_SCHEDULED: JobStatus
JOB_STATUS_WAITING: JobStatus
DEPENDENCY_POLICY_UNSPECIFIED: DependencyPolicy
DEPENDENCY_POLICY_ALL_COMPLETED: DependencyPolicy
DEPENDENCY_POLICY_ALL_FINAL: DependencyPolicy
FAILURE_POLICY_UNSPECIFIED: FailurePolicy
FAILURE_POLICY_FAIL_FAST: FailurePolicy
FAILURE_POLICY_CONTINUE: FailurePolicy
JOB_VIEW_UNSPECIFIED: JobView
JOB_VIEW_BASIC: JobView
JOB_VIEW_FULL: JobView
JOB_EVENT_KIND_UNSPECIFIED: JobEventKind
JOB_EVENT_KIND_TASK_STATUS: JobEventKind
JOB_EVENT_KIND_TASK_PROGRESS: JobEventKind
JOB_EVENT_KIND_JOB_STATUS: JobEventKind
JOB_EVENT_KIND_SETTLED: JobEventKind
WAITING_REASON_UNSPECIFIED: WaitingReason
WAITING_REASON_QUEUED: WaitingReason
WAITING_REASON_RETRY_BACKOFF: WaitingReason
WAITING_REASON_WORKLOAD_PAUSED: WaitingReason
WAITING_REASON_WORKLOAD_CAP: WaitingReason
WAITING_REASON_KEY_CAP: WaitingReason
WAITING_REASON_RATE_LIMITED: WaitingReason
WAITING_REASON_LABELS_UNMATCHED: WaitingReason
WAITING_REASON_NO_WORKERS: WaitingReason
WAITING_REASON_PARENTS: WaitingReason
ATTEMPT_OUTCOME_UNSPECIFIED: AttemptOutcome
ATTEMPT_OUTCOME_RUNNING: AttemptOutcome
ATTEMPT_OUTCOME_COMPLETED: AttemptOutcome
ATTEMPT_OUTCOME_FAILED: AttemptOutcome
ATTEMPT_OUTCOME_LEASE_EXPIRED: AttemptOutcome
ATTEMPT_OUTCOME_CANCELLED: AttemptOutcome
OVERLAP_POLICY_UNSPECIFIED: OverlapPolicy
OVERLAP_POLICY_ALLOW: OverlapPolicy
OVERLAP_POLICY_SKIP: OverlapPolicy
CATCH_UP_POLICY_UNSPECIFIED: CatchUpPolicy
CATCH_UP_POLICY_SKIP: CatchUpPolicy
CATCH_UP_POLICY_ONE: CatchUpPolicy
CATCH_UP_POLICY_ALL: CatchUpPolicy

class Dependency(_message.Message):
    __slots__ = ("job_id", "optional")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    optional: bool
    def __init__(self, job_id: _Optional[str] = ..., optional: _Optional[bool] = ...) -> None: ...

class JobParent(_message.Message):
    __slots__ = ("job_id", "status", "optional", "node", "total_tasks", "completed_tasks", "result")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TASKS_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_TASKS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    status: JobStatus
    optional: bool
    node: str
    total_tasks: int
    completed_tasks: int
    result: ResultManifest
    def __init__(self, job_id: _Optional[str] = ..., status: _Optional[_Union[JobStatus, str]] = ..., optional: _Optional[bool] = ..., node: _Optional[str] = ..., total_tasks: _Optional[int] = ..., completed_tasks: _Optional[int] = ..., result: _Optional[_Union[ResultManifest, _Mapping]] = ...) -> None: ...

class TaskSpec(_message.Message):
    __slots__ = ("chunk_index", "input_uri", "input_sha256", "parameters", "workload", "required_labels", "run_at")
    class RequiredLabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    INPUT_URI_FIELD_NUMBER: _ClassVar[int]
    INPUT_SHA256_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_LABELS_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    chunk_index: int
    input_uri: str
    input_sha256: str
    parameters: _struct_pb2.Struct
    workload: str
    required_labels: _containers.ScalarMap[str, str]
    run_at: _timestamp_pb2.Timestamp
    def __init__(self, chunk_index: _Optional[int] = ..., input_uri: _Optional[str] = ..., input_sha256: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., workload: _Optional[str] = ..., required_labels: _Optional[_Mapping[str, str]] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Finalizer(_message.Message):
    __slots__ = ("workload", "parameters", "run_on_failure")
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    RUN_ON_FAILURE_FIELD_NUMBER: _ClassVar[int]
    workload: str
    parameters: _struct_pb2.Struct
    run_on_failure: bool
    def __init__(self, workload: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., run_on_failure: _Optional[bool] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "workload", "input_uri", "input_sha256", "parameters", "status", "priority", "idempotency_key", "traceparent", "cancel_reason", "created_at", "updated_at", "completed_at", "failure_policy", "max_failed_tasks", "concurrency_key", "required_labels", "schedule_name", "schedule_fire_time", "run_at", "finalizer", "finalizer_job_id", "parent_job_id", "account", "billing", "usage", "settlement", "dependency_policy", "parents", "waiting_parents", "workflow_id", "workflow_node")
    class RequiredLabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class UsageEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    INPUT_URI_FIELD_NUMBER: _ClassVar[int]
    INPUT_SHA256_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REASON_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_AT_FIELD_NUMBER: _ClassVar[int]
    FAILURE_POLICY_FIELD_NUMBER: _ClassVar[int]
    MAX_FAILED_TASKS_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_LABELS_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_NAME_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    FINALIZER_FIELD_NUMBER: _ClassVar[int]
    FINALIZER_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    BILLING_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    SETTLEMENT_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_POLICY_FIELD_NUMBER: _ClassVar[int]
    PARENTS_FIELD_NUMBER: _ClassVar[int]
    WAITING_PARENTS_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_NODE_FIELD_NUMBER: _ClassVar[int]
    id: str
    workload: str
    input_uri: str
    input_sha256: str
    parameters: _struct_pb2.Struct
    status: JobStatus
    priority: int
    idempotency_key: str
    traceparent: str
    cancel_reason: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    completed_at: _timestamp_pb2.Timestamp
    failure_policy: FailurePolicy
    max_failed_tasks: int
    concurrency_key: str
    required_labels: _containers.ScalarMap[str, str]
    schedule_name: str
    schedule_fire_time: _timestamp_pb2.Timestamp
    run_at: _timestamp_pb2.Timestamp
    finalizer: Finalizer
    finalizer_job_id: str
    parent_job_id: str
    account: str
    billing: Billing
    usage: _containers.ScalarMap[str, int]
    settlement: Settlement
    dependency_policy: DependencyPolicy
    parents: _containers.RepeatedCompositeFieldContainer[JobParent]
    waiting_parents: int
    workflow_id: str
    workflow_node: str
    def __init__(self, id: _Optional[str] = ..., workload: _Optional[str] = ..., input_uri: _Optional[str] = ..., input_sha256: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., status: _Optional[_Union[JobStatus, str]] = ..., priority: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., traceparent: _Optional[str] = ..., cancel_reason: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., completed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., failure_policy: _Optional[_Union[FailurePolicy, str]] = ..., max_failed_tasks: _Optional[int] = ..., concurrency_key: _Optional[str] = ..., required_labels: _Optional[_Mapping[str, str]] = ..., schedule_name: _Optional[str] = ..., schedule_fire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finalizer: _Optional[_Union[Finalizer, _Mapping]] = ..., finalizer_job_id: _Optional[str] = ..., parent_job_id: _Optional[str] = ..., account: _Optional[str] = ..., billing: _Optional[_Union[Billing, _Mapping]] = ..., usage: _Optional[_Mapping[str, int]] = ..., settlement: _Optional[_Union[Settlement, _Mapping]] = ..., dependency_policy: _Optional[_Union[DependencyPolicy, str]] = ..., parents: _Optional[_Iterable[_Union[JobParent, _Mapping]]] = ..., waiting_parents: _Optional[int] = ..., workflow_id: _Optional[str] = ..., workflow_node: _Optional[str] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("id", "job_id", "chunk_index", "workload", "input_uri", "input_sha256", "parameters", "status", "attempt", "max_attempts", "priority", "lease_owner", "lease_expires_at", "result_uri", "result_sha256", "metrics", "error_code", "error_message", "created_at", "started_at", "completed_at", "version", "traceparent", "concurrency_key", "required_labels", "usage", "parents")
    class RequiredLabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class UsageEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    INPUT_URI_FIELD_NUMBER: _ClassVar[int]
    INPUT_SHA256_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    LEASE_OWNER_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    RESULT_URI_FIELD_NUMBER: _ClassVar[int]
    RESULT_SHA256_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_AT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_LABELS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    PARENTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    job_id: str
    chunk_index: int
    workload: str
    input_uri: str
    input_sha256: str
    parameters: _struct_pb2.Struct
    status: TaskStatus
    attempt: int
    max_attempts: int
    priority: int
    lease_owner: str
    lease_expires_at: _timestamp_pb2.Timestamp
    result_uri: str
    result_sha256: str
    metrics: _struct_pb2.Struct
    error_code: str
    error_message: str
    created_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    completed_at: _timestamp_pb2.Timestamp
    version: int
    traceparent: str
    concurrency_key: str
    required_labels: _containers.ScalarMap[str, str]
    usage: _containers.ScalarMap[str, int]
    parents: _containers.RepeatedCompositeFieldContainer[JobParent]
    def __init__(self, id: _Optional[str] = ..., job_id: _Optional[str] = ..., chunk_index: _Optional[int] = ..., workload: _Optional[str] = ..., input_uri: _Optional[str] = ..., input_sha256: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., status: _Optional[_Union[TaskStatus, str]] = ..., attempt: _Optional[int] = ..., max_attempts: _Optional[int] = ..., priority: _Optional[int] = ..., lease_owner: _Optional[str] = ..., lease_expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., result_uri: _Optional[str] = ..., result_sha256: _Optional[str] = ..., metrics: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., completed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., version: _Optional[int] = ..., traceparent: _Optional[str] = ..., concurrency_key: _Optional[str] = ..., required_labels: _Optional[_Mapping[str, str]] = ..., usage: _Optional[_Mapping[str, int]] = ..., parents: _Optional[_Iterable[_Union[JobParent, _Mapping]]] = ...) -> None: ...

class TaskCounts(_message.Message):
    __slots__ = ("pending", "leased", "completed", "failed", "cancelled", "waiting")
    PENDING_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    pending: int
    leased: int
    completed: int
    failed: int
    cancelled: int
    waiting: int
    def __init__(self, pending: _Optional[int] = ..., leased: _Optional[int] = ..., completed: _Optional[int] = ..., failed: _Optional[int] = ..., cancelled: _Optional[int] = ..., waiting: _Optional[int] = ...) -> None: ...

class ResultManifest(_message.Message):
    __slots__ = ("chunk_index", "task_id", "result_uri", "result_sha256", "metrics", "completed_at")
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_URI_FIELD_NUMBER: _ClassVar[int]
    RESULT_SHA256_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_AT_FIELD_NUMBER: _ClassVar[int]
    chunk_index: int
    task_id: str
    result_uri: str
    result_sha256: str
    metrics: _struct_pb2.Struct
    completed_at: _timestamp_pb2.Timestamp
    def __init__(self, chunk_index: _Optional[int] = ..., task_id: _Optional[str] = ..., result_uri: _Optional[str] = ..., result_sha256: _Optional[str] = ..., metrics: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., completed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Workload(_message.Message):
    __slots__ = ("name", "max_attempts", "lease_seconds", "parameters_schema", "created_at", "updated_at", "max_pending_seconds", "failure_policy", "max_failed_tasks", "max_leased", "max_leased_per_key", "max_leases_per_second", "leases_burst", "paused")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    MAX_PENDING_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_POLICY_FIELD_NUMBER: _ClassVar[int]
    MAX_FAILED_TASKS_FIELD_NUMBER: _ClassVar[int]
    MAX_LEASED_FIELD_NUMBER: _ClassVar[int]
    MAX_LEASED_PER_KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_LEASES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    LEASES_BURST_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_attempts: int
    lease_seconds: int
    parameters_schema: _struct_pb2.Struct
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    max_pending_seconds: int
    failure_policy: FailurePolicy
    max_failed_tasks: int
    max_leased: int
    max_leased_per_key: int
    max_leases_per_second: float
    leases_burst: int
    paused: bool
    def __init__(self, name: _Optional[str] = ..., max_attempts: _Optional[int] = ..., lease_seconds: _Optional[int] = ..., parameters_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_pending_seconds: _Optional[int] = ..., failure_policy: _Optional[_Union[FailurePolicy, str]] = ..., max_failed_tasks: _Optional[int] = ..., max_leased: _Optional[int] = ..., max_leased_per_key: _Optional[int] = ..., max_leases_per_second: _Optional[float] = ..., leases_burst: _Optional[int] = ..., paused: _Optional[bool] = ...) -> None: ...

class CreateJobRequest(_message.Message):
    __slots__ = ("workload", "input_uri", "input_sha256", "parameters", "priority", "max_attempts", "idempotency_key", "traceparent", "tasks", "failure_policy", "max_failed_tasks", "concurrency_key", "required_labels", "run_at", "finalizer", "account", "billing", "view", "after", "dependency_policy")
    class RequiredLabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    INPUT_URI_FIELD_NUMBER: _ClassVar[int]
    INPUT_SHA256_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_POLICY_FIELD_NUMBER: _ClassVar[int]
    MAX_FAILED_TASKS_FIELD_NUMBER: _ClassVar[int]
    CONCURRENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_LABELS_FIELD_NUMBER: _ClassVar[int]
    RUN_AT_FIELD_NUMBER: _ClassVar[int]
    FINALIZER_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    BILLING_FIELD_NUMBER: _ClassVar[int]
    VIEW_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_POLICY_FIELD_NUMBER: _ClassVar[int]
    workload: str
    input_uri: str
    input_sha256: str
    parameters: _struct_pb2.Struct
    priority: int
    max_attempts: int
    idempotency_key: str
    traceparent: str
    tasks: _containers.RepeatedCompositeFieldContainer[TaskSpec]
    failure_policy: FailurePolicy
    max_failed_tasks: int
    concurrency_key: str
    required_labels: _containers.ScalarMap[str, str]
    run_at: _timestamp_pb2.Timestamp
    finalizer: Finalizer
    account: str
    billing: Billing
    view: JobView
    after: _containers.RepeatedCompositeFieldContainer[Dependency]
    dependency_policy: DependencyPolicy
    def __init__(self, workload: _Optional[str] = ..., input_uri: _Optional[str] = ..., input_sha256: _Optional[str] = ..., parameters: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., priority: _Optional[int] = ..., max_attempts: _Optional[int] = ..., idempotency_key: _Optional[str] = ..., traceparent: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[TaskSpec, _Mapping]]] = ..., failure_policy: _Optional[_Union[FailurePolicy, str]] = ..., max_failed_tasks: _Optional[int] = ..., concurrency_key: _Optional[str] = ..., required_labels: _Optional[_Mapping[str, str]] = ..., run_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finalizer: _Optional[_Union[Finalizer, _Mapping]] = ..., account: _Optional[str] = ..., billing: _Optional[_Union[Billing, _Mapping]] = ..., view: _Optional[_Union[JobView, str]] = ..., after: _Optional[_Iterable[_Union[Dependency, _Mapping]]] = ..., dependency_policy: _Optional[_Union[DependencyPolicy, str]] = ...) -> None: ...

class CreateJobResponse(_message.Message):
    __slots__ = ("job", "tasks")
    JOB_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    job: Job
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ...) -> None: ...

class ClaimTasksRequest(_message.Message):
    __slots__ = ("worker_id", "workloads", "max_tasks", "lease_seconds", "wait_seconds", "labels")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    WORKLOADS_FIELD_NUMBER: _ClassVar[int]
    MAX_TASKS_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    workloads: _containers.RepeatedScalarFieldContainer[str]
    max_tasks: int
    lease_seconds: int
    wait_seconds: int
    labels: _containers.ScalarMap[str, str]
    def __init__(self, worker_id: _Optional[str] = ..., workloads: _Optional[_Iterable[str]] = ..., max_tasks: _Optional[int] = ..., lease_seconds: _Optional[int] = ..., wait_seconds: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ClaimTasksResponse(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[Task]
    def __init__(self, tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ...) -> None: ...

class RenewLeaseRequest(_message.Message):
    __slots__ = ("task_id", "worker_id", "attempt", "lease_seconds")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    worker_id: str
    attempt: int
    lease_seconds: int
    def __init__(self, task_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., attempt: _Optional[int] = ..., lease_seconds: _Optional[int] = ...) -> None: ...

class RenewLeaseResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class CompleteTaskRequest(_message.Message):
    __slots__ = ("task_id", "worker_id", "attempt", "result_uri", "result_sha256", "metrics", "claim_next", "usage")
    class UsageEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RESULT_URI_FIELD_NUMBER: _ClassVar[int]
    RESULT_SHA256_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    CLAIM_NEXT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    worker_id: str
    attempt: int
    result_uri: str
    result_sha256: str
    metrics: _struct_pb2.Struct
    claim_next: ClaimTasksRequest
    usage: _containers.ScalarMap[str, int]
    def __init__(self, task_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., attempt: _Optional[int] = ..., result_uri: _Optional[str] = ..., result_sha256: _Optional[str] = ..., metrics: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., claim_next: _Optional[_Union[ClaimTasksRequest, _Mapping]] = ..., usage: _Optional[_Mapping[str, int]] = ...) -> None: ...

class CompleteTaskResponse(_message.Message):
    __slots__ = ("task", "next_tasks")
    TASK_FIELD_NUMBER: _ClassVar[int]
    NEXT_TASKS_FIELD_NUMBER: _ClassVar[int]
    task: Task
    next_tasks: _containers.RepeatedCompositeFieldContainer[Task]
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ..., next_tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ...) -> None: ...

class CompleteTasksRequest(_message.Message):
    __slots__ = ("results", "claim_next")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    CLAIM_NEXT_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CompleteTaskRequest]
    claim_next: ClaimTasksRequest
    def __init__(self, results: _Optional[_Iterable[_Union[CompleteTaskRequest, _Mapping]]] = ..., claim_next: _Optional[_Union[ClaimTasksRequest, _Mapping]] = ...) -> None: ...

class CompleteTasksResponse(_message.Message):
    __slots__ = ("outcomes", "next_tasks")
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    NEXT_TASKS_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[CompleteTaskOutcome]
    next_tasks: _containers.RepeatedCompositeFieldContainer[Task]
    def __init__(self, outcomes: _Optional[_Iterable[_Union[CompleteTaskOutcome, _Mapping]]] = ..., next_tasks: _Optional[_Iterable[_Union[Task, _Mapping]]] = ...) -> None: ...

class CompleteTaskOutcome(_message.Message):
    __slots__ = ("task_id", "task", "error")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    task: Task
    error: OutcomeError
    def __init__(self, task_id: _Optional[str] = ..., task: _Optional[_Union[Task, _Mapping]] = ..., error: _Optional[_Union[OutcomeError, _Mapping]] = ...) -> None: ...

class OutcomeError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class FailTaskRequest(_message.Message):
    __slots__ = ("task_id", "worker_id", "attempt", "error_code", "error_message", "retryable", "retry_after_seconds", "usage")
    class UsageEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_SECONDS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    worker_id: str
    attempt: int
    error_code: str
    error_message: str
    retryable: bool
    retry_after_seconds: int
    usage: _containers.ScalarMap[str, int]
    def __init__(self, task_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., attempt: _Optional[int] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ..., retryable: _Optional[bool] = ..., retry_after_seconds: _Optional[int] = ..., usage: _Optional[_Mapping[str, int]] = ...) -> None: ...

class FailTaskResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job", "task_counts", "total_tasks", "progress", "failure")
    JOB_FIELD_NUMBER: _ClassVar[int]
    TASK_COUNTS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TASKS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    job: Job
    task_counts: TaskCounts
    total_tasks: int
    progress: float
    failure: JobFailure
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., task_counts: _Optional[_Union[TaskCounts, _Mapping]] = ..., total_tasks: _Optional[int] = ..., progress: _Optional[float] = ..., failure: _Optional[_Union[JobFailure, _Mapping]] = ...) -> None: ...

class JobFailure(_message.Message):
    __slots__ = ("task_id", "chunk_index", "error_code", "error_message", "attempt", "worker_id", "failed_at")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    FAILED_AT_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    chunk_index: int
    error_code: str
    error_message: str
    attempt: int
    worker_id: str
    failed_at: _timestamp_pb2.Timestamp
    def __init__(self, task_id: _Optional[str] = ..., chunk_index: _Optional[int] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ..., attempt: _Optional[int] = ..., worker_id: _Optional[str] = ..., failed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListCompletedResultsRequest(_message.Message):
    __slots__ = ("job_id", "page_size", "page_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    page_size: int
    page_token: str
    def __init__(self, job_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListCompletedResultsResponse(_message.Message):
    __slots__ = ("results", "next_page_token")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ResultManifest]
    next_page_token: str
    def __init__(self, results: _Optional[_Iterable[_Union[ResultManifest, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class PutWorkloadRequest(_message.Message):
    __slots__ = ("name", "max_attempts", "lease_seconds", "parameters_schema", "max_pending_seconds", "failure_policy", "max_failed_tasks", "max_leased", "max_leased_per_key", "max_leases_per_second", "leases_burst")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    MAX_PENDING_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_POLICY_FIELD_NUMBER: _ClassVar[int]
    MAX_FAILED_TASKS_FIELD_NUMBER: _ClassVar[int]
    MAX_LEASED_FIELD_NUMBER: _ClassVar[int]
    MAX_LEASED_PER_KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_LEASES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    LEASES_BURST_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_attempts: int
    lease_seconds: int
    parameters_schema: _struct_pb2.Struct
    max_pending_seconds: int
    failure_policy: FailurePolicy
    max_failed_tasks: int
    max_leased: int
    max_leased_per_key: int
    max_leases_per_second: float
    leases_burst: int
    def __init__(self, name: _Optional[str] = ..., max_attempts: _Optional[int] = ..., lease_seconds: _Optional[int] = ..., parameters_schema: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., max_pending_seconds: _Optional[int] = ..., failure_policy: _Optional[_Union[FailurePolicy, str]] = ..., max_failed_tasks: _Optional[int] = ..., max_leased: _Optional[int] = ..., max_leased_per_key: _Optional[int] = ..., max_leases_per_second: _Optional[float] = ..., leases_burst: _Optional[int] = ...) -> None: ...

class PutWorkloadResponse(_message.Message):
    __slots__ = ("workload",)
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    workload: Workload
    def __init__(self, workload: _Optional[_Union[Workload, _Mapping]] = ...) -> None: ...

class ListWorkloadsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListWorkloadsResponse(_message.Message):
    __slots__ = ("workloads",)
    WORKLOADS_FIELD_NUMBER: _ClassVar[int]
    workloads: _containers.RepeatedCompositeFieldContainer[Workload]
    def __init__(self, workloads: _Optional[_Iterable[_Union[Workload, _Mapping]]] = ...) -> None: ...

class ReportProgressRequest(_message.Message):
    __slots__ = ("task_id", "worker_id", "attempt", "progress", "message", "partial_result_uri", "lease_seconds")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_RESULT_URI_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    worker_id: str
    attempt: int
    progress: float
    message: str
    partial_result_uri: str
    lease_seconds: int
    def __init__(self, task_id: _Optional[str] = ..., worker_id: _Optional[str] = ..., attempt: _Optional[int] = ..., progress: _Optional[float] = ..., message: _Optional[str] = ..., partial_result_uri: _Optional[str] = ..., lease_seconds: _Optional[int] = ...) -> None: ...

class ReportProgressResponse(_message.Message):
    __slots__ = ("task",)
    TASK_FIELD_NUMBER: _ClassVar[int]
    task: Task
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("id", "job_id", "kind", "task_id", "chunk_index", "task_status", "previous_task_status", "job_status", "previous_job_status", "attempt", "worker_id", "progress", "message", "partial_result_uri", "error_code", "created_at", "error_message", "settlement_key", "settled_units")
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_INDEX_FIELD_NUMBER: _ClassVar[int]
    TASK_STATUS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_TASK_STATUS_FIELD_NUMBER: _ClassVar[int]
    JOB_STATUS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_JOB_STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_RESULT_URI_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SETTLEMENT_KEY_FIELD_NUMBER: _ClassVar[int]
    SETTLED_UNITS_FIELD_NUMBER: _ClassVar[int]
    id: int
    job_id: str
    kind: JobEventKind
    task_id: str
    chunk_index: int
    task_status: TaskStatus
    previous_task_status: TaskStatus
    job_status: JobStatus
    previous_job_status: JobStatus
    attempt: int
    worker_id: str
    progress: float
    message: str
    partial_result_uri: str
    error_code: str
    created_at: _timestamp_pb2.Timestamp
    error_message: str
    settlement_key: str
    settled_units: int
    def __init__(self, id: _Optional[int] = ..., job_id: _Optional[str] = ..., kind: _Optional[_Union[JobEventKind, str]] = ..., task_id: _Optional[str] = ..., chunk_index: _Optional[int] = ..., task_status: _Optional[_Union[TaskStatus, str]] = ..., previous_task_status: _Optional[_Union[TaskStatus, str]] = ..., job_status: _Optional[_Union[JobStatus, str]] = ..., previous_job_status: _Optional[_Union[JobStatus, str]] = ..., attempt: _Optional[int] = ..., worker_id: _Optional[str] = ..., progress: _Optional[float] = ..., message: _Optional[str] = ..., partial_result_uri: _Optional[str] = ..., error_code: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., error_message: _Optional[str] = ..., settlement_key: _Optional[str] = ..., settled_units: _Optional[int] = ...) -> None: ...

class WatchJobRequest(_message.Message):
    __slots__ = ("job_id", "after_event_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    after_event_id: int
    def __init__(self, job_id: _Optional[str] = ..., after_event_id: _Optional[int] = ...) -> None: ...

class WatchJobResponse(_message.Message):
    __slots__ = ("snapshot", "event")
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    snapshot: GetJobResponse
    event: JobEvent
    def __init__(self, snapshot: _Optional[_Union[GetJobResponse, _Mapping]] = ..., event: _Optional[_Union[JobEvent, _Mapping]] = ...) -> None: ...

class RetryJobRequest(_message.Message):
    __slots__ = ("job_id", "max_attempts")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    max_attempts: int
    def __init__(self, job_id: _Optional[str] = ..., max_attempts: _Optional[int] = ...) -> None: ...

class RetryJobResponse(_message.Message):
    __slots__ = ("job", "retried_tasks")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RETRIED_TASKS_FIELD_NUMBER: _ClassVar[int]
    job: Job
    retried_tasks: int
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., retried_tasks: _Optional[int] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("status", "workload", "page_size", "page_token", "schedule_name", "account")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_NAME_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    status: JobStatus
    workload: str
    page_size: int
    page_token: str
    schedule_name: str
    account: str
    def __init__(self, status: _Optional[_Union[JobStatus, str]] = ..., workload: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., schedule_name: _Optional[str] = ..., account: _Optional[str] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("job_id", "status", "page_size", "page_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    status: TaskStatus
    page_size: int
    page_token: str
    def __init__(self, job_id: _Optional[str] = ..., status: _Optional[_Union[TaskStatus, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks", "next_page_token")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskDetail]
    next_page_token: str
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskDetail, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class GetTaskResponse(_message.Message):
    __slots__ = ("task", "attempts", "waiting_reason", "waiting_detail")
    TASK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    WAITING_REASON_FIELD_NUMBER: _ClassVar[int]
    WAITING_DETAIL_FIELD_NUMBER: _ClassVar[int]
    task: Task
    attempts: _containers.RepeatedCompositeFieldContainer[TaskAttempt]
    waiting_reason: WaitingReason
    waiting_detail: str
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ..., attempts: _Optional[_Iterable[_Union[TaskAttempt, _Mapping]]] = ..., waiting_reason: _Optional[_Union[WaitingReason, str]] = ..., waiting_detail: _Optional[str] = ...) -> None: ...

class PutKeyLimitRequest(_message.Message):
    __slots__ = ("name", "key", "max_leased", "clear")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_LEASED_FIELD_NUMBER: _ClassVar[int]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    name: str
    key: str
    max_leased: int
    clear: bool
    def __init__(self, name: _Optional[str] = ..., key: _Optional[str] = ..., max_leased: _Optional[int] = ..., clear: _Optional[bool] = ...) -> None: ...

class PutKeyLimitResponse(_message.Message):
    __slots__ = ("name", "key", "max_leased")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_LEASED_FIELD_NUMBER: _ClassVar[int]
    name: str
    key: str
    max_leased: int
    def __init__(self, name: _Optional[str] = ..., key: _Optional[str] = ..., max_leased: _Optional[int] = ...) -> None: ...

class PauseWorkloadRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PauseWorkloadResponse(_message.Message):
    __slots__ = ("workload",)
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    workload: Workload
    def __init__(self, workload: _Optional[_Union[Workload, _Mapping]] = ...) -> None: ...

class ResumeWorkloadRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ResumeWorkloadResponse(_message.Message):
    __slots__ = ("workload",)
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    workload: Workload
    def __init__(self, workload: _Optional[_Union[Workload, _Mapping]] = ...) -> None: ...

class ListWorkloadKeysRequest(_message.Message):
    __slots__ = ("name", "limit")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    name: str
    limit: int
    def __init__(self, name: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListWorkloadKeysResponse(_message.Message):
    __slots__ = ("keys", "truncated")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedCompositeFieldContainer[WorkloadKey]
    truncated: bool
    def __init__(self, keys: _Optional[_Iterable[_Union[WorkloadKey, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class WorkloadKey(_message.Message):
    __slots__ = ("key", "pending", "leased", "max_leased", "own_limit")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    LEASED_FIELD_NUMBER: _ClassVar[int]
    MAX_LEASED_FIELD_NUMBER: _ClassVar[int]
    OWN_LIMIT_FIELD_NUMBER: _ClassVar[int]
    key: str
    pending: int
    leased: int
    max_leased: int
    own_limit: bool
    def __init__(self, key: _Optional[str] = ..., pending: _Optional[int] = ..., leased: _Optional[int] = ..., max_leased: _Optional[int] = ..., own_limit: _Optional[bool] = ...) -> None: ...

class TaskDetail(_message.Message):
    __slots__ = ("task", "attempts")
    TASK_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    task: Task
    attempts: _containers.RepeatedCompositeFieldContainer[TaskAttempt]
    def __init__(self, task: _Optional[_Union[Task, _Mapping]] = ..., attempts: _Optional[_Iterable[_Union[TaskAttempt, _Mapping]]] = ...) -> None: ...

class TaskAttempt(_message.Message):
    __slots__ = ("attempt", "worker_id", "leased_at", "ended_at", "outcome", "error_code", "error_message", "retried", "last_progress", "usage")
    class UsageEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    LEASED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRIED_FIELD_NUMBER: _ClassVar[int]
    LAST_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    worker_id: str
    leased_at: _timestamp_pb2.Timestamp
    ended_at: _timestamp_pb2.Timestamp
    outcome: AttemptOutcome
    error_code: str
    error_message: str
    retried: bool
    last_progress: AttemptProgress
    usage: _containers.ScalarMap[str, int]
    def __init__(self, attempt: _Optional[int] = ..., worker_id: _Optional[str] = ..., leased_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., ended_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., outcome: _Optional[_Union[AttemptOutcome, str]] = ..., error_code: _Optional[str] = ..., error_message: _Optional[str] = ..., retried: _Optional[bool] = ..., last_progress: _Optional[_Union[AttemptProgress, _Mapping]] = ..., usage: _Optional[_Mapping[str, int]] = ...) -> None: ...

class AttemptProgress(_message.Message):
    __slots__ = ("progress", "message", "partial_result_uri", "reported_at")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_RESULT_URI_FIELD_NUMBER: _ClassVar[int]
    REPORTED_AT_FIELD_NUMBER: _ClassVar[int]
    progress: float
    message: str
    partial_result_uri: str
    reported_at: _timestamp_pb2.Timestamp
    def __init__(self, progress: _Optional[float] = ..., message: _Optional[str] = ..., partial_result_uri: _Optional[str] = ..., reported_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Schedule(_message.Message):
    __slots__ = ("name", "cron", "timezone", "job", "overlap", "catch_up", "max_catch_up", "paused", "next_fire_times", "last_fire_time", "last_job_id", "created_at", "updated_at", "workflow", "last_workflow_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    MAX_CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIRE_TIMES_FIELD_NUMBER: _ClassVar[int]
    LAST_FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    LAST_WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    cron: str
    timezone: str
    job: CreateJobRequest
    overlap: OverlapPolicy
    catch_up: CatchUpPolicy
    max_catch_up: int
    paused: bool
    next_fire_times: _containers.RepeatedCompositeFieldContainer[_timestamp_pb2.Timestamp]
    last_fire_time: _timestamp_pb2.Timestamp
    last_job_id: str
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    workflow: CreateWorkflowRequest
    last_workflow_id: str
    def __init__(self, name: _Optional[str] = ..., cron: _Optional[str] = ..., timezone: _Optional[str] = ..., job: _Optional[_Union[CreateJobRequest, _Mapping]] = ..., overlap: _Optional[_Union[OverlapPolicy, str]] = ..., catch_up: _Optional[_Union[CatchUpPolicy, str]] = ..., max_catch_up: _Optional[int] = ..., paused: _Optional[bool] = ..., next_fire_times: _Optional[_Iterable[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]]] = ..., last_fire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_job_id: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., workflow: _Optional[_Union[CreateWorkflowRequest, _Mapping]] = ..., last_workflow_id: _Optional[str] = ...) -> None: ...

class PutScheduleRequest(_message.Message):
    __slots__ = ("name", "cron", "timezone", "job", "overlap", "catch_up", "max_catch_up", "workflow")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    TIMEZONE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    OVERLAP_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    MAX_CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    name: str
    cron: str
    timezone: str
    job: CreateJobRequest
    overlap: OverlapPolicy
    catch_up: CatchUpPolicy
    max_catch_up: int
    workflow: CreateWorkflowRequest
    def __init__(self, name: _Optional[str] = ..., cron: _Optional[str] = ..., timezone: _Optional[str] = ..., job: _Optional[_Union[CreateJobRequest, _Mapping]] = ..., overlap: _Optional[_Union[OverlapPolicy, str]] = ..., catch_up: _Optional[_Union[CatchUpPolicy, str]] = ..., max_catch_up: _Optional[int] = ..., workflow: _Optional[_Union[CreateWorkflowRequest, _Mapping]] = ...) -> None: ...

class PutScheduleResponse(_message.Message):
    __slots__ = ("schedule", "created")
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    created: bool
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ..., created: _Optional[bool] = ...) -> None: ...

class GetScheduleRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class ListSchedulesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSchedulesResponse(_message.Message):
    __slots__ = ("schedules",)
    SCHEDULES_FIELD_NUMBER: _ClassVar[int]
    schedules: _containers.RepeatedCompositeFieldContainer[Schedule]
    def __init__(self, schedules: _Optional[_Iterable[_Union[Schedule, _Mapping]]] = ...) -> None: ...

class DeleteScheduleRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class PauseScheduleRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class PauseScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class ResumeScheduleRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ResumeScheduleResponse(_message.Message):
    __slots__ = ("schedule",)
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    schedule: Schedule
    def __init__(self, schedule: _Optional[_Union[Schedule, _Mapping]] = ...) -> None: ...

class Billing(_message.Message):
    __slots__ = ("reserved_units", "billing_key")
    RESERVED_UNITS_FIELD_NUMBER: _ClassVar[int]
    BILLING_KEY_FIELD_NUMBER: _ClassVar[int]
    reserved_units: int
    billing_key: str
    def __init__(self, reserved_units: _Optional[int] = ..., billing_key: _Optional[str] = ...) -> None: ...

class Settlement(_message.Message):
    __slots__ = ("settlement_key", "settled_units", "settled_at", "usage")
    class UsageEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SETTLEMENT_KEY_FIELD_NUMBER: _ClassVar[int]
    SETTLED_UNITS_FIELD_NUMBER: _ClassVar[int]
    SETTLED_AT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    settlement_key: str
    settled_units: int
    settled_at: _timestamp_pb2.Timestamp
    usage: _containers.ScalarMap[str, int]
    def __init__(self, settlement_key: _Optional[str] = ..., settled_units: _Optional[int] = ..., settled_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., usage: _Optional[_Mapping[str, int]] = ...) -> None: ...

class UsageAdjustment(_message.Message):
    __slots__ = ("id", "job_id", "task_id", "attempt", "account", "workload", "usage", "created_at", "settlement")
    class UsageEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    SETTLEMENT_FIELD_NUMBER: _ClassVar[int]
    id: str
    job_id: str
    task_id: str
    attempt: int
    account: str
    workload: str
    usage: _containers.ScalarMap[str, int]
    created_at: _timestamp_pb2.Timestamp
    settlement: Settlement
    def __init__(self, id: _Optional[str] = ..., job_id: _Optional[str] = ..., task_id: _Optional[str] = ..., attempt: _Optional[int] = ..., account: _Optional[str] = ..., workload: _Optional[str] = ..., usage: _Optional[_Mapping[str, int]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., settlement: _Optional[_Union[Settlement, _Mapping]] = ...) -> None: ...

class Account(_message.Message):
    __slots__ = ("name", "max_pending_tasks", "priority", "pending_tasks", "created_at", "updated_at")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_PENDING_TASKS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    PENDING_TASKS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_pending_tasks: int
    priority: int
    pending_tasks: int
    created_at: _timestamp_pb2.Timestamp
    updated_at: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., max_pending_tasks: _Optional[int] = ..., priority: _Optional[int] = ..., pending_tasks: _Optional[int] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class PutAccountRequest(_message.Message):
    __slots__ = ("name", "max_pending_tasks", "priority")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_PENDING_TASKS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    name: str
    max_pending_tasks: int
    priority: int
    def __init__(self, name: _Optional[str] = ..., max_pending_tasks: _Optional[int] = ..., priority: _Optional[int] = ...) -> None: ...

class PutAccountResponse(_message.Message):
    __slots__ = ("account",)
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    account: Account
    def __init__(self, account: _Optional[_Union[Account, _Mapping]] = ...) -> None: ...

class GetAccountRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetAccountResponse(_message.Message):
    __slots__ = ("account",)
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    account: Account
    def __init__(self, account: _Optional[_Union[Account, _Mapping]] = ...) -> None: ...

class ListAccountsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListAccountsResponse(_message.Message):
    __slots__ = ("accounts",)
    ACCOUNTS_FIELD_NUMBER: _ClassVar[int]
    accounts: _containers.RepeatedCompositeFieldContainer[Account]
    def __init__(self, accounts: _Optional[_Iterable[_Union[Account, _Mapping]]] = ...) -> None: ...

class GetAccountUsageRequest(_message.Message):
    __slots__ = ("account", "to")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    account: str
    to: _timestamp_pb2.Timestamp
    def __init__(self, account: _Optional[str] = ..., to: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., **kwargs) -> None: ...

class WorkloadUsage(_message.Message):
    __slots__ = ("workload", "jobs", "tasks_completed", "tasks_failed", "lease_seconds", "usage")
    class UsageEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    TASKS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    TASKS_FAILED_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    workload: str
    jobs: int
    tasks_completed: int
    tasks_failed: int
    lease_seconds: float
    usage: _containers.ScalarMap[str, int]
    def __init__(self, workload: _Optional[str] = ..., jobs: _Optional[int] = ..., tasks_completed: _Optional[int] = ..., tasks_failed: _Optional[int] = ..., lease_seconds: _Optional[float] = ..., usage: _Optional[_Mapping[str, int]] = ...) -> None: ...

class GetAccountUsageResponse(_message.Message):
    __slots__ = ("account", "workloads")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    WORKLOADS_FIELD_NUMBER: _ClassVar[int]
    account: str
    workloads: _containers.RepeatedCompositeFieldContainer[WorkloadUsage]
    def __init__(self, account: _Optional[str] = ..., workloads: _Optional[_Iterable[_Union[WorkloadUsage, _Mapping]]] = ...) -> None: ...

class ListSettlementsRequest(_message.Message):
    __slots__ = ("account", "page_size", "page_token")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    account: str
    page_size: int
    page_token: str
    def __init__(self, account: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSettlementsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SettleJobRequest(_message.Message):
    __slots__ = ("job_id", "settlement_key", "settled_units")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SETTLEMENT_KEY_FIELD_NUMBER: _ClassVar[int]
    SETTLED_UNITS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    settlement_key: str
    settled_units: int
    def __init__(self, job_id: _Optional[str] = ..., settlement_key: _Optional[str] = ..., settled_units: _Optional[int] = ...) -> None: ...

class SettleJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ...) -> None: ...

class ListAdjustmentsRequest(_message.Message):
    __slots__ = ("account", "page_size", "page_token")
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    account: str
    page_size: int
    page_token: str
    def __init__(self, account: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAdjustmentsResponse(_message.Message):
    __slots__ = ("adjustments", "next_page_token")
    ADJUSTMENTS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    adjustments: _containers.RepeatedCompositeFieldContainer[UsageAdjustment]
    next_page_token: str
    def __init__(self, adjustments: _Optional[_Iterable[_Union[UsageAdjustment, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SettleAdjustmentRequest(_message.Message):
    __slots__ = ("adjustment_id", "settlement_key", "settled_units")
    ADJUSTMENT_ID_FIELD_NUMBER: _ClassVar[int]
    SETTLEMENT_KEY_FIELD_NUMBER: _ClassVar[int]
    SETTLED_UNITS_FIELD_NUMBER: _ClassVar[int]
    adjustment_id: str
    settlement_key: str
    settled_units: int
    def __init__(self, adjustment_id: _Optional[str] = ..., settlement_key: _Optional[str] = ..., settled_units: _Optional[int] = ...) -> None: ...

class SettleAdjustmentResponse(_message.Message):
    __slots__ = ("adjustment",)
    ADJUSTMENT_FIELD_NUMBER: _ClassVar[int]
    adjustment: UsageAdjustment
    def __init__(self, adjustment: _Optional[_Union[UsageAdjustment, _Mapping]] = ...) -> None: ...

class WorkflowNodeSpec(_message.Message):
    __slots__ = ("name", "job", "after")
    NAME_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    name: str
    job: CreateJobRequest
    after: _containers.RepeatedCompositeFieldContainer[NodeDependency]
    def __init__(self, name: _Optional[str] = ..., job: _Optional[_Union[CreateJobRequest, _Mapping]] = ..., after: _Optional[_Iterable[_Union[NodeDependency, _Mapping]]] = ...) -> None: ...

class NodeDependency(_message.Message):
    __slots__ = ("node", "optional")
    NODE_FIELD_NUMBER: _ClassVar[int]
    OPTIONAL_FIELD_NUMBER: _ClassVar[int]
    node: str
    optional: bool
    def __init__(self, node: _Optional[str] = ..., optional: _Optional[bool] = ...) -> None: ...

class CreateWorkflowRequest(_message.Message):
    __slots__ = ("nodes", "name", "idempotency_key", "account")
    NODES_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[WorkflowNodeSpec]
    name: str
    idempotency_key: str
    account: str
    def __init__(self, nodes: _Optional[_Iterable[_Union[WorkflowNodeSpec, _Mapping]]] = ..., name: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., account: _Optional[str] = ...) -> None: ...

class CreateWorkflowResponse(_message.Message):
    __slots__ = ("workflow",)
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    workflow: Workflow
    def __init__(self, workflow: _Optional[_Union[Workflow, _Mapping]] = ...) -> None: ...

class WorkflowNodeCounts(_message.Message):
    __slots__ = ("waiting", "pending", "running", "completed", "failed", "cancelled", "scheduled")
    WAITING_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_FIELD_NUMBER: _ClassVar[int]
    waiting: int
    pending: int
    running: int
    completed: int
    failed: int
    cancelled: int
    scheduled: int
    def __init__(self, waiting: _Optional[int] = ..., pending: _Optional[int] = ..., running: _Optional[int] = ..., completed: _Optional[int] = ..., failed: _Optional[int] = ..., cancelled: _Optional[int] = ..., scheduled: _Optional[int] = ...) -> None: ...

class Workflow(_message.Message):
    __slots__ = ("id", "name", "status", "nodes", "node_counts", "idempotency_key", "created_at", "completed_at", "schedule_name", "schedule_fire_time", "account")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    NODE_COUNTS_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_AT_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_NAME_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    status: JobStatus
    nodes: _containers.RepeatedCompositeFieldContainer[WorkflowNode]
    node_counts: WorkflowNodeCounts
    idempotency_key: str
    created_at: _timestamp_pb2.Timestamp
    completed_at: _timestamp_pb2.Timestamp
    schedule_name: str
    schedule_fire_time: _timestamp_pb2.Timestamp
    account: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., status: _Optional[_Union[JobStatus, str]] = ..., nodes: _Optional[_Iterable[_Union[WorkflowNode, _Mapping]]] = ..., node_counts: _Optional[_Union[WorkflowNodeCounts, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., completed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., schedule_name: _Optional[str] = ..., schedule_fire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., account: _Optional[str] = ...) -> None: ...

class WorkflowNode(_message.Message):
    __slots__ = ("name", "job_id", "status", "workload", "after", "dependency_policy", "waiting_parents", "total_tasks", "completed_tasks", "cancel_reason", "completed_at")
    NAME_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_POLICY_FIELD_NUMBER: _ClassVar[int]
    WAITING_PARENTS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TASKS_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_TASKS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REASON_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_AT_FIELD_NUMBER: _ClassVar[int]
    name: str
    job_id: str
    status: JobStatus
    workload: str
    after: _containers.RepeatedCompositeFieldContainer[NodeDependency]
    dependency_policy: DependencyPolicy
    waiting_parents: int
    total_tasks: int
    completed_tasks: int
    cancel_reason: str
    completed_at: _timestamp_pb2.Timestamp
    def __init__(self, name: _Optional[str] = ..., job_id: _Optional[str] = ..., status: _Optional[_Union[JobStatus, str]] = ..., workload: _Optional[str] = ..., after: _Optional[_Iterable[_Union[NodeDependency, _Mapping]]] = ..., dependency_policy: _Optional[_Union[DependencyPolicy, str]] = ..., waiting_parents: _Optional[int] = ..., total_tasks: _Optional[int] = ..., completed_tasks: _Optional[int] = ..., cancel_reason: _Optional[str] = ..., completed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class GetWorkflowRequest(_message.Message):
    __slots__ = ("workflow_id",)
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    def __init__(self, workflow_id: _Optional[str] = ...) -> None: ...

class GetWorkflowResponse(_message.Message):
    __slots__ = ("workflow",)
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    workflow: Workflow
    def __init__(self, workflow: _Optional[_Union[Workflow, _Mapping]] = ...) -> None: ...

class ListWorkflowsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "schedule_name", "account")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_NAME_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    schedule_name: str
    account: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., schedule_name: _Optional[str] = ..., account: _Optional[str] = ...) -> None: ...

class ListWorkflowsResponse(_message.Message):
    __slots__ = ("workflows", "next_page_token")
    WORKFLOWS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    workflows: _containers.RepeatedCompositeFieldContainer[Workflow]
    next_page_token: str
    def __init__(self, workflows: _Optional[_Iterable[_Union[Workflow, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WatchWorkflowRequest(_message.Message):
    __slots__ = ("workflow_id", "after_event_id")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    after_event_id: int
    def __init__(self, workflow_id: _Optional[str] = ..., after_event_id: _Optional[int] = ...) -> None: ...

class WorkflowEvent(_message.Message):
    __slots__ = ("id", "node", "job_id", "status", "previous_status", "created_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    id: int
    node: str
    job_id: str
    status: JobStatus
    previous_status: JobStatus
    created_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[int] = ..., node: _Optional[str] = ..., job_id: _Optional[str] = ..., status: _Optional[_Union[JobStatus, str]] = ..., previous_status: _Optional[_Union[JobStatus, str]] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class WatchWorkflowResponse(_message.Message):
    __slots__ = ("snapshot", "event")
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    snapshot: GetWorkflowResponse
    event: WorkflowEvent
    def __init__(self, snapshot: _Optional[_Union[GetWorkflowResponse, _Mapping]] = ..., event: _Optional[_Union[WorkflowEvent, _Mapping]] = ...) -> None: ...

class CancelWorkflowRequest(_message.Message):
    __slots__ = ("workflow_id", "reason")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    reason: str
    def __init__(self, workflow_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelWorkflowResponse(_message.Message):
    __slots__ = ("workflow", "cancelled_nodes")
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_NODES_FIELD_NUMBER: _ClassVar[int]
    workflow: Workflow
    cancelled_nodes: int
    def __init__(self, workflow: _Optional[_Union[Workflow, _Mapping]] = ..., cancelled_nodes: _Optional[int] = ...) -> None: ...

class RetryWorkflowRequest(_message.Message):
    __slots__ = ("workflow_id", "max_attempts")
    WORKFLOW_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    workflow_id: str
    max_attempts: int
    def __init__(self, workflow_id: _Optional[str] = ..., max_attempts: _Optional[int] = ...) -> None: ...

class RetryWorkflowResponse(_message.Message):
    __slots__ = ("workflow", "retried_nodes", "retried_tasks")
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    RETRIED_NODES_FIELD_NUMBER: _ClassVar[int]
    RETRIED_TASKS_FIELD_NUMBER: _ClassVar[int]
    workflow: Workflow
    retried_nodes: int
    retried_tasks: int
    def __init__(self, workflow: _Optional[_Union[Workflow, _Mapping]] = ..., retried_nodes: _Optional[int] = ..., retried_tasks: _Optional[int] = ...) -> None: ...
