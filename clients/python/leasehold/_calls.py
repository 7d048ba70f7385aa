"""The submitter's calls on jobs and tasks: each function here is one method of both clients.

:class:`~leasehold.Client` and :class:`~leasehold.aio.AsyncClient` are made from these functions
(``get_job = unary(calls.get_job)``): a function's signature and docstring are the method's, and it returns
the call to make (:class:`Unary`: the RPC, its request in proto JSON, and how its answer is read; or
:class:`Paged` for the listings that iterate over every page). So both clients build the same requests, run
the same checks before anything is sent, and read the answers alike, whatever their I/O. The admin calls
(workloads, flow control, schedules, accounts) are in ``_admin_calls``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from ._checks import json_violations, labels_json, task_json
from ._otel import current_traceparent
from .accounts import Billing
from .errors import FieldViolation, invalid_request
from .models import (
    CreatedJob,
    Dependency,
    DependencyPolicy,
    FailurePolicy,
    Job,
    JobSnapshot,
    JobStatus,
    JobView,
    ResultManifest,
    RetriedJob,
    TaskDetail,
    TaskSpec,
    TaskStatus,
    field_of,
    rfc3339,
)

__all__ = ["Paged", "Unary", "enum_name"]

JsonObject = dict[str, Any]
T = TypeVar("T")


@dataclass(frozen=True)
class Unary(Generic[T]):
    """One unary call: the RPC's name, its request in proto JSON, and how its answer is read."""

    method: str
    request: JsonObject
    parse: Callable[[JsonObject], T]


@dataclass(frozen=True)
class Paged(Generic[T]):
    """A paged listing: the request of its first page; each next page is the same with the last page's token."""

    method: str
    request: JsonObject
    field: str
    parse: Callable[[JsonObject], T]
    page_size: int | None = None

    def page(self, token: str) -> JsonObject:
        """The request for the page after ``token`` (``""``: the first)."""
        req = dict(self.request)
        if self.page_size:
            req["page_size"] = self.page_size
        if token:
            req["page_token"] = token
        return req

    def read(self, page: JsonObject) -> tuple[list[T], str]:
        """A page's items, and the next page's token (``""`` after the last)."""
        return [self.parse(x) for x in field_of(page, self.field) or []], str(field_of(page, "next_page_token") or "")


def enum_name(prefix: str, value: str) -> str:
    """An enum value as the proto names it: ``"failed"`` → ``JOB_STATUS_FAILED`` (a full name is kept)."""
    s = value.upper()
    return s if s.startswith(prefix) else f"{prefix}{s}"


def _in(name: str, parse: Callable[[JsonObject], T]) -> Callable[[JsonObject], T]:
    """Reads the answer's field ``name`` (a message) with ``parse``."""
    return lambda res: parse(field_of(res, name) or {})


def watch_request(job_id: str) -> JsonObject:
    """WatchJob's request (the stream both clients read with their own I/O)."""
    return {"job_id": job_id}


