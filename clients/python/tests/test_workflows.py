"""Workflows and jobs with parents through the clients (sync and asyncio), against a live coordinator, over both
transports: a three-stage pipeline created in one call and run by a worker whose later stages read their inputs
from ``task.parents``, watched and waited for; cancel and retry of a workflow; ``create_job(after=...)``; and the
requests refused before anything is sent.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import uuid
from collections.abc import Callable

import pytest
from conftest import Env, wait_for

from leasehold import (
    Client,
    Dependency,
    FailedPreconditionError,
    InvalidArgumentError,
    JobParent,
    Node,
    NodeDependency,
    NotFoundError,
    Result,
    Task,
    TaskSpec,
    Worker,
)
from leasehold.aio import AsyncClient


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def pipeline(chunks: str, stitch: str, report: str, n: int = 3) -> dict[str, Node]:
    """The spec's pipeline: n chunks, stitched into one, then reported."""
    return {
        "chunks": Node(chunks, tasks=[TaskSpec(i, f"s3://in/{i}", sha(str(i))) for i in range(n)]),
        "stitch": Node(stitch, input_uri="s3://out/stitched", input_sha256=sha("stitch"), after=["chunks"]),
        "report": Node(report, input_uri="s3://out/report", input_sha256=sha("report"), after=["stitch"]),
    }


def test_a_pipeline_runs_in_order_and_each_stage_reads_its_parents_from_the_task(
        admin: Client, workload: Callable[..., str], env: Env, transport: str) -> None:
    chunks, stitch, report = workload(max_attempts=1), workload(max_attempts=1), workload(max_attempts=1)
    created = admin.create_workflow(pipeline(chunks, stitch, report), name=f"mesh-{transport}")
    assert created.name == f"mesh-{transport}"
    assert [(n.name, n.status, n.workload, n.total_tasks) for n in created.nodes] == [
        ("chunks", "pending", chunks, 3), ("stitch", "waiting", stitch, 1), ("report", "waiting", report, 1)]
    assert created.node("stitch").after[0].node == "chunks"
    assert (created.node_counts.pending, created.node_counts.waiting) == (1, 2)
    waiting = admin.get_job(created.node("stitch").job_id).job
    assert (waiting.status, waiting.workflow_id, waiting.workflow_node, waiting.waiting_parents) == \
        ("waiting", created.id, "stitch", 1)
    assert [(p.job_id, p.node) for p in waiting.parents] == [(created.node("chunks").job_id, "chunks")]
    assert waiting.dependency_policy == "all_completed"

    seen: dict[str, list[JobParent]] = {}
    stitched_from: list[str] = []
    worker = Worker(env.main.url, workloads=[chunks, stitch, report], token=env.tokens.worker,
                    transport=transport, worker_id=f"pyw-pipeline-{transport}", wait_seconds=1)  # type: ignore[arg-type]

    @worker.handler(chunks)
    def chunk(task: Task) -> Result:
        assert task.parents == []
        return Result(f"s3://out/chunk/{task.chunk_index}", sha(f"chunk-{task.chunk_index}"))

    @worker.handler(stitch)
    def stitch_them(task: Task) -> Result:
        seen["stitch"] = task.parents
        # A parent of many tasks: its results are read in chunk order.
        stitched_from.extend(m.result_uri for m in admin.results(task.parents[0].job_id))
        return Result("s3://out/stitched", sha("stitched"))

    @worker.handler(report)
    def report_it(task: Task) -> Result:
        seen["report"] = task.parents
        return Result("s3://out/report.pdf", sha("report"))

    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        done = admin.wait_workflow(created.id, timeout=60)
    finally:
        worker.stop()
        thread.join(30)
    assert done.status == "completed"
    assert [(n.name, n.status, n.completed_tasks) for n in done.nodes] == \
        [("chunks", "completed", 3), ("stitch", "completed", 1), ("report", "completed", 1)]
    assert done.completed_at is not None
    assert stitched_from == ["s3://out/chunk/0", "s3://out/chunk/1", "s3://out/chunk/2"]
    [parent] = seen["stitch"]
    assert (parent.job_id, parent.status, parent.node, parent.total_tasks, parent.completed_tasks, parent.result) == \
        (created.node("chunks").job_id, "completed", "chunks", 3, 3, None)
    [parent] = seen["report"]
    assert (parent.node, parent.status) == ("stitch", "completed")
    # A parent of one task hands its result to the next stage with the task itself.
    assert parent.result is not None and parent.result.result_uri == "s3://out/stitched"

    # A finished workflow's watch is its snapshot alone; the listing counts its nodes.
    updates = list(admin.watch_workflow(created.id, timeout=30))
    assert len(updates) == 1 and updates[0].snapshot is not None and updates[0].snapshot.status == "completed"
    listed = [w for w in admin.list_workflows(page_size=2) if w.id == created.id]
    assert len(listed) == 1 and listed[0].node_counts.completed == 3 and listed[0].nodes == []


