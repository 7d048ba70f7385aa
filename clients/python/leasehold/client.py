"""The submitter: create, watch, list, cancel and retry jobs, read their results, and find out why they failed."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any

from ._checks import json_violations, task_json
from ._otel import current_traceparent
from ._transport import Transport, TransportName, make_transport
from .errors import FieldViolation, UnavailableError, invalid_request
from .models import (
    CreatedJob,
    FailurePolicy,
    Job,
    JobSnapshot,
    JobStatus,
    ResultManifest,
    RetriedJob,
    TaskDetail,
    TaskSpec,
    TaskStatus,
    WatchUpdate,
    Workload,
    field_of,
    rfc3339,
)

__all__ = ["Client"]

JsonObject = dict[str, Any]


def _enum_name(prefix: str, value: str) -> str:
    s = value.upper()
    return s if s.startswith(prefix) else f"{prefix}{s}"


class Client:
    """A submitter's connection to a coordinator.

    Example::

        with Client("http://127.0.0.1:8080", token=os.environ.get("LEASEHOLD_TOKEN")) as client:
            created = client.create_job("scimesh", tasks=[TaskSpec(0, "s3://in/0", sha)], idempotency_key="mesh-42")
            job = client.wait(created.job.id)
            if job.status == "failed":
                for detail in client.list_tasks(job.id, status="failed"):
                    print(detail.task.chunk_index, detail.task.error_code, detail.task.error_message)
            for manifest in client.results(created.job.id):
                print(manifest.chunk_index, manifest.result_uri)

    Every method raises a :class:`~leasehold.errors.LeaseholdError` subclass (``NotFoundError``,
    ``AlreadyExistsError``, ...) carrying ``code``, ``request_id`` and, for bad input, ``violations``, alike
    on both transports. Answers are typed data classes (:mod:`leasehold.models`); the numbers inside
    ``parameters`` and ``metrics`` read the same on both transports: integral ones within ±2**53 as
    ``int``, others as ``float`` (:func:`~leasehold.models.plain_json`).

    Args:
        url: ``http://host:port`` (or ``https://``) of the coordinator.
        token: Bearer token (a submitter or admin token) when the coordinator requires one.
        transport: ``"json"`` (Connect JSON, standard library only) or ``"grpc"`` (needs grpcio).
        timeout: Seconds each call may take.
    """

    def __init__(self, url: str, *, token: str | None = None, transport: TransportName = "json",
                 timeout: float = 10.0) -> None:
        self._transport: Transport = make_transport(url, token, transport)
        self._timeout = timeout

    def __enter__(self) -> Client:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connections."""
        self._transport.close()

    def _call(self, method: str, request: JsonObject) -> JsonObject:
        return self._transport.call(method, request, self._timeout)

    def create_job(
        self,
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
        run_at: datetime | str | None = None,
        finalizer: Mapping[str, Any] | None = None,
    ) -> CreatedJob:
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

        ``run_at`` (a timezone-aware :class:`~datetime.datetime`, a naive one read as UTC, or an RFC 3339
        string) delays the job: its tasks are claimable from then, and until then the job is ``scheduled``.
        ``finalizer`` (``{"workload": ..., "parameters": {...}, "run_on_failure": False}``) enqueues one job of
        that workload when this job ends; its task's parameters name the parent (``parent_job_id``,
        ``parent_status``), so its worker can read the ordered results with :meth:`results`. It runs
        after a failed or cancelled job only with ``run_on_failure``.

        An unknown key in a task mapping, a value of the wrong type, or a parameter that is not a JSON value
        raises :class:`~leasehold.errors.InvalidArgumentError` before anything is sent, with one
        ``violations`` entry per problem (``tasks[3].chunk_idx: unknown field``).

        Example::

            created = client.create_job("render", tasks=[TaskSpec(i, uri, sha) for i, (uri, sha) in enumerate(chunks)],
                                        parameters={"frames": 240}, idempotency_key="film-7",
                                        failure_policy="continue", max_failed_tasks=2)
        """
        req: JsonObject = {"workload": workload}
        bad: list[FieldViolation] = []
        if tasks is not None:
            specs: list[JsonObject] = []
            for i, t in enumerate(tasks):
                if isinstance(t, TaskSpec):
                    if t.parameters is not None:
                        json_violations(t.parameters, f"tasks[{i}].parameters", bad)
                    specs.append(t.to_json())
                else:
                    specs.append(task_json(t, f"tasks[{i}]", bad))
            req["tasks"] = specs
        if input_uri:
            req["input_uri"] = input_uri
        if input_sha256:
            req["input_sha256"] = input_sha256
        if parameters is not None:
            json_violations(parameters, "parameters", bad)
            req["parameters"] = dict(parameters)
        if priority:
            req["priority"] = priority
        if max_attempts is not None:
            req["max_attempts"] = max_attempts
        if idempotency_key:
            req["idempotency_key"] = idempotency_key
        tp = traceparent if traceparent is not None else current_traceparent()
        if tp:
            req["traceparent"] = tp
        if failure_policy:
            req["failure_policy"] = _enum_name("FAILURE_POLICY_", failure_policy)
        if max_failed_tasks is not None:
            req["max_failed_tasks"] = max_failed_tasks
        if run_at is not None:
            req["run_at"] = rfc3339(run_at)
        if finalizer is not None:
            req["finalizer"] = _finalizer_json(finalizer, bad)
        if bad:
            raise invalid_request("CreateJob", bad)
        return CreatedJob.from_json(self._call("CreateJob", req))

    def get_job(self, job_id: str) -> JobSnapshot:
        """The job with the number of its tasks in each status, its progress (0–1) and, if failed, why.

        Example::

            snap = client.get_job(job_id)
            if snap.failure is not None:   # set while the job is failed: the task failure that failed it
                print(f"chunk {snap.failure.chunk_index}: {snap.failure.error_code}: {snap.failure.error_message}")
        """
        return JobSnapshot.from_json(self._call("GetJob", {"job_id": job_id}))

    def get_task(self, task_id: str) -> TaskDetail:
        """One task as it is now, with its attempts oldest first: who leased it, when, and how each ended.

        Example::

            detail = client.get_task(task_id)
            print(detail.task.status, detail.task.error_code)
            for a in detail.attempts:
                print(a.attempt, a.worker_id, a.outcome, a.error_message)
        """
        return TaskDetail.from_json(self._call("GetTask", {"task_id": task_id}))

    def list_tasks(self, job_id: str, *, status: TaskStatus | str | None = None,
                   page_size: int | None = None) -> Iterator[TaskDetail]:
        """Iterates over the job's tasks in chunk order, each with its attempts, across every page.

        ``status`` keeps only the tasks of one status (``"failed"`` or ``"TASK_STATUS_FAILED"``).

        Example::

            for detail in client.list_tasks(job_id, status="failed"):
                print(detail.task.chunk_index, detail.task.error_code, detail.task.error_message)
        """
        token = ""
        while True:
            req: JsonObject = {"job_id": job_id}
            if status:
                req["status"] = _enum_name("TASK_STATUS_", status)
            if page_size:
                req["page_size"] = page_size
            if token:
                req["page_token"] = token
            page = self._call("ListTasks", req)
            for t in field_of(page, "tasks") or []:
                yield TaskDetail.from_json(t)
            token = field_of(page, "next_page_token") or ""
            if not token:
                return

    def watch(self, job_id: str, *, timeout: float | None = None) -> Iterator[WatchUpdate]:
        """Iterates over the job's updates: first a snapshot, then every event as it commits.

        The iterator ends after the event that makes the job final (at once for a finished job).
        ``timeout`` bounds the whole stream (default: none).
        """
        for message in self._transport.stream("WatchJob", {"job_id": job_id}, timeout):
            yield WatchUpdate.from_json(message)

    def wait(self, job_id: str, *, timeout: float | None = None) -> Job:
        """Blocks until the job is final (completed, failed or cancelled) and returns it.

        A stream the coordinator ends early (it shuts down streams on restart) is opened again.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.1
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            try:
                for _ in self.watch(job_id, timeout=left):
                    pass
                job = self.get_job(job_id).job
                if job.finished:
                    return job
            except UnavailableError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def results(self, job_id: str, *, page_size: int | None = None) -> Iterator[ResultManifest]:
        """Iterates over the result manifests of the job's completed tasks in chunk order, across every page."""
        token = ""
        while True:
            req: JsonObject = {"job_id": job_id}
            if page_size:
                req["page_size"] = page_size
            if token:
                req["page_token"] = token
            page = self._call("ListCompletedResults", req)
            for r in field_of(page, "results") or []:
                yield ResultManifest.from_json(r)
            token = field_of(page, "next_page_token") or ""
            if not token:
                return

    def cancel(self, job_id: str, reason: str | None = None) -> Job:
        """Cancels a pending or running job (a finished job is returned as it is)."""
        req: JsonObject = {"job_id": job_id}
        if reason:
            req["reason"] = reason
        return Job.from_json(field_of(self._call("CancelJob", req), "job") or {})

    def retry(self, job_id: str, *, max_attempts: int | None = None) -> RetriedJob:
        """Puts a failed or cancelled job's failed and cancelled tasks back to pending with fresh attempts."""
        req: JsonObject = {"job_id": job_id}
        if max_attempts is not None:
            req["max_attempts"] = max_attempts
        res = self._call("RetryJob", req)
        return RetriedJob(job=Job.from_json(field_of(res, "job") or {}), retried_tasks=int(field_of(res, "retried_tasks", 0)))

    def list_jobs(self, *, status: JobStatus | str | None = None, workload: str | None = None,
                  page_size: int | None = None) -> Iterator[Job]:
        """Iterates over jobs, newest first, across every page; ``status`` as ``"failed"`` or ``"JOB_STATUS_FAILED"``."""
        token = ""
        while True:
            req: JsonObject = {}
            if status:
                req["status"] = _enum_name("JOB_STATUS_", status)
            if workload:
                req["workload"] = workload
            if page_size:
                req["page_size"] = page_size
            if token:
                req["page_token"] = token
            page = self._call("ListJobs", req)
            for j in field_of(page, "jobs") or []:
                yield Job.from_json(j)
            token = field_of(page, "next_page_token") or ""
            if not token:
                return

    def put_workload(self, name: str, *, max_attempts: int | None = None, lease_seconds: int | None = None,
                     parameters_schema: Mapping[str, Any] | None = None, max_pending_seconds: int | None = None,
                     failure_policy: FailurePolicy | None = None, max_failed_tasks: int | None = None) -> Workload:
        """Registers a workload or updates it (admin token); unset settings take the server's defaults.

        ``failure_policy`` and ``max_failed_tasks`` are the defaults of the workload's jobs (see
        :meth:`create_job`).
        """
        req: JsonObject = {"name": name}
        if max_attempts is not None:
            req["max_attempts"] = max_attempts
        if lease_seconds is not None:
            req["lease_seconds"] = lease_seconds
        if parameters_schema is not None:
            req["parameters_schema"] = dict(parameters_schema)
        if max_pending_seconds:
            req["max_pending_seconds"] = max_pending_seconds
        if failure_policy:
            req["failure_policy"] = _enum_name("FAILURE_POLICY_", failure_policy)
        if max_failed_tasks is not None:
            req["max_failed_tasks"] = max_failed_tasks
        return Workload.from_json(field_of(self._call("PutWorkload", req), "workload") or {})

    def list_workloads(self) -> list[Workload]:
        """The registered workloads, ordered by name."""
        return [Workload.from_json(w) for w in field_of(self._call("ListWorkloads", {}), "workloads") or []]


_FINALIZER_FIELDS = ("workload", "parameters", "run_on_failure")


def _finalizer_json(finalizer: Mapping[str, Any], bad: list[FieldViolation]) -> JsonObject:
    """A finalizer mapping in proto JSON, with a violation appended for each unknown key or wrong type."""
    out: JsonObject = {}
    for key, value in finalizer.items():
        if key not in _FINALIZER_FIELDS:
            bad.append(FieldViolation(f"finalizer.{key}", "unknown field (known: workload, parameters, run_on_failure)"))
        elif key == "workload" and not isinstance(value, str):
            bad.append(FieldViolation("finalizer.workload", "must be a string"))
        elif key == "run_on_failure" and not isinstance(value, bool):
            bad.append(FieldViolation("finalizer.run_on_failure", "must be a bool"))
        elif key == "parameters" and value is not None:
            if not isinstance(value, Mapping):
                bad.append(FieldViolation("finalizer.parameters", "must be a mapping"))
                continue
            json_violations(value, "finalizer.parameters", bad)
            out["parameters"] = dict(value)
        elif value is not None:
            out[key] = value
    return out
