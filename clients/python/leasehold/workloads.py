"""A workload's registration and flow control as the coordinator answers them: its settings and caps, a key's cap.

:class:`Workload` (``put_workload``, ``list_workloads``, ``pause``, ``resume``), :class:`KeyLimit`
(``put_key_limit``) and :class:`WorkloadKeys` (``list_workload_keys``: each concurrency key's tasks and cap,
busiest first). Re-exported by :mod:`leasehold.models`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast

from ._read import _bool, _enum, _float, _int, _list, _obj, _str, _time

__all__ = ["FailurePolicy", "KeyLimit", "Workload", "WorkloadKey", "WorkloadKeys"]

JsonObject = dict[str, Any]

#: What a job does when its tasks fail for good: ``fail_fast`` (the first failure past ``max_failed_tasks``
#: fails the job and cancels its unfinished tasks; the default) or ``continue`` (every other task still runs;
#: the job ends once all are final: failed when more than ``max_failed_tasks`` failed, else completed).
FailurePolicy = Literal["", "fail_fast", "continue"]
_POLICIES = ("", "fail_fast", "continue")


def policy_of(d: Mapping[str, Any]) -> FailurePolicy:
    """A ``failure_policy`` field as its short name (``"continue"``); ``""`` when unset."""
    return cast(FailurePolicy, _enum(d, "failure_policy", "FAILURE_POLICY_", _POLICIES))


@dataclass(frozen=True)
class Workload:
    """A registered workload and its defaults (a job's ``failure_policy`` and ``max_failed_tasks`` among them).

    Its flow control: ``max_leased`` (at most that many of its tasks leased at once; ``0``: no cap),
    ``max_leased_per_key`` (the same per concurrency key; ``0``: no cap), ``max_leases_per_second`` and
    ``leases_burst`` (the rate limit's token bucket; ``0``: no limit), and ``paused``.
    """

    name: str
    max_attempts: int = 0
    lease_seconds: int = 0
    max_pending_seconds: int = 0
    parameters_schema: JsonObject | None = field(default=None)
    created_at: datetime | None = None
    updated_at: datetime | None = None
    failure_policy: FailurePolicy = ""
    max_failed_tasks: int = 0
    max_leased: int = 0
    max_leased_per_key: int = 0
    max_leases_per_second: float = 0.0
    leases_burst: int = 0
    paused: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Workload:
        """From its proto JSON."""
        return cls(name=_str(d, "name"), max_attempts=_int(d, "max_attempts"), lease_seconds=_int(d, "lease_seconds"),
                   max_pending_seconds=_int(d, "max_pending_seconds"),
                   parameters_schema=_obj(d, "parameters_schema"), created_at=_time(d, "created_at"),
                   updated_at=_time(d, "updated_at"), failure_policy=policy_of(d),
                   max_failed_tasks=_int(d, "max_failed_tasks"), max_leased=_int(d, "max_leased"),
                   max_leased_per_key=_int(d, "max_leased_per_key"),
                   max_leases_per_second=_float(d, "max_leases_per_second"), leases_burst=_int(d, "leases_burst"),
                   paused=_bool(d, "paused"))


@dataclass(frozen=True)
class KeyLimit:
    """One concurrency key's own cap, as :meth:`leasehold.Client.put_key_limit` set it."""

    workload: str
    key: str
    max_leased: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> KeyLimit:
        """From PutKeyLimitResponse JSON."""
        return cls(workload=_str(d, "name"), key=_str(d, "key"), max_leased=_int(d, "max_leased"))


@dataclass(frozen=True)
class WorkloadKey:
    """One concurrency key of a workload, counted when asked: its pending and leased tasks and its cap.

    ``key`` is ``""`` for the tasks of jobs without one; ``max_leased`` is the key's own cap when ``own_limit``
    (:meth:`leasehold.Client.put_key_limit`), else the workload's ``max_leased_per_key`` (``0``: no cap).
    """

    key: str
    pending: int = 0
    leased: int = 0
    max_leased: int = 0
    own_limit: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WorkloadKey:
        """From its proto JSON."""
        return cls(key=_str(d, "key"), pending=_int(d, "pending"), leased=_int(d, "leased"),
                   max_leased=_int(d, "max_leased"), own_limit=_bool(d, "own_limit"))


@dataclass(frozen=True)
class WorkloadKeys:
    """What :meth:`leasehold.Client.list_workload_keys` returns: the keys busiest first, and whether more qualified."""

    keys: list[WorkloadKey] = field(default_factory=list)
    truncated: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WorkloadKeys:
        """From ListWorkloadKeysResponse JSON."""
        return cls(keys=[WorkloadKey.from_json(k) for k in _list(d, "keys")], truncated=_bool(d, "truncated"))