def test_watch_streams_each_node_change_and_cancel_then_retry_reopen_the_nodes(
        admin: Client, workload: Callable[..., str], transport: str) -> None:
    idle = workload(max_attempts=1)
    wf = admin.create_workflow(pipeline(idle, idle, idle, n=1))
    events: list[tuple[str, str, str]] = []
    ready = threading.Event()

    def follow() -> None:
        for update in admin.watch_workflow(wf.id, timeout=60):
            if update.snapshot is not None:
                ready.set()
            elif update.event is not None:
                events.append((update.event.node, update.event.previous_status, update.event.status))

    watcher = threading.Thread(target=follow)
    watcher.start()
    assert ready.wait(30)
    cancelled = admin.cancel_workflow(wf.id, reason="not today")
    watcher.join(30)
    assert not watcher.is_alive()
    assert cancelled.cancelled_nodes == 3
    assert cancelled.workflow.status == "cancelled"
    assert {n.cancel_reason for n in cancelled.workflow.nodes} == {"not today"}
    assert sorted(events) == [("chunks", "pending", "cancelled"), ("report", "waiting", "cancelled"),
                              ("stitch", "waiting", "cancelled")]
    # Cancelling again changes nothing.
    assert admin.cancel_workflow(wf.id).cancelled_nodes == 0

    retried = admin.retry_workflow(wf.id)
    assert (retried.retried_nodes, retried.retried_tasks) == (3, 3)
    assert [(n.name, n.status) for n in retried.workflow.nodes] == \
        [("chunks", "pending"), ("stitch", "waiting"), ("report", "waiting")]
    admin.cancel_workflow(wf.id)
    with pytest.raises(NotFoundError):
        admin.get_workflow(str(uuid.uuid4()))


def test_create_job_after_waits_for_its_parents_and_a_failed_parent_cancels_it(
        admin: Client, workload: Callable[..., str]) -> None:
    w = workload(max_attempts=1)
    parent = admin.create_job(w, input_uri="s3://in/p", input_sha256=sha("p")).job
    other = admin.create_job(w, input_uri="s3://in/o", input_sha256=sha("o")).job
    child = admin.create_job(w, input_uri="s3://in/c", input_sha256=sha("c"),
                             after=[parent.id, Dependency(other.id, optional=True)]).job
    assert (child.status, child.waiting_parents, child.dependency_policy) == ("waiting", 2, "all_completed")
    assert [(p.job_id, p.optional) for p in child.parents] == [(parent.id, False), (other.id, True)]
    detail = admin.get_task(next(iter(admin.list_tasks(child.id))).task.id)
    assert (detail.task.status, detail.waiting_reason) == ("waiting", "parents")
    assert admin.get_job(child.id).task_counts.waiting == 1

    # The optional parent's end changes nothing; the required one's cancel cancels the child, naming it.
    admin.cancel(other.id)
    assert admin.get_job(child.id).job.status == "waiting"
    admin.cancel(parent.id)
    after = wait_for(lambda: (j := admin.get_job(child.id).job).status == "cancelled" and j, 10, "the child cancelled")
    assert parent.id in after.cancel_reason

    # all_final runs whatever the parents' ends; a required parent already cancelled is refused at once.
    runs = admin.create_job(w, input_uri="s3://in/r", input_sha256=sha("r"), after=[parent.id],
                            dependency_policy="all_final").job
    assert runs.status == "pending"
    with pytest.raises(FailedPreconditionError):
        admin.create_job(w, input_uri="s3://in/x", input_sha256=sha("x"), after=[parent.id])


def test_a_refused_workflow_names_the_node_and_writes_nothing(admin: Client, workload: Callable[..., str]) -> None:
    w = workload()
    before = sum(1 for _ in admin.list_workflows())
    with pytest.raises(InvalidArgumentError) as edge:
        admin.create_workflow({"a": Node(w, input_uri="s3://a", input_sha256=sha("a")),
                               "b": Node(w, input_uri="s3://b", input_sha256=sha("b"), after=["nope"])})
    assert [v.field for v in edge.value.violations] == ["nodes[1].after[0].node"]
    with pytest.raises(InvalidArgumentError) as cycle:
        admin.create_workflow({"a": Node(w, input_uri="s3://a", input_sha256=sha("a"), after=["b"]),
                               "b": Node(w, input_uri="s3://b", input_sha256=sha("b"), after=["a"])})
    assert cycle.value.violations
    # (An unknown workload is NOT_FOUND as create_job's is: the session's many workloads would make its list, in
    # the gRPC trailers, pass grpcio's 8 KB metadata limit this late in a run.)
    assert sum(1 for _ in admin.list_workflows()) == before


def test_a_node_the_client_cannot_send_is_refused_before_anything_is_sent(admin: Client) -> None:
    with pytest.raises(InvalidArgumentError) as bad:
        admin.create_workflow({
            "a": {"workload": "w", "priorty": 1},
            "b": Node("w", after="a"),
            "c": Node("w", parameters={"x": float("nan")}, after=[NodeDependency("a", optional=True)]),
        })
    assert [v.field for v in bad.value.violations] == ["nodes[0].job.priorty", "nodes[1].after", "nodes[2].job.parameters.x"]
    assert bad.value.request_id is None


def test_the_async_client_has_the_same_workflow_calls(env: Env, workload: Callable[..., str], transport: str) -> None:
    idle = workload(max_attempts=1)

    async def run() -> tuple[str, list[str], int, str]:
        async with AsyncClient(env.main.url, token=env.tokens.admin, transport=transport, timeout=40) as c:  # type: ignore[arg-type]
            wf = await c.create_workflow(pipeline(idle, idle, idle, n=2), idempotency_key=f"aio-{transport}")
            again = await c.create_workflow(pipeline(idle, idle, idle, n=2), idempotency_key=f"aio-{transport}")
            assert again.id == wf.id
            got = await c.get_workflow(wf.id)
            listed = [w.id async for w in c.list_workflows()]
            assert wf.id in listed
            await c.cancel_workflow(wf.id)
            done = await c.wait_workflow(wf.id, timeout=30)
            updates = [u async for u in c.watch_workflow(wf.id, timeout=30)]
            retried = await c.retry_workflow(wf.id, max_attempts=2)
            await c.cancel_workflow(wf.id)
            assert updates[0].snapshot is not None
            return got.status, [n.status for n in done.nodes], retried.retried_nodes, done.status

    assert asyncio.run(run()) == ("pending", ["cancelled"] * 3, 3, "cancelled")
