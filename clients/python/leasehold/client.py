"""The submitter: create, watch, list, cancel and retry jobs, read their results, and find out why they failed."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any

from ._checks import json_violations, labels_json, task_json
from ._otel import current_traceparent
from ._transport import Transport, TransportName, make_transport
from .accounts import Account, AccountUsage, Billing
from .errors import FieldViolation, UnavailableError, invalid_request
from .models import (
    CreatedJob,
    FailurePolicy,
    Job,
    JobSnapshot,
    JobStatus,
    KeyLimit,
    ResultManifest,
    RetriedJob,
    Schedule,
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
        concurrency_key: str | None = None,
        required_labels: Mapping[str, str] | None = None,
        run_at: datetime | str | None = None,
        finalizer: Mapping[str, Any] | None = None,
        account: str | None = None,
        billing: Billing | Mapping[str, Any] | None = None,
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

        An unknown key in a task mapping, a value of the wrong type, or a parameter that is not a JSON value
        raises :class:`~leasehold.errors.InvalidArgumentError` before anything is sent, with one
        ``violations`` entry per problem (``tasks[3].chunk_idx: unknown field``).

        Example::

            created = client.create_job("render", tasks=[TaskSpec(i, uri, sha) for i, (uri, sha) in enumerate(chunks)],
                                        parameters={"frames": 240}, idempotency_key="film-7",
                                        failure_policy="continue", max_failed_tasks=2)
            client.create_job("render", tasks=chunks, concurrency_key="customer-42", required_labels={"gpu": "a100"})
        """
        req: JsonObject = {"workload": workload}
        bad: list[FieldViolation] = []
        if tasks is not None:
            specs: list[JsonObject] = []
            for i, t in enumerate(tasks):
                if isinstance(t, TaskSpec):
                    if t.parameters is not None:
                        json_violations(t.parameters, f"tasks[{i}].parameters", bad)
                    if t.required_labels is not None:
                        labels_json(t.required_labels, f"tasks[{i}].required_labels", bad)
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
        if concurrency_key:
            req["concurrency_key"] = concurrency_key
        if required_labels:
            req["required_labels"] = labels_json(required_labels, "required_labels", bad)
        if run_at is not None:
            req["run_at"] = rfc3339(run_at)
        if finalizer is not None:
            req["finalizer"] = _finalizer_json(finalizer, bad)
        if account:
            req["account"] = account
        if billing is not None:
            req["billing"] = _billing_json(billing, bad)
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
        req: JsonObject = {"job_id": job_id}
        if status:
            req["status"] = _enum_name("TASK_STATUS_", status)
        for t in self._pages("ListTasks", req, "tasks", page_size):
            yield TaskDetail.from_json(t)

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
        for r in self._pages("ListCompletedResults", {"job_id": job_id}, "results", page_size):
            yield ResultManifest.from_json(r)

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
                  page_size: int | None = None, schedule_name: str | None = None,
                  account: str | None = None) -> Iterator[Job]:
        """Iterates over jobs, newest first, across every page; ``status`` as ``"failed"`` or ``"JOB_STATUS_FAILED"``.

        ``schedule_name``: only the jobs that schedule created; ``account``: only that account's jobs.
        """
        req: JsonObject = {}
        if account:
            req["account"] = account
        if status:
            req["status"] = _enum_name("JOB_STATUS_", status)
        if workload:
            req["workload"] = workload
        if schedule_name:
            req["schedule_name"] = schedule_name
        for j in self._pages("ListJobs", req, "jobs", page_size):
            yield Job.from_json(j)

    def _pages(self, method: str, req: JsonObject, field: str, page_size: int | None) -> Iterator[Any]:
        """The items of every page of a paged RPC, in order: ``req`` again with each next page's token."""
        token = ""
        while True:
            page_req = dict(req)
            if page_size:
                page_req["page_size"] = page_size
            if token:
                page_req["page_token"] = token
            page = self._call(method, page_req)
            yield from field_of(page, field) or []
            token = field_of(page, "next_page_token") or ""
            if not token:
                return

    def put_workload(self, name: str, *, max_attempts: int | None = None, lease_seconds: int | None = None,
                     parameters_schema: Mapping[str, Any] | None = None, max_pending_seconds: int | None = None,
                     failure_policy: FailurePolicy | None = None, max_failed_tasks: int | None = None,
                     max_leased: int | None = None, max_leased_per_key: int | None = None,
                     max_leases_per_second: float | None = None, leases_burst: int | None = None) -> Workload:
        """Registers a workload or updates it (admin token); unset settings take the server's defaults.

        ``failure_policy`` and ``max_failed_tasks`` are the defaults of the workload's jobs (see
        :meth:`create_job`).

        Flow control, enforced by every claim on every coordinator: ``max_leased`` (at most that many of the
        workload's tasks leased at once), ``max_leased_per_key`` (the same for each ``concurrency_key``;
        :meth:`put_key_limit` gives one key another cap), and ``max_leases_per_second`` with ``leases_burst``
        (a token bucket of tasks leased per second, whatever each claim's batch size). Each replaces what the
        workload had: left unset, that cap or limit is removed. Whether it is paused is kept (:meth:`pause`).
        A cap below 1, a rate without a burst or a burst below 1 raise
        :class:`~leasehold.errors.InvalidArgumentError` naming the field, and nothing is written.

        Example::

            client.put_workload("render", max_leased=8, max_leased_per_key=2, max_leases_per_second=50, leases_burst=10)
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
        if max_leased is not None:
            req["max_leased"] = max_leased
        if max_leased_per_key is not None:
            req["max_leased_per_key"] = max_leased_per_key
        if max_leases_per_second is not None:
            req["max_leases_per_second"] = max_leases_per_second
        if leases_burst is not None:
            req["leases_burst"] = leases_burst
        return Workload.from_json(field_of(self._call("PutWorkload", req), "workload") or {})

    def list_workloads(self) -> list[Workload]:
        """The registered workloads, ordered by name."""
        return [Workload.from_json(w) for w in field_of(self._call("ListWorkloads", {}), "workloads") or []]

    # ---------- flow control (admin token) ----------

    def put_key_limit(self, workload: str, key: str, max_leased: int) -> KeyLimit:
        """Sets one concurrency key's cap in place of the workload's ``max_leased_per_key``, from the next claim.

        A premium tenant's key may get 10 where the default is 2. Claims parked on the workload are woken, so
        a raised cap fills at once. An unknown workload raises :class:`~leasehold.errors.NotFoundError`; a cap
        below 1 or a key that is empty or over 128 bytes :class:`~leasehold.errors.InvalidArgumentError`.

        Example::

            client.put_workload("render", max_leased_per_key=2)
            client.put_key_limit("render", "premium-customer", 10)
        """
        res = self._call("PutKeyLimit", {"name": workload, "key": key, "max_leased": max_leased})
        return KeyLimit.from_json(res)

    def pause(self, workload: str) -> Workload:
        """Pauses a workload: no claim leases its tasks until :meth:`resume`; returns it with ``paused`` set.

        Leases already held run on and may complete; jobs can still be created (their tasks wait, and
        :meth:`get_task` says ``workload_paused``). Pausing a paused workload changes nothing. An unknown
        workload raises :class:`~leasehold.errors.NotFoundError`.
        """
        return Workload.from_json(field_of(self._call("PauseWorkload", {"name": workload}), "workload") or {})

    def resume(self, workload: str) -> Workload:
        """Resumes a paused workload and wakes the claims parked on it; returns it with ``paused`` unset.

        An unknown workload raises :class:`~leasehold.errors.NotFoundError`.
        """
        return Workload.from_json(field_of(self._call("ResumeWorkload", {"name": workload}), "workload") or {})

    # ---- periodic schedules (admin token) ----

    def put_schedule(self, name: str, cron: str, job: Mapping[str, Any], *, timezone: str | None = None,
                     overlap: str | None = None, catch_up: str | None = None,
                     max_catch_up: int | None = None) -> Schedule:
        """Creates or replaces a periodic schedule: on every tick of ``cron`` one job from ``job``.

        ``cron`` has five fields (minute hour day-of-month month day-of-week) or six with seconds first;
        ``timezone`` is an IANA name (default UTC), DST included (a 02:30 daily schedule runs once, at
        03:00, on a spring-forward day). ``job`` is a CreateJob request as proto JSON (``workload``,
        ``input_uri``, ``input_sha256``, ``parameters``, ``tasks`` as mappings or
        :class:`~leasehold.models.TaskSpec`, ...), checked now as CreateJob would check it. ``overlap``:
        ``"allow"`` (default) or ``"skip"`` (no job while the previous tick's is not final); ``catch_up``:
        ``"skip"``, ``"one"`` (default) or ``"all"`` (at most ``max_catch_up``, default 10) for the ticks
        missed while no coordinator ran. Replacing a schedule keeps whether it is paused. A bad
        expression, timezone or template raises :class:`~leasehold.errors.InvalidArgumentError` naming
        the field (``cron``, ``timezone``, ``job.input_sha256``, ...).

        Example::

            client.put_schedule("nightly-report", "30 2 * * *", {"workload": "report", "input_uri": uri,
                                "input_sha256": sha}, timezone="Europe/Berlin", overlap="skip")
        """
        template: JsonObject = dict(job)
        tasks = template.get("tasks")
        if tasks is not None:
            template["tasks"] = [t.to_json() if isinstance(t, TaskSpec) else dict(t) for t in tasks]
        req: JsonObject = {"name": name, "cron": cron, "job": template}
        if timezone:
            req["timezone"] = timezone
        if overlap:
            req["overlap"] = _enum_name("OVERLAP_POLICY_", overlap)
        if catch_up:
            req["catch_up"] = _enum_name("CATCH_UP_POLICY_", catch_up)
        if max_catch_up is not None:
            req["max_catch_up"] = max_catch_up
        return Schedule.from_json(field_of(self._call("PutSchedule", req), "schedule") or {})

    def get_schedule(self, name: str) -> Schedule:
        """A schedule with its next fire times; :class:`~leasehold.errors.NotFoundError` when unknown."""
        return Schedule.from_json(field_of(self._call("GetSchedule", {"name": name}), "schedule") or {})

    def list_schedules(self) -> list[Schedule]:
        """The schedules, ordered by name."""
        return [Schedule.from_json(s) for s in field_of(self._call("ListSchedules", {}), "schedules") or []]

    def delete_schedule(self, name: str) -> Schedule:
        """Deletes a schedule (the jobs it created stay); returns it as it was."""
        return Schedule.from_json(field_of(self._call("DeleteSchedule", {"name": name}), "schedule") or {})

    def pause_schedule(self, name: str) -> Schedule:
        """Stops a schedule's ticks until it is resumed; the ticks missed meanwhile are not caught up."""
        return Schedule.from_json(field_of(self._call("PauseSchedule", {"name": name}), "schedule") or {})

    def resume_schedule(self, name: str) -> Schedule:
        """Resumes a paused schedule from its next tick after now."""
        return Schedule.from_json(field_of(self._call("ResumeSchedule", {"name": name}), "schedule") or {})

    # ---- accounts (admin token) and settlement (billing or admin token) ----

    def put_account(self, name: str, *, max_pending_tasks: int = 0, priority: int = 0) -> Account:
        """Registers an account or replaces its settings (admin token).

        ``max_pending_tasks`` bounds the pending tasks over the account's jobs (``0``: no limit); ``priority``
        is its jobs' priority when they set none (its tier). A bad name or a negative limit raises
        :class:`~leasehold.errors.InvalidArgumentError` naming the field, and nothing is written.

        Example::

            client.put_account("acme", max_pending_tasks=10_000, priority=5)
        """
        req: JsonObject = {"name": name, "max_pending_tasks": max_pending_tasks, "priority": priority}
        return Account.from_json(field_of(self._call("PutAccount", req), "account") or {})

    def get_account(self, name: str) -> Account:
        """An account with its pending tasks now; :class:`~leasehold.errors.NotFoundError` when unknown."""
        return Account.from_json(field_of(self._call("GetAccount", {"name": name}), "account") or {})

    def list_accounts(self) -> list[Account]:
        """The accounts, ordered by name."""
        return [Account.from_json(a) for a in field_of(self._call("ListAccounts", {}), "accounts") or []]

    def get_account_usage(self, account: str, *, start: datetime | str | None = None,
                          end: datetime | str | None = None) -> AccountUsage:
        """An account's use per workload over [``start``, ``end``) (unset: from the beginning, until now).

        Each :class:`~leasehold.accounts.WorkloadUsage` has the jobs that became final in the interval, their
        tasks completed and failed, the seconds their attempts held leases, and their usage counters summed.

        Example::

            for w in client.get_account_usage("acme", start=datetime(2026, 12, 1, tzinfo=timezone.utc)).workloads:
                print(w.workload, w.jobs, w.tasks_completed, w.usage.get("gpu_ms", 0))
        """
        req: JsonObject = {"account": account}
        if start is not None:
            req["from"] = rfc3339(start)
        if end is not None:
            req["to"] = rfc3339(end)
        return AccountUsage.from_json(self._call("GetAccountUsage", req))

    def list_settlements(self, *, account: str | None = None, page_size: int | None = None) -> Iterator[Job]:
        """Iterates over final, unsettled billable jobs, oldest final first, across every page.

        Each job carries its ``account``, ``billing``, ``usage`` totals, final ``status`` and ``completed_at``:
        what a settler needs to charge or refund it with :meth:`settle_job`. ``account``: only its jobs.
        """
        req: JsonObject = {}
        if account:
            req["account"] = account
        for j in self._pages("ListSettlements", req, "jobs", page_size):
            yield Job.from_json(j)

    def settle_job(self, job_id: str, settlement_key: str, settled_units: int) -> Job:
        """Records a final job's settlement, once; returns the job with its ``settlement``.

        The same key and units again answer the same job (a settler may retry freely); a different key or
        amount raises :class:`~leasehold.errors.AlreadyExistsError` naming what was recorded; a job that is
        not final :class:`~leasehold.errors.FailedPreconditionError`.

        Example::

            for job in client.list_settlements(account="acme"):
                charged = min(job.usage.get("tokens", 0), job.billing.reserved_units if job.billing else 0)
                client.settle_job(job.id, f"invoice-7:{job.id}", charged)
        """
        req: JsonObject = {"job_id": job_id, "settlement_key": settlement_key, "settled_units": str(settled_units)}
        return Job.from_json(field_of(self._call("SettleJob", req), "job") or {})


def _billing_json(billing: Billing | Mapping[str, Any], bad: list[FieldViolation]) -> JsonObject:
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
            bad.append(FieldViolation(f"billing.{key}", "must be an int" if key == "reserved_units" else "must be a string"))
        else:
            bad.append(FieldViolation(f"billing.{key}", "unknown field (known: reserved_units, billing_key)"))
    return out


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
