"""The admin's and the settler's calls: workloads, flow control, schedules, accounts and settlement.

Each function is one method of :class:`~leasehold.Client` and :class:`~leasehold.aio.AsyncClient`, as in
``_calls`` (which tells how): its signature and docstring are the method's, and it returns the call to make.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

from ._calls import Paged, Unary, _in, enum_name
from .accounts import Account, AccountUsage, UsageAdjustment
from .models import FailurePolicy, Job, KeyLimit, Schedule, TaskSpec, Workload, WorkloadKeys, field_of, rfc3339

__all__: list[str] = []

JsonObject = dict[str, Any]
T = TypeVar("T")


def _each(name: str, parse: Callable[[JsonObject], T]) -> Callable[[JsonObject], list[T]]:
    """Reads each item of the answer's list field ``name`` with ``parse``."""
    return lambda res: [parse(x) for x in field_of(res, name) or []]


def put_workload(name: str, *, max_attempts: int | None = None, lease_seconds: int | None = None,
                 parameters_schema: Mapping[str, Any] | None = None, max_pending_seconds: int | None = None,
                 failure_policy: FailurePolicy | None = None, max_failed_tasks: int | None = None,
                 max_leased: int | None = None, max_leased_per_key: int | None = None,
                 max_leases_per_second: float | None = None, leases_burst: int | None = None) -> Unary[Workload]:
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
        req["failure_policy"] = enum_name("FAILURE_POLICY_", failure_policy)
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
    return Unary("PutWorkload", req, _in("workload", Workload.from_json))


def list_workloads() -> Unary[list[Workload]]:
    """The registered workloads, ordered by name."""
    return Unary("ListWorkloads", {}, _each("workloads", Workload.from_json))


def put_key_limit(workload: str, key: str, max_leased: int) -> Unary[KeyLimit]:
    """Sets one concurrency key's cap in place of the workload's ``max_leased_per_key``, from the next claim.

    A premium tenant's key may get 10 where the default is 2. Claims parked on the workload are woken, so
    a raised cap fills at once. An unknown workload raises :class:`~leasehold.errors.NotFoundError`; a cap
    below 1 or a key that is empty or over 128 bytes :class:`~leasehold.errors.InvalidArgumentError`.

    Example::

        client.put_workload("render", max_leased_per_key=2)
        client.put_key_limit("render", "premium-customer", 10)
    """
    return Unary("PutKeyLimit", {"name": workload, "key": key, "max_leased": max_leased}, KeyLimit.from_json)


def list_workload_keys(workload: str, *, limit: int | None = None) -> Unary[WorkloadKeys]:
    """A workload's concurrency keys, busiest first, each with its pending and leased tasks and its cap (admin token).

    Every key with a pending or leased task, and every key with its own cap (:meth:`put_key_limit`),
    counted when asked. ``limit``: at most that many keys (default 100, at most 1,000); ``truncated`` tells
    whether more qualified. An unknown workload raises :class:`~leasehold.errors.NotFoundError`.

    Example::

        for k in client.list_workload_keys("render").keys:
            print(k.key, k.leased, k.max_leased, "(own)" if k.own_limit else "", k.pending)
    """
    req: JsonObject = {"name": workload}
    if limit:
        req["limit"] = limit
    return Unary("ListWorkloadKeys", req, WorkloadKeys.from_json)


def pause(workload: str) -> Unary[Workload]:
    """Pauses a workload: no claim leases its tasks until :meth:`resume`; returns it with ``paused`` set.

    Leases already held run on and may complete; jobs can still be created (their tasks wait, and
    :meth:`get_task` says ``workload_paused``). Pausing a paused workload changes nothing. An unknown
    workload raises :class:`~leasehold.errors.NotFoundError`.
    """
    return Unary("PauseWorkload", {"name": workload}, _in("workload", Workload.from_json))


def resume(workload: str) -> Unary[Workload]:
    """Resumes a paused workload and wakes the claims parked on it; returns it with ``paused`` unset.

    An unknown workload raises :class:`~leasehold.errors.NotFoundError`.
    """
    return Unary("ResumeWorkload", {"name": workload}, _in("workload", Workload.from_json))


def put_schedule(name: str, cron: str, job: Mapping[str, Any], *, timezone: str | None = None,
                 overlap: str | None = None, catch_up: str | None = None,
                 max_catch_up: int | None = None) -> Unary[Schedule]:
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
        req["overlap"] = enum_name("OVERLAP_POLICY_", overlap)
    if catch_up:
        req["catch_up"] = enum_name("CATCH_UP_POLICY_", catch_up)
    if max_catch_up is not None:
        req["max_catch_up"] = max_catch_up
    return Unary("PutSchedule", req, _in("schedule", Schedule.from_json))


