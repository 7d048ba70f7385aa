"""Workflows: jobs created together in one call, each a named node, with the edges between them.

:class:`Node` is what :meth:`leasehold.Client.create_workflow` takes for each node (a job, as ``create_job``
takes it, and the nodes it runs after); :class:`Workflow` with its :class:`WorkflowNode` s is what the
workflow calls answer, :class:`WorkflowUpdate` one message of ``watch_workflow``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from datetime import datetime
from typing import Any, cast

from ._read import _int, _list, _msg, _str, _time, field_of
from .accounts import Billing
from .models import (
    Dependency,
    DependencyPolicy,
    FailurePolicy,
    JobStatus,
    TaskSpec,
    _job_status,
    dependency_policy_of,
)

__all__ = [
    "CancelledWorkflow",
    "Node",
    "NodeDependency",
    "RetriedWorkflow",
    "Workflow",
    "WorkflowEvent",
    "WorkflowNode",
    "WorkflowNodeCounts",
    "WorkflowUpdate",
]

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class NodeDependency:
    """An edge: the node named runs before the node that lists it. ``optional`` as :class:`Dependency`'s."""

    node: str
    optional: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> NodeDependency:
        """From its proto JSON."""
        return cls(node=_str(d, "node"), optional=bool(field_of(d, "optional", False)))


@dataclass(frozen=True)
class Node:
    """One node of a workflow as :meth:`leasehold.Client.create_workflow` takes it: a job and what it runs after.

    The fields are :meth:`~leasehold.Client.create_job`'s (a node's account and idempotency key are the
    workflow's). ``after`` lists the nodes it runs after by name (or :class:`NodeDependency` for an optional
    one), and may name jobs outside the workflow too (:class:`~leasehold.models.Dependency`);
    ``dependency_policy`` applies to them all.

    Example::

        Node("stitch", input_uri="s3://out/mesh-001/", input_sha256=sha, after=["chunks"])
        Node("report", input_uri=uri, input_sha256=sha, after=["stitch", NodeDependency("lint", optional=True)])
    """

    workload: str
    _: KW_ONLY
    tasks: Sequence[TaskSpec | Mapping[str, Any]] | None = None
    input_uri: str | None = None
    input_sha256: str | None = None
    parameters: Mapping[str, Any] | None = None
    after: Sequence[str | NodeDependency | Dependency] = ()
    dependency_policy: DependencyPolicy | None = None
    priority: int | None = None
    max_attempts: int | None = None
    failure_policy: FailurePolicy | None = None
    max_failed_tasks: int | None = None
    concurrency_key: str | None = None
    required_labels: Mapping[str, str] | None = None
    run_at: datetime | str | None = None
    finalizer: Mapping[str, Any] | None = None
    billing: Billing | Mapping[str, Any] | None = None


@dataclass(frozen=True)
class WorkflowNodeCounts:
    """A workflow's nodes counted by status (``scheduled``: pending with a ``run_at`` still ahead)."""

    waiting: int = 0
    pending: int = 0
    running: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    scheduled: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> WorkflowNodeCounts:
        """From its proto JSON (missing counts are 0)."""
        d = d or {}
        return cls(*(_int(d, n) for n in ("waiting", "pending", "running", "completed", "failed", "cancelled",
                                          "scheduled")))


@dataclass(frozen=True)
class WorkflowNode:
    """A node of a workflow as it is now: its job (``job_id``, for ``get_job``, ``watch``, ``results``) and status.

    ``status`` is its job's (``waiting`` while its parents are not final); ``after`` its edges as created;
    ``waiting_parents`` the parents not final yet (jobs outside the workflow included); ``cancel_reason`` why it
    was cancelled (``cancel_workflow``'s reason, or the parent whose end cancelled it).
    """

    name: str
    job_id: str
    status: JobStatus
    workload: str = ""
    after: list[NodeDependency] = field(default_factory=list)
    dependency_policy: DependencyPolicy = ""
    waiting_parents: int = 0
    total_tasks: int = 0
    completed_tasks: int = 0
    cancel_reason: str = ""
    completed_at: datetime | None = None

    @property
    def finished(self) -> bool:
        """Whether the node's job reached a final status."""
        return self.status in ("completed", "failed", "cancelled")

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WorkflowNode:
        """From its proto JSON."""
        return cls(
            name=_str(d, "name"), job_id=_str(d, "job_id"), status=_job_status(d, "status"),
            workload=_str(d, "workload"),
            after=[NodeDependency.from_json(a) for a in _list(d, "after") if isinstance(a, Mapping)],
            dependency_policy=dependency_policy_of(d), waiting_parents=_int(d, "waiting_parents"),
            total_tasks=_int(d, "total_tasks"), completed_tasks=_int(d, "completed_tasks"),
            cancel_reason=_str(d, "cancel_reason"), completed_at=_time(d, "completed_at"),
        )


