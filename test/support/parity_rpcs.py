"""Every RPC of the contract through the Python clients, for the client-parity scenarios (parity_scenario.py and
parity_scenario_aio.py): a recorder of the RPCs a client and its worker send, and the calls of a submitter, an
admin and a settler that the scenario itself does not make."""

from __future__ import annotations

import hashlib
from typing import Any

from leasehold import Billing, Node

SENT: set[str] = set()

#: An adjustment id no coordinator has: SettleAdjustment is sent, and answered NOT_FOUND.
NO_SUCH_ADJUSTMENT = "00000000-0000-4000-8000-000000000000"


class Recording:
    """A transport (sync or asyncio) that records each RPC's name before it goes out."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        SENT.add(method)
        return self.inner.call(method, *args, **kwargs)

    def stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        SENT.add(method)
        return self.inner.stream(method, *args, **kwargs)

    def close(self) -> Any:
        return self.inner.close()


def sha(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


def workflow_nodes(workload: str) -> dict[str, Node]:
    """A workflow of two nodes of ``workload`` (no worker takes it): the scenarios create, watch, cancel and retry it."""
    return {"first": Node(workload, input_uri="s3://wf/1", input_sha256=sha("wf1")),
            "second": Node(workload, input_uri="s3://wf/2", input_sha256=sha("wf2"), after=["first"])}


def sweep_calls(prefix: str, workload: str) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    """The client methods the scenario does not reach otherwise, with their arguments, in an order that works."""
    account, schedule = f"{prefix}-acct", f"{prefix}-sched"
    template = {"workload": workload, "input_uri": "s3://s", "input_sha256": sha("s")}
    return [
        ("list_workloads", (), {}),
        ("put_key_limit", (workload, "k", 2), {}),
        ("list_workload_keys", (workload,), {}),
        ("pause", (workload,), {}),
        ("resume", (workload,), {}),
        ("put_schedule", (schedule, "0 3 * * *", template), {}),
        ("get_schedule", (schedule,), {}),
        ("list_schedules", (), {}),
        ("pause_schedule", (schedule,), {}),
        ("resume_schedule", (schedule,), {}),
        ("delete_schedule", (schedule,), {}),
        ("put_account", (account,), {"max_pending_tasks": 10}),
        ("get_account", (account,), {}),
        ("list_accounts", (), {}),
        ("get_account_usage", (account,), {}),
        ("create_job", (workload,), {"input_uri": "s3://b", "input_sha256": sha("b"), "account": account,
                                     "billing": Billing(10, f"{prefix}-order")}),
    ]
