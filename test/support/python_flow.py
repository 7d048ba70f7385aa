"""Flow control through the leasehold package, as a user drives it: caps, pause, labels, waiting reasons.

Usage: python_flow.py URL TRANSPORT PREFIX
  URL: the coordinator (http://host:port); TRANSPORT: json or grpc; PREFIX: this run's workload names start with it.

Prints one JSON line per step ({"step": ..., ...facts}); test/clients/python-flow.test.ts checks them against the
database. Waits are on conditions (polled every 20 ms), each bounded; a bound that passes fails the run.
Workers run in threads of this process and are stopped (drained) before the next step.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from leasehold import (
    Client,
    LeaseholdError,
    Result,
    Task,
    TaskSpec,
    Worker,
    WorkerConfigError,
)

URL, TRANSPORT, PREFIX = sys.argv[1], sys.argv[2], sys.argv[3]
assert TRANSPORT in ("json", "grpc")
SHA = hashlib.sha256(b"chunk").hexdigest()
client = Client(URL, transport=TRANSPORT)  # type: ignore[arg-type]


def emit(step: str, **facts: Any) -> None:
    print(json.dumps({"step": step, **facts}, default=str), flush=True)


def wait_until(cond: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{TRANSPORT}: waited {timeout} s for {what}")
        time.sleep(0.02)


def error_facts(e: LeaseholdError) -> dict[str, Any]:
    return {"class": type(e).__name__, "code": e.code, "http_status": e.http_status, "request_id": e.request_id,
            "fields": [v.field for v in e.violations], "message": e.message}


def expect_error(step: str, fn: Callable[[], Any]) -> None:
    try:
        fn()
    except LeaseholdError as e:
        emit(step, **error_facts(e))
        return
    emit(step, **{"class": None})


def workload_facts(w: Any) -> dict[str, Any]:
    return {"name": w.name, "max_leased": w.max_leased, "max_leased_per_key": w.max_leased_per_key,
            "max_leases_per_second": w.max_leases_per_second, "leases_burst": w.leases_burst, "paused": w.paused}


def status(task_id: str) -> str:
    return client.get_task(task_id).task.status


class Running:
    """A Worker run in a thread, whose handler records what it was given and may hold tasks until released."""

    def __init__(self, workloads: list[str], name: str, *, concurrency: int = 2, hold: set[str] | None = None,
                 **kwargs: Any) -> None:
        self.seen: list[dict[str, Any]] = []
        self.release = threading.Event()
        self.hold = hold or set()  # workloads whose tasks wait for `release`
        self.worker = Worker(URL, workloads=workloads, transport=TRANSPORT, worker_id=f"{PREFIX}-{name}",  # type: ignore[arg-type]
                             concurrency=concurrency, wait_seconds=2, **kwargs)
        for w in workloads:
            self.worker.handler(w)(self.handle)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.worker.run()
        except BaseException as e:
            self.error = e

    def handle(self, task: Task) -> Result:
        self.seen.append({"id": task.id, "workload": task.workload, "concurrency_key": task.concurrency_key,
                          "required_labels": task.required_labels})
        if task.workload in self.hold:
            self.release.wait(60)
        return Result(uri=f"s3://out/{task.id}", sha256=SHA)

    def stop(self) -> None:
        self.release.set()
        self.worker.stop()
        self.thread.join(30)
        if self.error is not None:
            raise self.error


def one(i: int, **kw: Any) -> TaskSpec:
    return TaskSpec(i, f"s3://in/{i}", SHA, **kw)


# ---------- settings: put_workload's caps, pause and resume, as returned ----------

caps = f"{PREFIX}-caps"
emit("put_workload", **workload_facts(client.put_workload(
    caps, max_leased=8, max_leased_per_key=2, max_leases_per_second=50.5, leases_burst=10)))
emit("pause", **workload_facts(client.pause(caps)))
emit("pause_again", **workload_facts(client.pause(caps)))
emit("put_while_paused", **workload_facts(client.put_workload(caps, max_leased=4)))
emit("listed", **workload_facts(next(w for w in client.list_workloads() if w.name == caps)))
emit("resume", **workload_facts(client.resume(caps)))

# ---------- bad input: the typed exceptions, with the field; nothing written ----------

bad = f"{PREFIX}-bad"
client.put_workload(bad)
expect_error("bad_label_value", lambda: client.create_job(bad, input_uri="s3://in/x", input_sha256=SHA,
                                                          required_labels={"gpu": "A100!"}))
expect_error("bad_task_label_name", lambda: client.create_job(bad, tasks=[one(0, required_labels={"Bad Name": "x"})]))
expect_error("bad_key_length", lambda: client.create_job(bad, input_uri="s3://in/x", input_sha256=SHA,
                                                         concurrency_key="k" * 129))
expect_error("bad_label_type", lambda: client.create_job(bad, input_uri="s3://in/x", input_sha256=SHA,
                                                         required_labels={"gpu": 100}))  # type: ignore[dict-item]
expect_error("bad_cap", lambda: client.put_workload(bad, max_leased=0))
expect_error("bad_rate", lambda: client.put_workload(bad, max_leases_per_second=5))
expect_error("bad_key_cap", lambda: client.put_key_limit(bad, "tenant", 0))
expect_error("pause_unknown", lambda: client.pause(f"{PREFIX}-nosuch"))
expect_error("resume_unknown", lambda: client.resume(f"{PREFIX}-nosuch"))
expect_error("key_limit_unknown", lambda: client.put_key_limit(f"{PREFIX}-nosuch", "tenant", 3))
try:
    Worker(URL, workloads=[bad], transport=TRANSPORT, labels={"gpu": 1})  # type: ignore[arg-type, dict-item]
    emit("worker_label_type", raised=None)
except ValueError as e:
    emit("worker_label_type", raised=type(e).__name__)
refused = Running([bad], "badlabels", labels={"GPU": "a100"})
refused.thread.join(30)
emit("worker_bad_labels", raised=type(refused.error).__name__ if refused.error else None,
     message=str(refused.error) if refused.error else "", alive=refused.thread.is_alive())
assert isinstance(refused.error, WorkerConfigError) or refused.error is None

# ---------- labels: a gpu=a100 task is never leased by a worker without that label ----------

gpu = f"{PREFIX}-gpu"
client.put_workload(gpu)
gpu_job = client.create_job(gpu, input_uri="s3://in/gpu", input_sha256=SHA, required_labels={"gpu": "a100"},
                            concurrency_key="tenant-g")
mixed = client.create_job(gpu, tasks=[one(0), one(1, required_labels={"gpu": "a100"})],
                          required_labels={"region": "eu"})
gpu_ids = [gpu_job.tasks[0].id, mixed.tasks[1].id]
emit("created_labelled", job_labels=gpu_job.job.required_labels, job_key=gpu_job.job.concurrency_key,
     task_labels=[t.required_labels for t in (gpu_job.tasks[0], *mixed.tasks)], task_key=gpu_job.tasks[0].concurrency_key)
before = client.get_task(gpu_ids[0])
emit("waiting_no_workers", reason=before.waiting_reason, detail=before.waiting_detail, status=before.task.status)

cpu = Running([gpu], "cpu", labels={"region": "eu"})
wait_until(lambda: status(mixed.tasks[0].id) == "completed", "the cpu worker to run the unlabelled chunk")
# The cpu worker has claimed since the gpu tasks were created (they are older, and came first in line).
waiting = [client.get_task(i) for i in gpu_ids]
emit("cpu_worker", seen=[s["id"] for s in cpu.seen], claimed=cpu.worker.stats["claimed"],
     gpu_status=[d.task.status for d in waiting], reasons=[d.waiting_reason for d in waiting],
     details=[d.waiting_detail for d in waiting])
cpu.stop()
listed = [d for d in client.list_tasks(mixed.job.id) if d.task.chunk_index == 1][0]
emit("listed_task", labels=listed.task.required_labels, reason=listed.waiting_reason)

gpu_worker = Running([gpu], "gpu", labels={"gpu": "a100", "region": "eu"})
t0 = time.monotonic()
wait_until(lambda: all(status(i) == "completed" for i in gpu_ids), "the gpu worker to run the gpu tasks")
emit("gpu_worker", seconds=round(time.monotonic() - t0, 3), seen=gpu_worker.seen,
     owners=[client.get_task(i).attempts[-1].worker_id for i in gpu_ids])
gpu_worker.stop()

# ---------- pause: nothing leased while paused, a held lease runs on, resume lets them run ----------

paused, other = f"{PREFIX}-paused", f"{PREFIX}-other"
client.put_workload(paused)
client.put_workload(other)
held = client.create_job(paused, input_uri="s3://in/held", input_sha256=SHA).tasks[0].id
runner = Running([paused, other], "pauser", concurrency=3, hold={paused})
wait_until(lambda: status(held) == "leased", "the held task to be leased")
emit("paused_workload", **workload_facts(client.pause(paused)))
waiting_job = client.create_job(paused, tasks=[one(i) for i in range(3)])  # still accepted while paused
probe = client.create_job(other, input_uri="s3://in/other", input_sha256=SHA).tasks[0].id
wait_until(lambda: status(probe) == "completed", "the worker to run a task of the other workload")
# The worker has free lanes and claims on: the paused tasks, older than the probe, stay pending.
paused_counts = client.get_job(waiting_job.job.id).task_counts
reason = client.get_task(waiting_job.tasks[0].id)
runner.release.set()  # the lease held since before the pause completes
wait_until(lambda: status(held) == "completed", "the held lease to complete while paused")
emit("while_paused", pending=paused_counts.pending, leased=paused_counts.leased, reason=reason.waiting_reason,
     detail=reason.waiting_detail, held=status(held),
     after_held=client.get_job(waiting_job.job.id).task_counts.pending)
t0 = time.monotonic()
emit("resumed_workload", **workload_facts(client.resume(paused)))
wait_until(lambda: client.get_job(waiting_job.job.id).task_counts.completed == 3, "the resumed tasks to complete")
emit("after_resume", seconds=round(time.monotonic() - t0, 3), completed=3)
runner.stop()

# ---------- caps: a key's cap changed by put_key_limit, a workload cap, and the reasons they give ----------

keyed, capped = f"{PREFIX}-keyed", f"{PREFIX}-capped"
client.put_workload(keyed, max_leased_per_key=1)
client.put_workload(capped, max_leased=1)
key_job = client.create_job(keyed, tasks=[one(i) for i in range(4)], concurrency_key="tenant-a")
cap_job = client.create_job(capped, tasks=[one(i) for i in range(2)])
capper = Running([keyed, capped], "capper", concurrency=6, hold={keyed, capped})


def leased(job_id: str) -> int:
    return client.get_job(job_id).task_counts.leased


wait_until(lambda: leased(key_job.job.id) == 1 and leased(cap_job.job.id) == 1, "one task of each leased")
key_reasons = [client.get_task(t.id) for t in key_job.tasks if status(t.id) == "pending"]
cap_reason = [client.get_task(t.id) for t in cap_job.tasks if status(t.id) == "pending"][0]
emit("capped", key_leased=leased(key_job.job.id), key_reasons=sorted({d.waiting_reason for d in key_reasons}),
     key_detail=key_reasons[0].waiting_detail, cap_leased=leased(cap_job.job.id), cap_reason=cap_reason.waiting_reason,
     cap_detail=cap_reason.waiting_detail)
limit = client.put_key_limit(keyed, "tenant-a", 3)
emit("key_limit", workload=limit.workload, key=limit.key, max_leased=limit.max_leased)
t0 = time.monotonic()
wait_until(lambda: leased(key_job.job.id) == 3, "the raised key cap to fill")
seconds = round(time.monotonic() - t0, 3)
last = [client.get_task(t.id) for t in key_job.tasks if status(t.id) == "pending"]
emit("raised", seconds=seconds, leased=leased(key_job.job.id), pending=len(last),
     reason=last[0].waiting_reason if last else None, detail=last[0].waiting_detail if last else None)
capper.release.set()
wait_until(lambda: client.get_job(key_job.job.id).job.status == "completed"
           and client.get_job(cap_job.job.id).job.status == "completed", "the capped jobs to complete")
emit("capped_done", keys=sorted({s["concurrency_key"] for s in capper.seen if s["workload"] == keyed}))
capper.stop()
client.close()
emit("done")