def create_job(
    workload: str,
    *,
    tasks: Iterable[TaskSpec | Mapping[str, Any]] | None = None,
    input_uri: str | None = None,
    input_sha256: str | None = None,
    parameters: Mapping[str, Any] | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    idempotency_key: str | None = None,
    traceparent: str | None = None,
    failure_policy: FailurePolicy | None = None,
    max_failed_tasks: int | None = None,
    concurrency_key: str | None = None,
    required_labels: Mapping[str, str] | None = None,
    run_at: datetime | str | None = None,
    finalizer: Mapping[str, Any] | None = None,
    account: str | None = None,
    billing: Billing | Mapping[str, Any] | None = None,
    after: Iterable[str | Dependency | Mapping[str, Any]] | None = None,
    dependency_policy: DependencyPolicy | None = None,
    view: JobView = "full",
) -> Unary[CreatedJob]:
    """Creates a job of ``tasks`` (or one task from ``input_uri``/``input_sha256``).

    ``tasks`` are :class:`~leasehold.models.TaskSpec` or mappings of the same fields. With
    ``idempotency_key``, the same request again returns the job created the first time; a different
    request under the same key raises :class:`~leasehold.errors.AlreadyExistsError`. ``traceparent``
    defaults to the current OpenTelemetry span's when OpenTelemetry is installed.

    ``failure_policy`` says what the job does when a task fails for good: ``"fail_fast"`` (the job fails
    at the failure past ``max_failed_tasks`` and its unfinished tasks are cancelled) or ``"continue"``
    (every other task still runs; the job ends once all are final: ``failed`` when more than
    ``max_failed_tasks`` failed, else ``completed``, with the completed chunks' results listed either
    way). Unset, both take the workload's settings (by default ``fail_fast`` with no failure tolerated).

    ``concurrency_key`` (a customer id, say; at most 128 bytes) is inherited by every task: the workload's
    ``max_leased_per_key`` (or the key's own cap, :meth:`put_key_limit`) bounds how many of the key's
    tasks are leased at once, and within a priority the keys take turns. ``required_labels`` are labels a
    worker must claim with (``Worker(labels=...)``, every pair equal) to lease the job's tasks; a
    :class:`~leasehold.models.TaskSpec` may add its own. Names and values match ``^[a-z0-9._/-]{1,63}$``,
    at most 16; the coordinator refuses others with :class:`~leasehold.errors.InvalidArgumentError`
    naming the field (``required_labels[gpu]``), and nothing is written.

    ``run_at`` (a timezone-aware :class:`~datetime.datetime`, a naive one read as UTC, or an RFC 3339
    string) delays the job: its tasks are claimable from then, and until then the job is ``scheduled``.
    ``finalizer`` (``{"workload": ..., "parameters": {...}, "run_on_failure": False}``) enqueues one job of
    that workload when this job ends; its task's parameters name the parent (``parent_job_id``,
    ``parent_status``), so its worker can read the ordered results with :meth:`results`. It runs
    after a failed or cancelled job only with ``run_on_failure``.

    ``account`` names a registered account the job belongs to (a token bound to an account creates under
    it; naming another raises :class:`~leasehold.errors.PermissionDeniedError`; an unknown one
    :class:`~leasehold.errors.NotFoundError`; past the account's ``max_pending_tasks``
    :class:`~leasehold.errors.ResourceExhaustedError`, and nothing is written). ``billing``
    (:class:`~leasehold.accounts.Billing` or ``{"reserved_units": ..., "billing_key": ...}``) is stored with
    the job; a second job with the same ``billing_key`` in the account answers the first one.

    ``after`` lists the jobs this one runs after (at most 100: ids, :class:`~leasehold.models.Dependency` for an
    optional one, or ``{"job_id": ..., "optional": True}``): until they are final the job is ``waiting`` and
    none of its tasks is claimable; then it is pending, in the transaction that ended the last of them, and
    its tasks' ``parents`` carry each parent's status and (for a parent of one task) its result.
    ``dependency_policy``: ``"all_completed"`` (the default: a required parent that fails or is cancelled
    cancels this job) or ``"all_final"`` (it runs whatever their ends). A required parent already failed or
    cancelled raises :class:`~leasehold.errors.FailedPreconditionError` and nothing is written.
    :meth:`create_workflow` creates jobs and the edges between them in one call.

    ``view="basic"`` asks for the job alone: the returned :class:`~leasehold.models.CreatedJob` then has
    no ``tasks`` (an empty list), which spares the coordinator writing them and this process reading
    them (a 1,000-task job's answer is ~540 KB; the job alone ~1 KB). The default, ``"full"``, returns
    every task as created, as before. ``"basic"`` needs a coordinator that knows CreateJob's ``view``
    (older ones refuse the field).

    An unknown key in a task mapping, a value of the wrong type, or a parameter that is not a JSON value
    raises :class:`~leasehold.errors.InvalidArgumentError` before anything is sent, with one
    ``violations`` entry per problem (``tasks[3].chunk_idx: unknown field``).

    Example::

        created = client.create_job("render", tasks=[TaskSpec(i, uri, sha) for i, (uri, sha) in enumerate(chunks)],
                                    parameters={"frames": 240}, idempotency_key="film-7",
                                    failure_policy="continue", max_failed_tasks=2)
        client.create_job("render", tasks=chunks, concurrency_key="customer-42", required_labels={"gpu": "a100"})
        job = client.create_job("render", tasks=chunks, view="basic").job   # the job alone: no tasks sent back
    """
    bad: list[FieldViolation] = []
    req = job_json(workload, bad, tasks=tasks, input_uri=input_uri, input_sha256=input_sha256, parameters=parameters,
                   priority=priority, max_attempts=max_attempts, traceparent=traceparent, failure_policy=failure_policy,
                   max_failed_tasks=max_failed_tasks, concurrency_key=concurrency_key,
                   required_labels=required_labels, run_at=run_at, finalizer=finalizer, billing=billing, after=after,
                   dependency_policy=dependency_policy)
    if idempotency_key:
        req["idempotency_key"] = idempotency_key
    if account:
        req["account"] = account
    # "full" is the coordinator's default: it is not sent, so a coordinator without the field takes the request.
    if view == "basic":
        req["view"] = "JOB_VIEW_BASIC"
    elif view != "full":
        bad.append(FieldViolation("view", f'must be "basic" or "full", not {view!r}'))
    if bad:
        raise invalid_request("CreateJob", bad)
    return Unary("CreateJob", req, CreatedJob.from_json)