def get_schedule(name: str) -> Unary[Schedule]:
    """A schedule with its next fire times; :class:`~leasehold.errors.NotFoundError` when unknown."""
    return Unary("GetSchedule", {"name": name}, _in("schedule", Schedule.from_json))


def list_schedules() -> Unary[list[Schedule]]:
    """The schedules, ordered by name."""
    return Unary("ListSchedules", {}, _each("schedules", Schedule.from_json))


def delete_schedule(name: str) -> Unary[Schedule]:
    """Deletes a schedule (the jobs it created stay); returns it as it was."""
    return Unary("DeleteSchedule", {"name": name}, _in("schedule", Schedule.from_json))


def pause_schedule(name: str) -> Unary[Schedule]:
    """Stops a schedule's ticks until it is resumed; the ticks missed meanwhile are not caught up."""
    return Unary("PauseSchedule", {"name": name}, _in("schedule", Schedule.from_json))


def resume_schedule(name: str) -> Unary[Schedule]:
    """Resumes a paused schedule from its next tick after now."""
    return Unary("ResumeSchedule", {"name": name}, _in("schedule", Schedule.from_json))


def put_account(name: str, *, max_pending_tasks: int = 0, priority: int = 0) -> Unary[Account]:
    """Registers an account or replaces its settings (admin token).

    ``max_pending_tasks`` bounds the pending tasks over the account's jobs (``0``: no limit); ``priority``
    is its jobs' priority when they set none (its tier). A bad name or a negative limit raises
    :class:`~leasehold.errors.InvalidArgumentError` naming the field, and nothing is written.

    Example::

        client.put_account("acme", max_pending_tasks=10_000, priority=5)
    """
    req: JsonObject = {"name": name, "max_pending_tasks": max_pending_tasks, "priority": priority}
    return Unary("PutAccount", req, _in("account", Account.from_json))


def get_account(name: str) -> Unary[Account]:
    """An account with its pending tasks now; :class:`~leasehold.errors.NotFoundError` when unknown."""
    return Unary("GetAccount", {"name": name}, _in("account", Account.from_json))


def list_accounts() -> Unary[list[Account]]:
    """The accounts, ordered by name."""
    return Unary("ListAccounts", {}, _each("accounts", Account.from_json))


def get_account_usage(account: str, *, start: datetime | str | None = None,
                      end: datetime | str | None = None) -> Unary[AccountUsage]:
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
    return Unary("GetAccountUsage", req, AccountUsage.from_json)


def list_settlements(*, account: str | None = None, page_size: int | None = None) -> Paged[Job]:
    """Iterates over final, unsettled billable jobs, oldest final first, across every page.

    Each job carries its ``account``, ``billing``, ``usage`` totals, final ``status`` and ``completed_at``:
    what a settler needs to charge or refund it with :meth:`settle_job`. ``account``: only its jobs.
    """
    req: JsonObject = {}
    if account:
        req["account"] = account
    return Paged("ListSettlements", req, "jobs", Job.from_json, page_size)


def settle_job(job_id: str, settlement_key: str, settled_units: int) -> Unary[Job]:
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
    return Unary("SettleJob", req, _in("job", Job.from_json))


def list_adjustments(*, account: str | None = None, page_size: int | None = None) -> Paged[UsageAdjustment]:
    """Iterates over unsettled adjustments, oldest first, across every page.

    Each is usage a late result reported after its job was settled, to be charged apart with
    :meth:`settle_adjustment`. ``account``: only its own.
    """
    req: JsonObject = {}
    if account:
        req["account"] = account
    return Paged("ListAdjustments", req, "adjustments", UsageAdjustment.from_json, page_size)


def settle_adjustment(adjustment_id: str, settlement_key: str, settled_units: int) -> Unary[UsageAdjustment]:
    """Records an adjustment's settlement, once, as :meth:`settle_job` does a job's.

    Returns it with its ``settlement``. The same key and units again answer the same; another key or amount
    raises :class:`~leasehold.errors.AlreadyExistsError`.
    """
    req: JsonObject = {"adjustment_id": adjustment_id, "settlement_key": settlement_key, "settled_units": str(settled_units)}
    return Unary("SettleAdjustment", req, _in("adjustment", UsageAdjustment.from_json))
