"""The client-parity scenario through the Python client, printed as one JSON line that
test/clients/client-parity.test.ts compares with the TypeScript client's (clients/typescript/test/parity-scenario.ts)
and the asyncio client's (parity_scenario_aio.py); "rpcs" lists every RPC the client and its worker sent.
Env: LEASEHOLD_URL, LEASEHOLD_TRANSPORT, PREFIX, RESET_URL."""

import hashlib
import json
import os
import threading
import time
import urllib.request

import leasehold.worker
from leasehold import Client, LeaseholdError, Result, TaskError, Worker
from leasehold.errors import NotFoundError
from parity_rpcs import NO_SUCH_ADJUSTMENT, SENT, Recording, sweep_calls, workflow_nodes

url = os.environ["LEASEHOLD_URL"]
transport = os.environ["LEASEHOLD_TRANSPORT"]
prefix = os.environ["PREFIX"]
MAIN, GATE, IDLE = f"{prefix}-main", f"{prefix}-gate", f"{prefix}-idle"


def sha(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


client = Client(url, transport=transport)  # type: ignore[arg-type]
client._transport = Recording(client._transport)  # type: ignore[assignment]
real_transport = leasehold.worker.make_transport
leasehold.worker.make_transport = lambda *a: Recording(real_transport(*a))  # type: ignore[assignment, return-value]
for w in (MAIN, GATE, IDLE):
    client.put_workload(w, max_attempts=1, lease_seconds=30)

gate = threading.Event()
worker = Worker(url, workloads=[MAIN, GATE], concurrency=4, transport=transport)  # type: ignore[arg-type]


@worker.handler(MAIN)
def main(task):  # type: ignore[no-untyped-def]
    if task.input_uri.endswith("/bad") and task.attempt == 1:
        raise TaskError(f"chunk {task.chunk_index} is bad", code="bad_chunk")
    task.progress(1.0, "done")
    return Result(uri=f"mem://{task.chunk_index}", sha256=sha(task.input_uri))


@worker.handler(GATE)
def gated(task):  # type: ignore[no-untyped-def]
    gate.wait(60)
    return Result(uri="mem://gate", sha256=sha(task.input_uri))


runner = threading.Thread(target=worker.run, daemon=True)
runner.start()
out: dict = {}


def results(job_id: str) -> list:
    return [m.chunk_index for m in client.results(job_id, page_size=2)]


uris = ["s3://in/0", "s3://in/1", "s3://in/bad", "s3://in/3"]
created = client.create_job(MAIN, tasks=[{"chunk_index": i, "input_uri": u, "input_sha256": sha(u)} for i, u in enumerate(uris)],
                            failure_policy="continue")
job_id = created.job.id
failed = client.wait(job_id, timeout=60)
snap = client.get_job(job_id)
f = snap.failure
out["continue"] = {"status": failed.status,
                   "failure": {"chunk": f.chunk_index if f else None, "code": f.error_code if f else None,
                               "message": f.error_message if f else None},
                   "results": results(job_id)}

retried = client.retry(job_id)
done = client.wait(job_id, timeout=60)
out["retry"] = {"retried": retried.retried_tasks, "status": done.status, "results": results(job_id)}

idle = client.create_job(IDLE, tasks=[{"chunk_index": 0, "input_uri": "s3://idle", "input_sha256": sha("idle")}])
out["cancel"] = {"status": client.cancel(idle.job.id, "not needed").status}

g = client.create_job(GATE, tasks=[{"chunk_index": 0, "input_uri": "s3://gate", "input_sha256": sha("gate")}])
waited: dict = {}
waiter = threading.Thread(target=lambda: waited.update(job=client.wait(g.job.id, timeout=60)), daemon=True)
waiter.start()
while client.get_job(g.job.id).job.status != "running":
    time.sleep(0.05)
urllib.request.urlopen(urllib.request.Request(os.environ["RESET_URL"], method="POST")).read()
gate.set()
waiter.join(60)
out["reconnect"] = {"status": waited["job"].status}

bad: dict = {}


def attempt(label: str, call) -> None:  # type: ignore[no-untyped-def]
    try:
        call()
        bad[label] = "ok"
    except LeaseholdError as e:
        bad[label] = {"code": e.code, "fields": sorted(v.field for v in e.violations), "reason": e.reason}


attempt("empty input_uri", lambda: client.create_job(MAIN, tasks=[{"chunk_index": 0, "input_uri": "", "input_sha256": "x"}]))
attempt("job id not a uuid", lambda: client.get_job("not-a-uuid"))
attempt("unknown job", lambda: client.get_job("00000000-0000-0000-0000-000000000000"))
attempt("unknown workload", lambda: client.create_job(f"{prefix}-nope", tasks=[{"chunk_index": 0, "input_uri": "s3://x",
                                                                                 "input_sha256": sha("x")}]))
attempt("retry of a completed job", lambda: client.retry(g.job.id))
out["bad"] = bad

# The calls the scenario made no use of, so every RPC is sent once; then the settlement of the billed job.
for name, args, kwargs in sweep_calls(prefix, IDLE):
    billed = getattr(client, name)(*args, **kwargs)
client.cancel(billed.job.id)
assert [j.id for j in client.list_settlements(account=f"{prefix}-acct")] == [billed.job.id]
client.settle_job(billed.job.id, f"{prefix}-invoice", 0)
assert list(client.list_adjustments(account=f"{prefix}-acct")) == []
try:
    client.settle_adjustment(NO_SUCH_ADJUSTMENT, f"{prefix}-adjustment", 0)
    raise AssertionError("an adjustment that does not exist was settled")
except NotFoundError:
    pass
client.get_task(next(iter(client.list_tasks(idle.job.id))).task.id)
assert idle.job.id in [j.id for j in client.list_jobs(workload=IDLE)]
# The workflow calls: nobody works on IDLE, so the workflow stands until it is cancelled.
wf = client.create_workflow(workflow_nodes(IDLE), name=f"{prefix}-wf")
assert [n.status for n in client.get_workflow(wf.id).nodes] == ["pending", "waiting"]
assert wf.id in [w.id for w in client.list_workflows()]
assert client.cancel_workflow(wf.id).cancelled_nodes == 2
assert [u.snapshot.status for u in client.watch_workflow(wf.id, timeout=30) if u.snapshot] == ["cancelled"]
assert client.retry_workflow(wf.id).retried_nodes == 2
client.cancel_workflow(wf.id)
out["rpcs"] = sorted(SENT)

worker.stop()
runner.join(60)
client.close()
print(json.dumps(out))