def job_json(
    workload: str,
    bad: list[FieldViolation],
    *,
    at: str = "",
    tasks: Iterable[TaskSpec | Mapping[str, Any]] | None = None,
    input_uri: str | None = None,
    input_sha256: str | None = None,
    parameters: Mapping[str, Any] | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    traceparent: str | None = None,
    failure_policy: FailurePolicy | None = None,
    max_failed_tasks: int | None = None,
    concurrency_key: str | None = None,
    required_labels: Mapping[str, str] | None = None,
    run_at: datetime | str | None = None,
    finalizer: Mapping[str, Any] | None = None,
    billing: Billing | Mapping[str, Any] | None = None,
    after: Iterable[str | Dependency | Mapping[str, Any]] | None = None,
    dependency_policy: DependencyPolicy | None = None,
) -> JsonObject:
    """A job as CreateJob (and a workflow's node) takes it, in proto JSON; each problem appended to ``bad``.

    ``at`` prefixes the fields a violation names (``nodes[2].job.`` for a workflow's node).
    """
    req: JsonObject = {"workload": workload}
    if tasks is not None:
        specs: list[JsonObject] = []
        for i, t in enumerate(tasks):
            if isinstance(t, TaskSpec):
                if t.parameters is not None:
                    json_violations(t.parameters, f"{at}tasks[{i}].parameters", bad)
                if t.required_labels is not None:
                    labels_json(t.required_labels, f"{at}tasks[{i}].required_labels", bad)
                specs.append(t.to_json())
            else:
                specs.append(task_json(t, f"{at}tasks[{i}]", bad))
        req["tasks"] = specs
    if input_uri:
        req["input_uri"] = input_uri
    if input_sha256:
        req["input_sha256"] = input_sha256
    if parameters is not None:
        json_violations(parameters, f"{at}parameters", bad)
        req["parameters"] = dict(parameters)
    if priority:
        req["priority"] = priority
    if max_attempts is not None:
        req["max_attempts"] = max_attempts
    tp = traceparent if traceparent is not None else current_traceparent()
    if tp:
        req["traceparent"] = tp
    if failure_policy:
        req["failure_policy"] = enum_name("FAILURE_POLICY_", failure_policy)
    if max_failed_tasks is not None:
        req["max_failed_tasks"] = max_failed_tasks
    if concurrency_key:
        req["concurrency_key"] = concurrency_key
    if required_labels:
        req["required_labels"] = labels_json(required_labels, f"{at}required_labels", bad)
    if run_at is not None:
        req["run_at"] = rfc3339(run_at)
    if finalizer is not None:
        req["finalizer"] = _finalizer_json(finalizer, bad, at)
    if billing is not None:
        req["billing"] = _billing_json(billing, bad, at)
    if after is not None:
        deps = [dependency_json(d, f"{at}after[{i}]", bad) for i, d in enumerate(after)]
        if deps:
            req["after"] = deps
    if dependency_policy:
        req["dependency_policy"] = enum_name("DEPENDENCY_POLICY_", dependency_policy)
    return req


def dependency_json(dep: str | Dependency | Mapping[str, Any], at: str, bad: list[FieldViolation]) -> JsonObject:
    """A parent job (an id, a :class:`Dependency` or a mapping of its fields) in proto JSON."""
    if isinstance(dep, str):
        return {"job_id": dep}
    if isinstance(dep, Dependency):
        return dep.to_json()
    if isinstance(dep, Mapping):
        out: JsonObject = {}
        for key, value in dep.items():
            if key in ("job_id", "jobId") and isinstance(value, str):
                out["job_id"] = value
            elif key == "optional" and isinstance(value, bool):
                out["optional"] = value
            else:
                bad.append(FieldViolation(f"{at}.{key}", "unknown field or wrong type (known: job_id, a string; "
                                                        "optional, a bool)"))
        return out
    bad.append(FieldViolation(at, f"must be a job id, a Dependency or a mapping, not {type(dep).__name__}"))
    return {}


def get_job(job_id: str) -> Unary[JobSnapshot]:
    """The job with the number of its tasks in each status, its progress (0–1) and, if failed, why.

    Example::

        snap = client.get_job(job_id)
        if snap.failure is not None:   # set while the job is failed: the task failure that failed it
            print(f"chunk {snap.failure.chunk_index}: {snap.failure.error_code}: {snap.failure.error_message}")
    """
    return Unary("GetJob", {"job_id": job_id}, JobSnapshot.from_json)


