"""The submitter's calls on workflows: each function is one method of both clients, as in ``_calls``.

``watch_workflow`` and ``wait_workflow`` are the clients' own (a stream each reads with its own I/O);
their request is :func:`watch_workflow_request`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from ._calls import Paged, Unary, _in, job_json
from .errors import FieldViolation, invalid_request
from .models import Dependency
from .workflows import CancelledWorkflow, Node, NodeDependency, RetriedWorkflow, Workflow

__all__: list[str] = []

JsonObject = dict[str, Any]

_NODE_FIELDS = tuple(f.name for f in fields(Node) if f.name != "_")


def _node_of(name: str, spec: Node | Mapping[str, Any], at: str, bad: list[FieldViolation]) -> Node | None:
    """A node given as a :class:`Node` or as a mapping of its fields (``{"workload": ..., "after": [...]}``)."""
    if isinstance(spec, Node):
        return spec
    if not isinstance(spec, Mapping):
        bad.append(FieldViolation(at, f"must be a Node or a mapping of its fields, not {type(spec).__name__}"))
        return None
    unknown = [k for k in spec if k not in _NODE_FIELDS]
    for k in unknown:
        bad.append(FieldViolation(f"{at}.job.{k}", f"unknown field (known: {', '.join(_NODE_FIELDS)})"))
    if not isinstance(spec.get("workload"), str):
        bad.append(FieldViolation(f"{at}.job.workload", "is required (a string)"))
        return None
    if unknown:
        return None
    return Node(**spec)


def node_json(name: str, spec: Node | Mapping[str, Any], i: int, bad: list[FieldViolation]) -> JsonObject:
    """One node of CreateWorkflow in proto JSON: its name, its job, and its edges (parents outside go in its job)."""
    at = f"nodes[{i}]"
    node = _node_of(name, spec, at, bad)
    if node is None:
        return {"name": name}
    edges: list[JsonObject] = []
    outside: list[Dependency] = []
    if isinstance(node.after, (str, bytes)):
        bad.append(FieldViolation(f"{at}.after", "must be a list of node names, not a string"))
    else:
        for k, dep in enumerate(node.after):
            if isinstance(dep, Dependency):
                outside.append(dep)
            elif isinstance(dep, NodeDependency):
                edges.append({"node": dep.node, "optional": True} if dep.optional else {"node": dep.node})
            elif isinstance(dep, str):
                edges.append({"node": dep})
            else:
                bad.append(FieldViolation(f"{at}.after[{k}]", "must be a node's name, a NodeDependency or a Dependency"))
    job = job_json(
        node.workload, bad, at=f"{at}.job.", tasks=node.tasks, input_uri=node.input_uri,
        input_sha256=node.input_sha256, parameters=node.parameters, priority=node.priority,
        max_attempts=node.max_attempts, failure_policy=node.failure_policy, max_failed_tasks=node.max_failed_tasks,
        concurrency_key=node.concurrency_key, required_labels=node.required_labels, run_at=node.run_at,
        finalizer=node.finalizer, billing=node.billing, after=outside or None,
        dependency_policy=node.dependency_policy,
    )
    out: JsonObject = {"name": name, "job": job}
    if edges:
        out["after"] = edges
    return out


def create_workflow(nodes: Mapping[str, Node | Mapping[str, Any]], *, name: str | None = None,
                    idempotency_key: str | None = None, account: str | None = None) -> Unary[Workflow]:
    """Creates a workflow in one call and returns it, with each node's job id and status.

    ``nodes`` by name, each a :class:`~leasehold.workflows.Node` (a job and the nodes it runs after), are written
    in one transaction. Nodes without unfinished parents are pending at once, the others ``waiting`` until their parents end (as
    ``create_job``'s ``after``). The workflow is checked whole: an unknown workload
    (:class:`~leasehold.errors.NotFoundError`), an edge to an unknown node, a cycle or more than 1,000 nodes
    (:class:`~leasehold.errors.InvalidArgumentError`, naming the field: ``nodes[2].after[0].node``), an account's
    quota passed by the nodes' tasks together (:class:`~leasehold.errors.ResourceExhaustedError`): nothing is
    written. ``name`` is a label for people; with ``idempotency_key`` the same request again answers the
    workflow created the first time; ``account`` is every node's (a token bound to an account creates under it).
    A node may be a mapping of :class:`~leasehold.workflows.Node`'s fields too (a pipeline read from a file).

    Example::

        wf = client.create_workflow({
            "chunks": Node("scimesh", tasks=[TaskSpec(i, uris[i], shas[i]) for i in range(20)]),
            "stitch": Node("stitch", input_uri="s3://out/mesh-001/", input_sha256=sha, after=["chunks"]),
            "report": Node("report", input_uri="s3://out/mesh-001/", input_sha256=sha, after=["stitch"]),
        }, name="mesh-001")
        wf = client.wait_workflow(wf.id)
    """
    bad: list[FieldViolation] = []
    req: JsonObject = {"nodes": [node_json(n, spec, i, bad) for i, (n, spec) in enumerate(nodes.items())]}
    if name:
        req["name"] = name
    if idempotency_key:
        req["idempotency_key"] = idempotency_key
    if account:
        req["account"] = account
    if bad:
        raise invalid_request("CreateWorkflow", bad)
    return Unary("CreateWorkflow", req, _in("workflow", Workflow.from_json))


def get_workflow(workflow_id: str) -> Unary[Workflow]:
    """The workflow with every node's status, task counts and job; :class:`~leasehold.errors.NotFoundError` when unknown."""
    return Unary("GetWorkflow", {"workflow_id": workflow_id}, _in("workflow", Workflow.from_json))


def list_workflows(*, account: str | None = None, schedule_name: str | None = None,
                   page_size: int | None = None) -> Paged[Workflow]:
    """Iterates over workflows, newest first, across every page, without their nodes (``node_counts`` says how they stand).

    ``account``: only its workflows; ``schedule_name``: only those that schedule created.
    """
    req: JsonObject = {}
    if account:
        req["account"] = account
    if schedule_name:
        req["schedule_name"] = schedule_name
    return Paged("ListWorkflows", req, "workflows", Workflow.from_json, page_size)


def cancel_workflow(workflow_id: str, reason: str | None = None) -> Unary[CancelledWorkflow]:
    """Cancels every node that is not final (waiting, pending or running), in one transaction; final nodes stay.

    Returns the workflow after it with ``cancelled_nodes``; cancelling a finished workflow changes nothing.
    """
    req: JsonObject = {"workflow_id": workflow_id}
    if reason:
        req["reason"] = reason
    return Unary("CancelWorkflow", req, CancelledWorkflow.from_json)


def retry_workflow(workflow_id: str, *, max_attempts: int | None = None) -> Unary[RetriedWorkflow]:
    """Runs the failed and cancelled nodes again, with every node downstream of them that did not complete.

    Their failed and cancelled tasks get fresh attempts (``max_attempts`` of them, else the workload's), and each
    node waits again for its parents (or is pending at once when they are final); completed nodes keep their
    results. A workflow with nothing to retry raises :class:`~leasehold.errors.FailedPreconditionError`.
    """
    req: JsonObject = {"workflow_id": workflow_id}
    if max_attempts is not None:
        req["max_attempts"] = max_attempts
    return Unary("RetryWorkflow", req, RetriedWorkflow.from_json)


def watch_workflow_request(workflow_id: str, after_event_id: int = 0) -> JsonObject:
    """WatchWorkflow's request (the stream both clients read with their own I/O)."""
    req: JsonObject = {"workflow_id": workflow_id}
    if after_event_id:
        req["after_event_id"] = str(after_event_id)
    return req

