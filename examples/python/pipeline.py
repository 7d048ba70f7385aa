"""The stitch-then-report pipeline from Python: a mesh's chunks, stitched into one mesh, then a report on it.

    python3 examples/python/pipeline.py worker [URL]      # works on all three stages until SIGTERM or Ctrl-C
    python3 examples/python/pipeline.py submit [URL] [N]  # creates the pipeline of N chunks in one call, follows it

(needs: pip install ./clients/python). The worker registers the workloads `stitch` and `report` when the
coordinator lacks them (`npm start` registers `scimesh`). The same pipeline from a YAML file through the
command line: `leasehold workflow create -f examples/pipeline.yaml --watch`, with this worker running.

`submit` prints one JSON line per node status change, then the workflow's end, each node's, and the report's
result; it exits 0 when the pipeline completed, 1 otherwise. LEASEHOLD_TOKEN: a submitter token (the worker
then needs LEASEHOLD_WORKER_TOKEN, and reads its parents' results with the submitter's); LEASEHOLD_TRANSPORT:
"json" (default) or "grpc".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
from typing import Literal

from leasehold import Client, Node, PermissionDeniedError, Result, Task, TaskSpec, Worker, WorkerConfigError

parser = argparse.ArgumentParser()
parser.add_argument("mode", choices=["worker", "submit"])
parser.add_argument("url", nargs="?", default="http://127.0.0.1:8080")
parser.add_argument("n", nargs="?", type=int, default=4, help="chunks (submit)")
args = parser.parse_args()
transport: Literal["json", "grpc"] = "grpc" if os.environ.get("LEASEHOLD_TRANSPORT") == "grpc" else "json"
client = Client(args.url, token=os.environ.get("LEASEHOLD_TOKEN"), transport=transport)


def sha(data: str) -> str:
    return hashlib.sha256(data.encode()).hexdigest()


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def run_worker() -> None:
    try:
        known = {w.name for w in client.list_workloads()}
        for workload in ("stitch", "report"):
            if workload not in known:
                client.put_workload(workload)
    except PermissionDeniedError:
        pass  # a submitter token: an admin registers the workloads
    token = os.environ.get("LEASEHOLD_WORKER_TOKEN", os.environ.get("LEASEHOLD_TOKEN"))
    worker = Worker(args.url, workloads=["scimesh", "stitch", "report"], concurrency=4, token=token,
                    transport=transport)

    @worker.handler("scimesh")
    def mesh(task: Task) -> Result:
        task.progress(0.5, "halfway")
        return Result(uri=f"mem://mesh/{task.job_id}/{task.chunk_index}", sha256=sha(f"mesh of {task.input_uri}"))

    @worker.handler("stitch")
    def stitch(task: Task) -> Result:
        # The chunks node is a parent of many tasks: its results are read in chunk order.
        [chunks] = task.parents
        parts = [m.result_uri for m in client.results(chunks.job_id)]
        return Result(uri=task.input_uri, sha256=sha("\n".join(parts)), metrics={"chunks": len(parts)})

    @worker.handler("report")
    def report(task: Task) -> Result:
        # The stitch node is a parent of one task: its result comes with this task, no call needed.
        [stitched] = task.parents
        assert stitched.result is not None
        return Result(uri=task.input_uri, sha256=sha(f"report on {stitched.result.result_uri}"))

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        worker.run()
    except WorkerConfigError as e:
        sys.exit(f"worker: {e}")


def submit(n: int) -> int:
    chunks = [TaskSpec(i, f"s3://bucket/mesh/chunk-{i}.h5", sha(str(i))) for i in range(n)]
    workflow = client.create_workflow({
        "chunks": Node("scimesh", tasks=chunks),
        "stitch": Node("stitch", input_uri="s3://bucket/mesh/stitched.h5", input_sha256=sha("stitched"),
                       after=["chunks"], parameters={"format": "h5"}),
        "report": Node("report", input_uri="s3://bucket/mesh/report.pdf", input_sha256=sha("report"),
                       after=["stitch"]),
    }, name=f"mesh of {n} chunks")
    emit(workflow_id=workflow.id, nodes={node.name: node.status for node in workflow.nodes})
    for update in client.watch_workflow(workflow.id):
        if update.event is not None:
            emit(node=update.event.node, status=update.event.status)
    done = client.get_workflow(workflow.id)
    emit(workflow_id=done.id, status=done.status,
         nodes={node.name: [node.status, node.completed_tasks, node.total_tasks] for node in done.nodes})
    if done.status == "completed":
        [result] = client.results(done.node("report").job_id)
        emit(report=result.result_uri, sha256=result.result_sha256)
    return 0 if done.status == "completed" else 1


with client:
    if args.mode == "worker":
        run_worker()
    else:
        sys.exit(submit(args.n))
