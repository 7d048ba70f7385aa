"""leasehold.aio.AsyncWorker against a live coordinator, over both transports: async and plain handlers,
progress, claim_next chaining, failures and usage, cancellation as asyncio.CancelledError, the drain, and
the start-up refusals; watched and read through the AsyncClient."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from conftest import Env

import leasehold.aio.worker as aio_worker_module
from leasehold import Result, RetryableError, Task, TaskError, TaskSpec, WorkerConfigError
from leasehold.aio import AsyncClient, AsyncTask, AsyncWorker
from leasehold.models import field_of


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def specs(n: int, per_chunk: Callable[[int], dict[str, Any]] | None = None) -> list[TaskSpec]:
    return [TaskSpec(i, f"s3://in/{i}", sha(str(i)), per_chunk(i) if per_chunk else None) for i in range(n)]


@pytest.fixture
async def aclient(env: Env, transport: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(env.main.url, token=env.tokens.admin, transport=transport, timeout=40) as c:  # type: ignore[arg-type]
        yield c


def make_worker(env: Env, transport: str, workloads: list[str], worker_id: str, **options: Any) -> AsyncWorker:
    return AsyncWorker(env.main.url, workloads=workloads, token=env.tokens.worker, transport=transport,  # type: ignore[arg-type]
                       worker_id=worker_id, wait_seconds=1, handle_signals=False, **options)


class Recorder:
    """The worker's transport, recording every call's method and request."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[tuple[str, dict[str, Any], dict[str, Any]]] = []

    async def call(self, method: str, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        answer: dict[str, Any] = await self.inner.call(method, request, timeout)
        self.calls.append((method, dict(request), answer))
        return answer

    def stream(self, method: str, request: dict[str, Any], timeout: float | None) -> Any:
        return self.inner.stream(method, request, timeout)

    async def close(self) -> None:
        await self.inner.close()

    def of(self, *methods: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        return [(req, ans) for m, req, ans in self.calls if m in methods]


def recording(monkeypatch: Any) -> list[Recorder]:
    made: list[Recorder] = []
    real = aio_worker_module.make_async_transport

    def make(*a: Any) -> Recorder:
        made.append(Recorder(real(*a)))
        return made[-1]

    monkeypatch.setattr(aio_worker_module, "make_async_transport", make)
    return made


async def test_async_and_plain_handlers_run_report_progress_and_chain_claims(
        env: Env, aclient: AsyncClient, workload: Callable[..., str], transport: str, monkeypatch: Any) -> None:
    w_async, w_sync = workload(lease_seconds=30), workload(lease_seconds=30)
    job_async = (await aclient.create_job(w_async, tasks=specs(40), parameters={"frames": 240})).job
    job_sync = (await aclient.create_job(w_sync, tasks=specs(3))).job
    made = recording(monkeypatch)
    worker = make_worker(env, transport, [w_async, w_sync], "pyw-aio-run", concurrency=4)
    running, peak, threads = [0], [0], set()

    @worker.handler(w_async)
    async def handle(task: AsyncTask) -> Result:
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        assert type(task.parameters["frames"]) is int
        if task.chunk_index == 0:
            await task.progress(0.5, "halfway")
        await asyncio.sleep(0.005)
        running[0] -= 1
        return Result(uri=f"mem://{task.chunk_index}", sha256=sha(str(task.chunk_index)), metrics={"lane": "async"})

    @worker.handler(w_sync)
    def handle_sync(task: Task) -> Result:
        threads.add(threading.current_thread().name)
        task.progress(1.0, "done")  # from a pool thread, sent by the loop
        return Result(uri=f"mem://sync/{task.chunk_index}", sha256=sha("s"), usage={"cpu_ms": 7})

    watch = asyncio.create_task(_collect(aclient, job_async.id))
    runner = asyncio.create_task(worker.run())
    assert (await aclient.wait(job_async.id, timeout=60)).status == "completed"
    assert (await aclient.wait(job_sync.id, timeout=60)).status == "completed"
    worker.stop()
    await asyncio.wait_for(runner, 60)

    assert worker.stats == {"claimed": 43, "completed": 43, "failed": 0, "dropped": 0, "released": 0}
    assert 1 <= peak[0] <= 4
    assert threads and all(t.startswith("leasehold-lane") for t in threads)
    assert [r.chunk_index async for r in aclient.results(job_async.id, page_size=7)] == list(range(40))
    assert (await aclient.get_job(job_sync.id)).job.usage == {"cpu_ms": 21}
    events = await watch
    progress = [(e.chunk_index, e.progress, e.message, e.worker_id) for e in events if e.kind == "task_progress"]
    assert progress == [(0, 0.5, "halfway", "pyw-aio-run")]
    assert events[-1].kind == "job_status" and events[-1].job_status == "completed"
    # Reports claim the next tasks: the first claim fills the lanes, the reports refill them; never more
    # held than lanes; no report carries a worker_id or a wait in its claim_next.
    [rec] = made
    reports = rec.of("CompleteTask", "CompleteTasks")
    assert sum(len(field_of(ans, "next_tasks") or []) for _, ans in reports) > 0
    for req, _ in reports:
        claim = req.get("claim_next")
        if claim is not None:
            assert "worker_id" not in claim and "wait_seconds" not in claim and 1 <= claim.get("max_tasks", 1) <= 4
    for req, _ in rec.of("ClaimTasks"):
        assert req["worker_id"] == "pyw-aio-run" and 1 <= req.get("max_tasks", 1) <= 4


async def _collect(aclient: AsyncClient, job_id: str) -> list[Any]:
    return [u.event async for u in aclient.watch(job_id, timeout=60) if u.event is not None]


async def test_exceptions_become_failures_with_their_usage(
        env: Env, aclient: AsyncClient, workload: Callable[..., str], transport: str) -> None:
    w = workload(lease_seconds=30, max_attempts=3)
    actions = ["raise", "retryable", "task_error", "not_a_result"]
    job = (await aclient.create_job(w, tasks=specs(4, lambda i: {"action": actions[i]}), failure_policy="continue")).job
    worker = make_worker(env, transport, [w], "pyw-aio-errors", concurrency=2)

    @worker.handler(w)
    async def handle(task: AsyncTask) -> Any:
        action = task.parameters["action"]
        if action == "raise":
            raise ValueError(f"chunk {task.chunk_index} is malformed")
        if action == "retryable" and task.attempt == 1:
            raise RetryableError("try again", retry_after=0, usage={"gpu_ms": 5})
        if action == "task_error":
            raise TaskError("no luck", code="no_luck", usage={"gpu_ms": 9})
        if action == "not_a_result":
            return "a string"
        return Result(uri="mem://ok", sha256=sha("ok"), usage={"gpu_ms": 1})

    runner = asyncio.create_task(worker.run())
    assert (await aclient.wait(job.id, timeout=60)).status == "failed"
    worker.stop()
    await asyncio.wait_for(runner, 60)
    by_chunk = {d.task.chunk_index: d.task async for d in aclient.list_tasks(job.id)}
    assert [(by_chunk[i].status, by_chunk[i].error_code) for i in range(4)] == [
        ("failed", "value_error"), ("completed", "retryable_error"), ("failed", "no_luck"), ("failed", "invalid_result")]
    assert by_chunk[0].error_message == "ValueError: chunk 0 is malformed"
    assert (await aclient.get_job(job.id)).job.usage == {"gpu_ms": 15}
    assert worker.stats == {"claimed": 5, "completed": 1, "failed": 4, "dropped": 0, "released": 0}


async def test_a_cancel_reaches_async_handlers_as_cancelled_error(
        env: Env, aclient: AsyncClient, workload: Callable[..., str], transport: str) -> None:
    # A 3 s lease: heartbeats every second, so the cancel arrives within about a second.
    w = workload(lease_seconds=3)
    job = (await aclient.create_job(w, tasks=specs(2))).job
    worker = make_worker(env, transport, [w], "pyw-aio-cancel", concurrency=2)
    started, seen = asyncio.Event(), []

    @worker.handler(w)
    async def handle(task: AsyncTask) -> Result:
        if len(seen) == 0:
            seen.append(("started", task.chunk_index))
        else:
            started.set()
        try:
            await asyncio.sleep(120)
        except asyncio.CancelledError:
            seen.append((task.chunk_index, task.cancelled, task.cancel_reason))
            if task.chunk_index == 0:
                raise  # stops: nothing is reported
            await asyncio.sleep(0.01)  # clean-up may still await
        return Result(uri=f"mem://{task.chunk_index}", sha256=sha("late"))  # chunk 1: kept, within the lease

    runner = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 30)
    await aclient.cancel(job.id, reason="user gave up")
    for _ in range(300):
        if len(seen) == 3:
            break
        await asyncio.sleep(0.05)
    worker.stop()
    await asyncio.wait_for(runner, 60)
    stopped = sorted(s for s in seen if s[0] != "started")
    assert [(c, flag, "was cancelled" in why) for c, flag, why in stopped] == [(0, True, True), (1, True, True)]
    assert (worker.stats["completed"], worker.stats["dropped"], worker.stats["failed"]) == (1, 1, 0)
    assert (await aclient.get_job(job.id)).job.status == "cancelled"
    assert [r.chunk_index async for r in aclient.results(job.id)] == [1]


async def test_a_drain_lets_handlers_finish_then_gives_the_rest_back(
        env: Env, aclient: AsyncClient, workload: Callable[..., str], transport: str) -> None:
    w = workload(lease_seconds=30)
    job = (await aclient.create_job(w, tasks=specs(2))).job
    worker = make_worker(env, transport, [w], "pyw-aio-drain", concurrency=2, drain_timeout=1)
    both, finish_quick = asyncio.Event(), asyncio.Event()
    begun: list[int] = []
    told: list[int] = []

    @worker.handler(w)
    async def handle(task: AsyncTask) -> Result:
        begun.append(task.chunk_index)
        if len(begun) == 2:
            both.set()
        try:
            if task.chunk_index == 0:
                await finish_quick.wait()  # finishes during the drain
            else:
                await asyncio.sleep(120)  # outlives the drain: given back, and cancelled
        except asyncio.CancelledError:
            told.append(task.chunk_index)
            raise
        return Result(uri="mem://0", sha256=sha("0"))

    runner = asyncio.create_task(worker.run())
    await asyncio.wait_for(both.wait(), 30)
    worker.stop()
    finish_quick.set()
    await asyncio.wait_for(runner, 60)
    assert told == [1]
    assert (worker.stats["completed"], worker.stats["released"]) == (1, 1)
    snap = await aclient.get_job(job.id)
    assert (snap.task_counts.completed, snap.task_counts.pending, snap.task_counts.leased) == (1, 1, 0)
    # Given back as retryable with no delay: the next worker gets it at once, on its next attempt.
    successor = make_worker(env, transport, [w], "pyw-aio-successor")
    successor.handler(w)(_quick)
    runner = asyncio.create_task(successor.run())
    assert (await aclient.wait(job.id, timeout=30)).status == "completed"
    successor.stop()
    await asyncio.wait_for(runner, 60)
    assert [t.task.attempt async for t in aclient.list_tasks(job.id)] == [1, 2]


async def _quick(task: AsyncTask) -> Result:
    return Result(uri=f"mem://{task.chunk_index}", sha256=sha(str(task.chunk_index)))


async def test_refusals_at_start_raise_worker_config_error(env: Env, workload: Callable[..., str], transport: str) -> None:
    w = workload()
    unknown = make_worker(env, transport, [f"{w}_nope"], "pyw-aio-unknown")
    unknown.handler(f"{w}_nope")(_quick)
    with pytest.raises(WorkerConfigError, match="refuses a workload") as e:
        await asyncio.wait_for(unknown.run(), 30)
    assert w in str(e.value)  # the workloads the coordinator knows are named
    outside = make_worker(env, transport, [w], "gpu-7")
    outside.handler(w)(_quick)
    with pytest.raises(WorkerConfigError, match=r"'gpu-7'.*prefix"):
        await asyncio.wait_for(outside.run(), 30)
    bad_token = AsyncWorker(env.main.url, workloads=[w], token="not-a-token", transport=transport,  # type: ignore[arg-type]
                            worker_id="pyw-1", handle_signals=False)
    bad_token.handler(w)(_quick)
    with pytest.raises(WorkerConfigError, match="refuses the token"):
        await asyncio.wait_for(bad_token.run(), 30)
    with pytest.raises(WorkerConfigError, match="no handler"):
        await make_worker(env, transport, [w], "pyw-aio-none").run()
    with pytest.raises(ValueError, match="worker_id"):
        AsyncWorker(env.main.url, workloads=[w], worker_id="has space")
