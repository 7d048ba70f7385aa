"""The client-parity scenario through leasehold.aio (AsyncClient and AsyncWorker), printed as one JSON line that
test/clients/client-parity.test.ts compares with the other clients' (parity_scenario.py tells the scenario);
"rpcs" lists every RPC the client and its worker sent. Env: LEASEHOLD_URL, LEASEHOLD_TRANSPORT, PREFIX, RESET_URL."""

import asyncio
import hashlib
import json
import os
import urllib.request

import leasehold.aio.worker
from leasehold import LeaseholdError, Result, TaskError
from leasehold.aio import AsyncClient, AsyncTask, AsyncWorker
from leasehold.errors import NotFoundError
from parity_rpcs import NO_SUCH_ADJUSTMENT, SENT, Recording, sweep_calls, workflow_nodes

url = os.environ["LEASEHOLD_URL"]
transport = os.environ["LEASEHOLD_TRANSPORT"]
prefix = os.environ["PREFIX"]
MAIN, GATE, IDLE = f"{prefix}-main", f"{prefix}-gate", f"{prefix}-idle"


def sha(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


async def scenario() -> dict:
    client = AsyncClient(url, transport=transport)  # type: ignore[arg-type]
    client._transport = Recording(client._transport)  # type: ignore[assignment]
    real_transport = leasehold.aio.worker.make_async_transport
    leasehold.aio.worker.make_async_transport = lambda *a: Recording(real_transport(*a))  # type: ignore[assignment, return-value]
    for w in (MAIN, GATE, IDLE):
        await client.put_workload(w, max_attempts=1, lease_seconds=30)

    gate = asyncio.Event()
    worker = AsyncWorker(url, workloads=[MAIN, GATE], concurrency=4, transport=transport, handle_signals=False)  # type: ignore[arg-type]

    @worker.handler(MAIN)
    async def main(task: AsyncTask) -> Result:
        if task.input_uri.endswith("/bad") and task.attempt == 1:
            raise TaskError(f"chunk {task.chunk_index} is bad", code="bad_chunk")
        await task.progress(1.0, "done")
        return Result(uri=f"mem://{task.chunk_index}", sha256=sha(task.input_uri))

    @worker.handler(GATE)
    async def gated(task: AsyncTask) -> Result:
        await asyncio.wait_for(gate.wait(), 60)
        return Result(uri="mem://gate", sha256=sha(task.input_uri))

    runner = asyncio.create_task(worker.run())
    out: dict = {}

    async def results(job_id: str) -> list:
        return [m.chunk_index async for m in client.results(job_id, page_size=2)]

    uris = ["s3://in/0", "s3://in/1", "s3://in/bad", "s3://in/3"]
    created = await client.create_job(MAIN, tasks=[{"chunk_index": i, "input_uri": u, "input_sha256": sha(u)}
                                                   for i, u in enumerate(uris)], failure_policy="continue")
    job_id = created.job.id
    failed = await client.wait(job_id, timeout=60)
    f = (await client.get_job(job_id)).failure
    out["continue"] = {"status": failed.status,
                       "failure": {"chunk": f.chunk_index if f else None, "code": f.error_code if f else None,
                                   "message": f.error_message if f else None},
                       "results": await results(job_id)}

    retried = await client.retry(job_id)
    done = await client.wait(job_id, timeout=60)
    out["retry"] = {"retried": retried.retried_tasks, "status": done.status, "results": await results(job_id)}

    idle = await client.create_job(IDLE, tasks=[{"chunk_index": 0, "input_uri": "s3://idle", "input_sha256": sha("idle")}])
    out["cancel"] = {"status": (await client.cancel(idle.job.id, "not needed")).status}

    g = await client.create_job(GATE, tasks=[{"chunk_index": 0, "input_uri": "s3://gate", "input_sha256": sha("gate")}])
    waiting = asyncio.create_task(client.wait(g.job.id, timeout=60))
    while (await client.get_job(g.job.id)).job.status != "running":
        await asyncio.sleep(0.05)
    await asyncio.to_thread(lambda: urllib.request.urlopen(urllib.request.Request(os.environ["RESET_URL"], method="POST")).read())
    gate.set()
    out["reconnect"] = {"status": (await waiting).status}

    bad: dict = {}

    async def attempt(label: str, call) -> None:  # type: ignore[no-untyped-def]
        try:
            await call()
            bad[label] = "ok"
        except LeaseholdError as e:
            bad[label] = {"code": e.code, "fields": sorted(v.field for v in e.violations), "reason": e.reason}

    await attempt("empty input_uri", lambda: client.create_job(MAIN, tasks=[{"chunk_index": 0, "input_uri": "",
                                                                              "input_sha256": "x"}]))
    await attempt("job id not a uuid", lambda: client.get_job("not-a-uuid"))
    await attempt("unknown job", lambda: client.get_job("00000000-0000-0000-0000-000000000000"))
    await attempt("unknown workload", lambda: client.create_job(f"{prefix}-nope", tasks=[
        {"chunk_index": 0, "input_uri": "s3://x", "input_sha256": sha("x")}]))
    await attempt("retry of a completed job", lambda: client.retry(g.job.id))
    out["bad"] = bad

    for name, args, kwargs in sweep_calls(prefix, IDLE):
        billed = await getattr(client, name)(*args, **kwargs)
    await client.cancel(billed.job.id)
    assert [j.id async for j in client.list_settlements(account=f"{prefix}-acct")] == [billed.job.id]
    await client.settle_job(billed.job.id, f"{prefix}-invoice", 0)
    assert [a async for a in client.list_adjustments(account=f"{prefix}-acct")] == []
    try:
        await client.settle_adjustment(NO_SUCH_ADJUSTMENT, f"{prefix}-adjustment", 0)
        raise AssertionError("an adjustment that does not exist was settled")
    except NotFoundError:
        pass
    await client.get_task([d async for d in client.list_tasks(idle.job.id)][0].task.id)
    assert idle.job.id in [j.id async for j in client.list_jobs(workload=IDLE)]
    # The workflow calls: nobody works on IDLE, so the workflow stands until it is cancelled.
    wf = await client.create_workflow(workflow_nodes(IDLE), name=f"{prefix}-wf")
    assert [n.status for n in (await client.get_workflow(wf.id)).nodes] == ["pending", "waiting"]
    assert wf.id in [w.id async for w in client.list_workflows()]
    assert (await client.cancel_workflow(wf.id)).cancelled_nodes == 2
    assert [u.snapshot.status async for u in client.watch_workflow(wf.id, timeout=30) if u.snapshot] == ["cancelled"]
    assert (await client.retry_workflow(wf.id)).retried_nodes == 2
    await client.cancel_workflow(wf.id)
    out["rpcs"] = sorted(SENT)

    worker.stop()
    await asyncio.wait_for(runner, 60)
    await client.close()
    return out


print(json.dumps(asyncio.run(scenario())))