def get_task(task_id: str) -> Unary[TaskDetail]:
    """One task as it is now, with its attempts oldest first: who leased it, when, and how each ended.

    Example::

        detail = client.get_task(task_id)
        print(detail.task.status, detail.task.error_code)
        for a in detail.attempts:
            print(a.attempt, a.worker_id, a.outcome, a.error_message)
    """
    return Unary("GetTask", {"task_id": task_id}, TaskDetail.from_json)


def list_tasks(job_id: str, *, status: TaskStatus | str | None = None,
               page_size: int | None = None) -> Paged[TaskDetail]:
    """Iterates over the job's tasks in chunk order, each with its attempts, across every page.

    ``status`` keeps only the tasks of one status (``"failed"`` or ``"TASK_STATUS_FAILED"``).

    Example::

        for detail in client.list_tasks(job_id, status="failed"):
            print(detail.task.chunk_index, detail.task.error_code, detail.task.error_message)
    """
    req: JsonObject = {"job_id": job_id}
    if status:
        req["status"] = enum_name("TASK_STATUS_", status)
    return Paged("ListTasks", req, "tasks", TaskDetail.from_json, page_size)


def results(job_id: str, *, page_size: int | None = None) -> Paged[ResultManifest]:
    """Iterates over the result manifests of the job's completed tasks in chunk order, across every page."""
    return Paged("ListCompletedResults", {"job_id": job_id}, "results", ResultManifest.from_json, page_size)


def cancel(job_id: str, reason: str | None = None) -> Unary[Job]:
    """Cancels a pending or running job (a finished job is returned as it is)."""
    req: JsonObject = {"job_id": job_id}
    if reason:
        req["reason"] = reason
    return Unary("CancelJob", req, _in("job", Job.from_json))


def retry(job_id: str, *, max_attempts: int | None = None) -> Unary[RetriedJob]:
    """Puts a failed or cancelled job's failed and cancelled tasks back to pending with fresh attempts."""
    req: JsonObject = {"job_id": job_id}
    if max_attempts is not None:
        req["max_attempts"] = max_attempts
    return Unary("RetryJob", req, RetriedJob.from_json)


def list_jobs(*, status: JobStatus | str | None = None, workload: str | None = None,
              page_size: int | None = None, schedule_name: str | None = None,
              account: str | None = None) -> Paged[Job]:
    """Iterates over jobs, newest first, across every page; ``status`` as ``"failed"`` or ``"JOB_STATUS_FAILED"``.

    ``schedule_name``: only the jobs that schedule created; ``account``: only that account's jobs.
    """
    req: JsonObject = {}
    if account:
        req["account"] = account
    if status:
        req["status"] = enum_name("JOB_STATUS_", status)
    if workload:
        req["workload"] = workload
    if schedule_name:
        req["schedule_name"] = schedule_name
    return Paged("ListJobs", req, "jobs", Job.from_json, page_size)


def _billing_json(billing: Billing | Mapping[str, Any], bad: list[FieldViolation], at: str = "") -> JsonObject:
    """A billing context in proto JSON, with a violation appended for each unknown key or wrong type."""
    if isinstance(billing, Billing):
        return billing.to_json()
    out: JsonObject = {}
    for key, value in billing.items():
        if key == "reserved_units" and isinstance(value, int) and not isinstance(value, bool):
            out[key] = str(value)
        elif key == "billing_key" and isinstance(value, str):
            out[key] = value
        elif key in ("reserved_units", "billing_key"):
            bad.append(FieldViolation(f"{at}billing.{key}",
                                      "must be an int" if key == "reserved_units" else "must be a string"))
        else:
            bad.append(FieldViolation(f"{at}billing.{key}", "unknown field (known: reserved_units, billing_key)"))
    return out



_FINALIZER_FIELDS = ("workload", "parameters", "run_on_failure")


def _finalizer_json(finalizer: Mapping[str, Any], bad: list[FieldViolation], at: str = "") -> JsonObject:
    """A finalizer mapping in proto JSON, with a violation appended for each unknown key or wrong type."""
    out: JsonObject = {}
    for key, value in finalizer.items():
        if key not in _FINALIZER_FIELDS:
            bad.append(FieldViolation(f"{at}finalizer.{key}",
                                      "unknown field (known: workload, parameters, run_on_failure)"))
        elif key == "workload" and not isinstance(value, str):
            bad.append(FieldViolation(f"{at}finalizer.workload", "must be a string"))
        elif key == "run_on_failure" and not isinstance(value, bool):
            bad.append(FieldViolation(f"{at}finalizer.run_on_failure", "must be a bool"))
        elif key == "parameters" and value is not None:
            if not isinstance(value, Mapping):
                bad.append(FieldViolation(f"{at}finalizer.parameters", "must be a mapping"))
                continue
            json_violations(value, f"{at}finalizer.parameters", bad)
            out["parameters"] = dict(value)
        elif value is not None:
            out[key] = value
    return out