@dataclass(frozen=True)
class Workflow:
    """A workflow: its nodes (in the order they were given; empty in ``list_workflows``) and their counts.

    ``status`` is derived from the nodes': ``pending`` until one starts, ``running`` while any is unfinished,
    then ``completed`` when all completed, else ``failed`` when any failed, else ``cancelled``.

    Example::

        wf = client.wait_workflow(workflow_id)
        for node in wf.nodes:
            print(node.name, node.status, node.completed_tasks, node.total_tasks)
        stitched = list(client.results(wf.node("stitch").job_id))
    """

    id: str
    status: JobStatus
    name: str = ""
    nodes: list[WorkflowNode] = field(default_factory=list)
    node_counts: WorkflowNodeCounts = field(default_factory=WorkflowNodeCounts)
    idempotency_key: str = ""
    created_at: datetime | None = None
    #: When its last node became final; ``None`` while any is unfinished.
    completed_at: datetime | None = None
    #: The schedule that created it and the tick; ``""`` and ``None`` when none.
    schedule_name: str = ""
    schedule_fire_time: datetime | None = None
    account: str = ""

    @property
    def finished(self) -> bool:
        """Whether every node reached a final status."""
        return self.status in ("completed", "failed", "cancelled")

    def node(self, name: str) -> WorkflowNode:
        """The node named ``name``; :class:`KeyError` when the workflow has none (or its nodes were not read)."""
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Workflow:
        """From its proto JSON."""
        return cls(
            id=_str(d, "id"), status=_job_status(d, "status"), name=_str(d, "name"),
            nodes=[WorkflowNode.from_json(n) for n in _list(d, "nodes") if isinstance(n, Mapping)],
            node_counts=WorkflowNodeCounts.from_json(cast("Mapping[str, Any] | None", field_of(d, "node_counts"))),
            idempotency_key=_str(d, "idempotency_key"), created_at=_time(d, "created_at"),
            completed_at=_time(d, "completed_at"), schedule_name=_str(d, "schedule_name"),
            schedule_fire_time=_time(d, "schedule_fire_time"), account=_str(d, "account"),
        )


@dataclass(frozen=True)
class WorkflowEvent:
    """A node's status change, as it committed: ``status`` after it and ``previous_status`` before."""

    id: int
    node: str
    job_id: str
    status: JobStatus
    previous_status: JobStatus = ""
    created_at: datetime | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WorkflowEvent:
        """From its proto JSON."""
        return cls(id=_int(d, "id"), node=_str(d, "node"), job_id=_str(d, "job_id"), status=_job_status(d, "status"),
                   previous_status=_job_status(d, "previous_status"), created_at=_time(d, "created_at"))


@dataclass(frozen=True)
class WorkflowUpdate:
    """One message of :meth:`leasehold.Client.watch_workflow`: the first carries ``snapshot``, every later one ``event``."""

    snapshot: Workflow | None = None
    event: WorkflowEvent | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WorkflowUpdate:
        """From WatchWorkflowResponse JSON."""
        snap = field_of(d, "snapshot")
        if snap is not None:
            return cls(snapshot=Workflow.from_json(_msg(snap, "workflow")))
        return cls(event=WorkflowEvent.from_json(_msg(d, "event")))


@dataclass(frozen=True)
class CancelledWorkflow:
    """What :meth:`leasehold.Client.cancel_workflow` returns: the workflow after the cancel, and the nodes it cancelled."""

    workflow: Workflow
    cancelled_nodes: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CancelledWorkflow:
        """From CancelWorkflowResponse JSON."""
        return cls(workflow=Workflow.from_json(_msg(d, "workflow")), cancelled_nodes=_int(d, "cancelled_nodes"))


@dataclass(frozen=True)
class RetriedWorkflow:
    """What :meth:`leasehold.Client.retry_workflow` returns: the workflow, the nodes reopened and their tasks put back."""

    workflow: Workflow
    retried_nodes: int
    retried_tasks: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RetriedWorkflow:
        """From RetryWorkflowResponse JSON."""
        return cls(workflow=Workflow.from_json(_msg(d, "workflow")), retried_nodes=_int(d, "retried_nodes"),
                   retried_tasks=_int(d, "retried_tasks"))
