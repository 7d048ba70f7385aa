"""leasehold.aio.AsyncClient against a live coordinator, over both transports: the sync Client's calls as
coroutines, its answers and its exceptions, and every RPC a submitter, an admin or a settler makes."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from conftest import Env

from leasehold import (
    AlreadyExistsError,
    Client,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    TaskSpec,
    UnauthenticatedError,
)
from leasehold.aio import AsyncClient


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def specs(n: int) -> list[TaskSpec]:
    return [TaskSpec(i, f"s3://in/{i}", sha(str(i))) for i in range(n)]


@pytest.fixture
async def aclient(env: Env, transport: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(env.main.url, token=env.tokens.admin, transport=transport, timeout=40) as c:  # type: ignore[arg-type]
        yield c


def public(cls: type) -> dict[str, Any]:
    return {n: getattr(cls, n) for n in dir(cls) if not n.startswith("_")}


def test_every_client_method_has_an_async_twin_with_the_same_arguments() -> None:
    sync, aio = public(Client), public(AsyncClient)
    assert sorted(sync) == sorted(aio)
    for name, method in sync.items():
        twin = aio[name]
        params = list(inspect.signature(method).parameters.values())
        twin_params = list(inspect.signature(twin).parameters.values())
        assert [(p.name, p.kind, p.default, p.annotation) for p in params] == \
               [(p.name, p.kind, p.default, p.annotation) for p in twin_params], name
        if inspect.isgeneratorfunction(method):
            assert inspect.isasyncgenfunction(twin), name
        else:
            assert inspect.iscoroutinefunction(twin), name


async def test_create_get_idempotency_and_errors(aclient: AsyncClient, workload: Callable[..., str]) -> None:
    w = workload()
    key = f"key-{uuid.uuid4()}"
    created = await aclient.create_job(w, tasks=specs(3), parameters={"camelCase": 1, "frames": 240.0}, idempotency_key=key)
    assert (created.job.status, created.job.workload) == ("pending", w)
    assert created.job.parameters == {"camelCase": 1, "frames": 240}
    assert type(created.job.parameters["frames"]) is int  # the same number on both transports
    assert [t.chunk_index for t in created.tasks] == [0, 1, 2]
    again = await aclient.create_job(w, tasks=specs(3), parameters={"camelCase": 1, "frames": 240.0}, idempotency_key=key)
    assert again.job.id == created.job.id
    with pytest.raises(AlreadyExistsError) as conflict:
        await aclient.create_job(w, tasks=specs(4), idempotency_key=key)
    assert conflict.value.request_id
    snap = await aclient.get_job(created.job.id)
    assert (snap.total_tasks, snap.task_counts.pending, snap.progress) == (3, 3, 0.0)
    detail = await aclient.get_task(created.tasks[1].id)
    assert (detail.task.chunk_index, detail.task.status, detail.attempts) == (1, "pending", [])
    with pytest.raises(NotFoundError) as missing:
        await aclient.get_job(str(uuid.uuid4()))
    assert (missing.value.code, bool(missing.value.request_id)) == ("not_found", True)
    with pytest.raises(InvalidArgumentError) as bad:
        await aclient.create_job(w, tasks=[{"chunk_index": 0, "input_uri": "s3://x", "input_sha": "x"}])
    assert [v.field for v in bad.value.violations] == ["tasks[0].input_sha"]  # refused before it is sent
    with pytest.raises(InvalidArgumentError) as server_bad:
        await aclient.create_job(w, tasks=[TaskSpec(0, "s3://in/0", "not-a-sha")])
    assert [v.field for v in server_bad.value.violations] == ["tasks[0].input_sha256"]
    basic = await aclient.create_job(w, tasks=specs(2), view="basic")  # the job alone
    assert (basic.job.workload, basic.tasks) == (w, [])
    assert (await aclient.get_job(basic.job.id)).total_tasks == 2


async def test_lists_cancel_retry_and_concurrent_calls(aclient: AsyncClient, workload: Callable[..., str]) -> None:
    w = workload()
    # One client, many coroutines at once (a gateway's requests).
    jobs = [c.job for c in await asyncio.gather(*(aclient.create_job(w, tasks=specs(2)) for _ in range(3)))]
    with pytest.raises(FailedPreconditionError):
        await aclient.retry(jobs[0].id)
    cancelled = await aclient.cancel(jobs[0].id, reason="changed my mind")
    assert (cancelled.status, cancelled.cancel_reason) == ("cancelled", "changed my mind")
    assert [j.id async for j in aclient.list_jobs(workload=w, status="cancelled")] == [jobs[0].id]
    listed = [j async for j in aclient.list_jobs(workload=w, page_size=1)]  # every page, newest first
    assert sorted(j.id for j in listed) == sorted(j.id for j in jobs)
    assert [j.created_at for j in listed] == sorted((j.created_at for j in listed), reverse=True)
    tasks = [d.task.chunk_index async for d in aclient.list_tasks(jobs[0].id, status="cancelled", page_size=1)]
    assert tasks == [0, 1]
    retried = await aclient.retry(jobs[0].id, max_attempts=2)
    assert (retried.retried_tasks, retried.job.status) == (2, "pending")


async def test_a_finished_jobs_watch_ends_and_wait_returns(aclient: AsyncClient, workload: Callable[..., str]) -> None:
    w = workload()
    job = (await aclient.create_job(w, tasks=specs(1))).job
    await aclient.cancel(job.id)
    updates = [u async for u in aclient.watch(job.id, timeout=30)]
    assert updates[0].snapshot is not None and updates[0].snapshot.job.status == "cancelled"
    assert (await aclient.wait(job.id, timeout=30)).status == "cancelled"
    assert [r async for r in aclient.results(job.id)] == []


async def test_tokens_are_checked(env: Env, transport: str) -> None:
    async with AsyncClient(env.main.url, token="not-a-token", transport=transport) as c:  # type: ignore[arg-type]
        with pytest.raises(UnauthenticatedError):
            await c.get_job(str(uuid.uuid4()))
    async with AsyncClient(env.main.url, token=env.tokens.worker, transport=transport) as c:  # type: ignore[arg-type]
        with pytest.raises(PermissionDeniedError):
            await c.create_job("anything", input_uri="s3://x", input_sha256=sha("x"))


async def test_the_admin_and_settlement_calls(aclient: AsyncClient, transport: str) -> None:
    w = f"aio_admin_{transport}_{uuid.uuid4().hex[:6]}"
    workload = await aclient.put_workload(w, max_attempts=2, lease_seconds=30, max_leased_per_key=2)
    assert (workload.name, workload.max_leased_per_key) == (w, 2)
    assert w in [x.name for x in await aclient.list_workloads()]
    limit = await aclient.put_key_limit(w, "premium", 5)
    assert (limit.workload, limit.key, limit.max_leased) == (w, "premium", 5)
    await aclient.create_job(w, tasks=specs(2), concurrency_key="premium")
    keys = await aclient.list_workload_keys(w)
    assert [(k.key, k.pending, k.max_leased, k.own_limit) for k in keys.keys] == [("premium", 2, 5, True)]
    assert not keys.truncated
    assert (await aclient.pause(w)).paused and not (await aclient.resume(w)).paused
    with pytest.raises(NotFoundError):
        await aclient.pause(f"{w}_nope")

    name = f"aio-{transport}-{uuid.uuid4().hex[:6]}"
    template = {"workload": w, "input_uri": "s3://x", "input_sha256": sha("x")}
    schedule = await aclient.put_schedule(name, "0 3 * * *", template, timezone="Europe/Berlin", overlap="skip")
    assert (schedule.name, schedule.timezone, schedule.overlap, len(schedule.next_fire_times) > 0) == \
           (name, "Europe/Berlin", "skip", True)
    assert (await aclient.get_schedule(name)).cron == "0 3 * * *"
    assert name in [s.name for s in await aclient.list_schedules()]
    assert (await aclient.pause_schedule(name)).paused
    assert not (await aclient.resume_schedule(name)).paused
    assert (await aclient.delete_schedule(name)).name == name
    with pytest.raises(NotFoundError):
        await aclient.get_schedule(name)

    account = f"acct-{transport}-{uuid.uuid4().hex[:6]}"
    assert (await aclient.put_account(account, max_pending_tasks=10, priority=3)).priority == 3
    assert (await aclient.get_account(account)).max_pending_tasks == 10
    assert account in [a.name for a in await aclient.list_accounts()]
    job = (await aclient.create_job(w, tasks=specs(1), account=account,
                                    billing={"reserved_units": 100, "billing_key": "order-1"})).job
    await aclient.cancel(job.id)
    unsettled = [j.id async for j in aclient.list_settlements(account=account)]
    assert unsettled == [job.id]
    settled = await aclient.settle_job(job.id, "invoice-1", 0)
    assert settled.settlement is not None and settled.settlement.settlement_key == "invoice-1"
    assert [j async for j in aclient.list_settlements(account=account)] == []
    usage = await aclient.get_account_usage(account)
    assert usage.account == account
