"""Submit a job of N chunks, follow it, explain how it ended: python3 examples/python/submit.py [URL] [WORKLOAD] [N]

Options: --fail-chunk K asks worker.py to fail chunk K (its parameters carry {"fail": "..."});
--failure-policy continue lets the other chunks finish when one fails (default: the workload's, fail_fast).
LEASEHOLD_TOKEN: a submitter token; LEASEHOLD_TRANSPORT: "json" (default) or "grpc".

Prints one JSON line per change of the job's status; then, for a job that did not complete, the job's
failure and one line per chunk that failed (its error and attempts) or was cancelled; then one line per
result of the chunks that completed, in chunk order.
"""

import argparse
import hashlib
import json
import os

from leasehold import Client, TaskSpec

parser = argparse.ArgumentParser()
parser.add_argument("url", nargs="?", default="http://127.0.0.1:8080")
parser.add_argument("workload", nargs="?", default="scimesh")
parser.add_argument("n", nargs="?", type=int, default=4)
parser.add_argument("--fail-chunk", type=int, default=None)
parser.add_argument("--failure-policy", choices=["fail_fast", "continue"], default=None)
args = parser.parse_args()


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


with Client(args.url, token=os.environ.get("LEASEHOLD_TOKEN"),
            transport="grpc" if os.environ.get("LEASEHOLD_TRANSPORT") == "grpc" else "json") as client:
    chunks = [TaskSpec(i, f"s3://in/{i}", hashlib.sha256(str(i).encode()).hexdigest(),
                       {"fail": f"chunk {i} is corrupt"} if i == args.fail_chunk else None) for i in range(args.n)]
    # view="basic": the job alone (its tasks are not needed here, so not sent back).
    job = client.create_job(args.workload, tasks=chunks, failure_policy=args.failure_policy, view="basic").job
    for update in client.watch(job.id):
        if update.snapshot is not None:
            emit(job_id=job.id, status=update.snapshot.job.status)
        elif update.event is not None and update.event.kind == "job_status":
            emit(job_id=job.id, status=update.event.job_status)

    # Why it ended as it did: the failure that failed the job, then every chunk that did not complete.
    snap = client.get_job(job.id)
    if snap.failure is not None:
        f = snap.failure
        emit(job_id=job.id, failure={"chunk_index": f.chunk_index, "error_code": f.error_code,
                                     "error_message": f.error_message, "attempt": f.attempt, "worker_id": f.worker_id})
    if snap.job.status != "completed" or snap.task_counts.failed:
        for detail in client.list_tasks(job.id):
            task = detail.task
            if task.status == "failed":
                emit(failed_chunk=task.chunk_index, error_code=task.error_code, error_message=task.error_message,
                     attempts=[{"attempt": a.attempt, "worker_id": a.worker_id, "outcome": a.outcome,
                                "error_code": a.error_code} for a in detail.attempts])
            elif task.status == "cancelled":
                emit(cancelled_chunk=task.chunk_index)
    for result in client.results(job.id):
        emit(chunk_index=result.chunk_index, uri=result.result_uri, sha256=result.result_sha256)
