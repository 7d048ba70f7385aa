"""The submitter: create, watch, list, cancel and retry jobs, and read their results."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any

from ._otel import current_traceparent
from ._transport import Transport, make_transport
from .errors import UnavailableError
from .models import (
    CreatedJob,
    Job,
    JobSnapshot,
    ResultManifest,
    RetriedJob,
    TaskSpec,
    WatchUpdate,
    Workload,
    field_of,
)

__all__ = ["Client"]

JsonObject = dict[str, Any]


def _job_status(status: str) -> str:
    s = status.upper()
    return s if s.startswith("JOB_STATUS_") else f"JOB_STATUS_{s}"


class Client:
    """A submitter's connection to a coordinator.

    Example::

        with Client("http://127.0.0.1:8080", token=os.environ.get("LEASEHOLD_TOKEN")) as client:
            created = client.create_job("scimesh", tasks=[TaskSpec(0, "s3://in/0", sha)], idempotency_key="mesh-42")
            for update in client.watch(created.job.id):
                ...
            for manifest in client.results(created.job.id):
                print(manifest.chunk_index, manifest.result_uri)

    Every method raises a :class:`~leasehold.errors.LeaseholdError` subclass (``NotFoundError``,
    ``AlreadyExistsError``, ...) carrying ``code`` and ``request_id`` when the coordinator refuses a call.

    Args:
        url: ``http://host:port`` (or ``https://``) of the coordinator.
        token: Bearer token (a submitter or admin token) when the coordinator requires one.
        transport: ``"json"`` (Connect JSON, standard library only) or ``"grpc"`` (needs grpcio).
        timeout: Seconds each call may take.
    """

    def __init__(self, url: str, *, token: str | None = None, transport: str = "json", timeout: float = 10.0) -> None:
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
    ) -> CreatedJob:
        """Creates a job of ``tasks`` (or one task from ``input_uri``/``input_sha256``).

        With ``idempotency_key``, the same request again returns the job created the first time; a different
        request under the same key raises :class:`~leasehold.errors.AlreadyExistsError`. ``traceparent``
        defaults to the current OpenTelemetry span's when OpenTelemetry is installed.
        """
        req: JsonObject = {"workload": workload}
        if tasks is not None:
            req["tasks"] = [t.to_json() if isinstance(t, TaskSpec) else dict(t) for t in tasks]
        if input_uri:
            req["input_uri"] = input_uri
        if input_sha256:
            req["input_sha256"] = input_sha256
        if parameters is not None:
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
        return CreatedJob.from_json(self._call("CreateJob", req))

    def get_job(self, job_id: str) -> JobSnapshot:
        """The job with the number of its tasks in each status and its progress (0–1)."""
        return JobSnapshot.from_json(self._call("GetJob", {"job_id": job_id}))

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

    def list_jobs(self, *, status: str | None = None, workload: str | None = None,
                  page_size: int | None = None) -> Iterator[Job]:
        """Iterates over jobs, newest first, across every page; ``status`` as ``"failed"`` or ``"JOB_STATUS_FAILED"``."""
        token = ""
        while True:
            req: JsonObject = {}
            if status:
                req["status"] = _job_status(status)
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
                     parameters_schema: Mapping[str, Any] | None = None,
                     max_pending_seconds: int | None = None) -> Workload:
        """Registers a workload or updates it (admin token); unset settings take the server's defaults."""
        req: JsonObject = {"name": name}
        if max_attempts is not None:
            req["max_attempts"] = max_attempts
        if lease_seconds is not None:
            req["lease_seconds"] = lease_seconds
        if parameters_schema is not None:
            req["parameters_schema"] = dict(parameters_schema)
        if max_pending_seconds:
            req["max_pending_seconds"] = max_pending_seconds
        return Workload.from_json(field_of(self._call("PutWorkload", req), "workload") or {})

    def list_workloads(self) -> list[Workload]:
        """The registered workloads, ordered by name."""
        return [Workload.from_json(w) for w in field_of(self._call("ListWorkloads", {}), "workloads") or []]
