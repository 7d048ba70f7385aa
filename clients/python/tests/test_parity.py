"""Parameters and metrics keep their type on both transports.

``google.protobuf.Struct`` carries every number as a double, so over gRPC ``{"frames": 240}`` arrives as
``240.0`` while JSON keeps ``240``. The client reads both the same way (integral numbers within ±2**53 as
``int``, others as ``float``): this table of values goes through a job's parameters to a gRPC worker and a
JSON worker, back as their result metrics, and through the Client's job, task and result reads on both
transports, and must come out as the same Python values of the same types everywhere.
"""

from __future__ import annotations

import hashlib
import math
import threading
import uuid
from typing import Any

from conftest import Env

from leasehold import Client, Result, Task, TaskSpec, Worker, plain_json

# (value submitted, value every read must give back)
TABLE: dict[str, tuple[Any, Any]] = {
    "int": (240, 240),
    "zero": (0, 0),
    "negative": (-17, -17),
    "max_exact": (2**53, 2**53),
    "min_exact": (-(2**53), -(2**53)),
    "negative_zero": (-0.0, 0),
    "integral_float": (240.0, 240),
    "float": (240.5, 240.5),
    "negative_float": (-0.25, -0.25),
    "huge": (1e300, 1e300),
    "tiny": (1e-300, 1e-300),
    "beyond_exact": (2**60, float(2**60)),  # no double holds 2**60 + 1: it reads as the float it became
    "true": (True, True),
    "false": (False, False),
    "none": (None, None),
    "string": ("240", "240"),
    "empty_string": ("", ""),
    "list": ([1, 2.0, 2.5, "x", None, True, [3.0, {"k": 4.0}]], [1, 2, 2.5, "x", None, True, [3, {"k": 4}]]),
    "empty_list": ([], []),
    "dict": ({"a": {"b": 1.0, "c": [0.5]}}, {"a": {"b": 1, "c": [0.5]}}),
    "empty_dict": ({}, {}),
}
SENT = {k: v[0] for k, v in TABLE.items()}
EXPECTED = {k: v[1] for k, v in TABLE.items()}


def typed(value: Any) -> Any:
    """The value with the type of every part spelled out, so 240 and 240.0 (or True and 1) differ."""
    if isinstance(value, dict):
        return {k: typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, value)


def test_the_table_reads_the_same_without_a_coordinator() -> None:
    assert typed(plain_json(SENT)) == typed(EXPECTED)
    assert typed(plain_json(EXPECTED)) == typed(EXPECTED)  # reading twice changes nothing
    assert math.copysign(1, plain_json(-0.0)) == 1 and plain_json(float("inf")) == float("inf")


def test_parameters_and_metrics_keep_their_types_on_both_transports(env: Env) -> None:
    sha = hashlib.sha256(b"in").hexdigest()
    want = [typed(EXPECTED), typed({**EXPECTED, "chunk": 1})]
    jobs: dict[str, str] = {}
    with Client(env.main.url, token=env.tokens.admin) as admin:
        for transport in ("json", "grpc"):
            # A workload and a job per transport, run by a worker of that transport: job parameters, and a
            # chunk's own parameters merged over them (chunk 1).
            w = f"parity_{transport}_{uuid.uuid4().hex[:8]}"
            admin.put_workload(w, lease_seconds=30)
            jobs[transport] = admin.create_job(w, parameters=SENT, tasks=[
                TaskSpec(0, "s3://in/0", sha), TaskSpec(1, "s3://in/1", sha, {"chunk": 1.0})]).job.id
            seen: dict[int, dict[str, Any]] = {}
            worker = Worker(env.main.url, workloads=[w], token=env.tokens.worker, transport=transport,  # type: ignore[arg-type]
                            worker_id=f"pyw-parity-{transport}", wait_seconds=1)

            @worker.handler(w)
            def handle(task: Task, seen: dict[int, dict[str, Any]] = seen) -> Result:
                seen[task.chunk_index] = task.parameters
                return Result(f"mem://{task.chunk_index}", sha, metrics=task.parameters)

            thread = threading.Thread(target=worker.run)
            thread.start()
            try:
                assert admin.wait(jobs[transport], timeout=30).status == "completed"
            finally:
                worker.stop()
                thread.join(30)
            assert [typed(seen[i]) for i in (0, 1)] == want, f"the {transport} worker's task.parameters"

    for transport in ("json", "grpc"):
        with Client(env.main.url, token=env.tokens.admin, transport=transport) as c:  # type: ignore[arg-type]
            for job_id in jobs.values():
                snap = c.get_job(job_id)
                assert typed(snap.job.parameters) == want[0], transport
                details = list(c.list_tasks(job_id))
                assert [typed(d.task.parameters) for d in details] == want, transport
                assert [typed(d.task.metrics) for d in details] == want, transport
                assert typed(c.get_task(details[1].task.id).task.parameters) == want[1], transport
                assert [typed(r.metrics) for r in c.results(job_id)] == want, transport
                assert typed(next(iter(c.list_jobs(workload=snap.job.workload))).parameters) == want[0], transport
