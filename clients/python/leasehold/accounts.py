"""The money path's typed answers: accounts, a job's billing context and settlement, usage per account.

Usage counters are ``dict[str, int]``: named counters a worker reports with a result or a failure (keys
``^[a-z][a-z0-9_.]{0,62}$``, at most 32, values from 0 to 2**53 - 1). Proto JSON carries int64 values as
strings and gRPC as ints; :func:`usage_of` reads both as ``int``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ._read import _float, _int, _list, _str, _time, field_of

__all__ = [
    "Account",
    "AccountUsage",
    "Billing",
    "Settlement",
    "Usage",
    "UsageAdjustment",
    "WorkloadUsage",
    "check_usage",
    "usage_of",
]

#: Named usage counters (``{"gpu_ms": 1200, "tokens": 5000}``).
Usage = dict[str, int]

USAGE_KEY = re.compile(r"^[a-z][a-z0-9_.]{0,62}$")
USAGE_MAX_COUNTERS = 32
USAGE_MAX_VALUE = 2**53 - 1


def usage_of(d: Mapping[str, Any], name: str = "usage") -> Usage:
    """The usage counters under ``name`` as ints (proto JSON sends int64 as strings); ``{}`` when none."""
    v = field_of(d, name)
    return {str(k): int(x) for k, x in v.items()} if isinstance(v, Mapping) else {}


def check_usage(usage: Mapping[str, int], where: str = "usage") -> Usage:
    """``usage`` as a plain dict, or :class:`ValueError` naming the first key or value the coordinator would refuse.

    Raised where the handler builds it (a :class:`~leasehold.Result` or a :class:`~leasehold.TaskError`), so a
    bad counter fails the handler's task with a clear message rather than a refused report.
    """
    if not isinstance(usage, Mapping):
        raise ValueError(f"{where}: a mapping of counter names to ints, not {type(usage).__name__}")
    if len(usage) > USAGE_MAX_COUNTERS:
        raise ValueError(f"{where}: at most {USAGE_MAX_COUNTERS} counters, not {len(usage)}")
    out: Usage = {}
    for key, value in usage.items():
        if not isinstance(key, str) or not USAGE_KEY.match(key):
            raise ValueError(f"{where}: counter name {key!r} must match ^[a-z][a-z0-9_.]{{0,62}}$")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= USAGE_MAX_VALUE:
            raise ValueError(f"{where}[{key}]: an int from 0 to 2**53 - 1, not {value!r}")
        out[key] = value
    return out


@dataclass(frozen=True)
class Billing:
    """A job's billing context, given to :meth:`leasehold.Client.create_job` and returned with the job.

    ``reserved_units`` is what the caller reserved (>= 0); ``billing_key`` is unique per account: a second
    ``create_job`` with the same key answers the first job, as an idempotency key does.
    """

    reserved_units: int = 0
    billing_key: str = ""

    def to_json(self) -> dict[str, Any]:
        """The proto JSON of the context, without unset fields (int64 as a string, as proto JSON writes it)."""
        out: dict[str, Any] = {}
        if self.reserved_units:
            out["reserved_units"] = str(self.reserved_units)
        if self.billing_key:
            out["billing_key"] = self.billing_key
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> Billing | None:
        """From its proto JSON; ``None`` when the job has none."""
        if not isinstance(d, Mapping) or not d:
            return None
        return cls(reserved_units=_int(d, "reserved_units"), billing_key=_str(d, "billing_key"))


@dataclass(frozen=True)
class Settlement:
    """A job's (or an adjustment's) settlement, recorded once.

    By :meth:`leasehold.Client.settle_job` (:meth:`~leasehold.Client.settle_adjustment`); ``usage`` is the usage
    it covers.
    """

    settlement_key: str
    settled_units: int = 0
    settled_at: datetime | None = None
    usage: Usage = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> Settlement | None:
        """From its proto JSON; ``None`` while the job is not settled."""
        if not isinstance(d, Mapping) or not _str(d, "settlement_key"):
            return None
        return cls(settlement_key=_str(d, "settlement_key"), settled_units=_int(d, "settled_units"),
                   settled_at=_time(d, "settled_at"), usage=usage_of(d))


@dataclass(frozen=True)
class UsageAdjustment:
    """Usage a settled job's late result reported: billed apart.

    Settled once with :meth:`leasehold.Client.settle_adjustment` (docs/money-path.md).
    """

    id: str
    job_id: str
    task_id: str = ""
    attempt: int = 0
    account: str = ""
    workload: str = ""
    usage: Usage = field(default_factory=dict)
    created_at: datetime | None = None
    settlement: Settlement | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> UsageAdjustment:
        """From its proto JSON."""
        return cls(id=_str(d, "id"), job_id=_str(d, "job_id"), task_id=_str(d, "task_id"), attempt=_int(d, "attempt"),
                   account=_str(d, "account"), workload=_str(d, "workload"), usage=usage_of(d),
                   created_at=_time(d, "created_at"), settlement=Settlement.from_json(field_of(d, "settlement")))


@dataclass(frozen=True)
class Account:
    """A registered account: whose jobs they are and what its tier allows.

    ``max_pending_tasks`` (``0``: no limit) bounds the pending tasks over its jobs (``create_job`` past it
    raises :class:`~leasehold.errors.ResourceExhaustedError`); ``priority`` is its jobs' priority when they set
    none; ``pending_tasks`` is how many are pending now.
    """

    name: str
    max_pending_tasks: int = 0
    priority: int = 0
    pending_tasks: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Account:
        """From its proto JSON."""
        return cls(name=_str(d, "name"), max_pending_tasks=_int(d, "max_pending_tasks"), priority=_int(d, "priority"),
                   pending_tasks=_int(d, "pending_tasks"), created_at=_time(d, "created_at"),
                   updated_at=_time(d, "updated_at"))


@dataclass(frozen=True)
class WorkloadUsage:
    """One workload's share of an account's use over an interval (:meth:`leasehold.Client.get_account_usage`)."""

    workload: str
    jobs: int = 0
    tasks_completed: int = 0
    tasks_failed: int = 0
    lease_seconds: float = 0.0
    usage: Usage = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WorkloadUsage:
        """From its proto JSON."""
        return cls(workload=_str(d, "workload"), jobs=_int(d, "jobs"), tasks_completed=_int(d, "tasks_completed"),
                   tasks_failed=_int(d, "tasks_failed"), lease_seconds=_float(d, "lease_seconds"), usage=usage_of(d))


@dataclass(frozen=True)
class AccountUsage:
    """An account's use per workload, ordered by workload name."""

    account: str
    workloads: list[WorkloadUsage] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AccountUsage:
        """From GetAccountUsageResponse JSON."""
        return cls(account=_str(d, "account"), workloads=[WorkloadUsage.from_json(w) for w in _list(d, "workloads")])
