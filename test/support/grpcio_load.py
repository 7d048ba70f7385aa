"""Drives a coordinator with grpcio under many concurrent HTTP/2 streams on one channel.

Each of LANES coroutines (grpc.aio, one channel: LANES streams in flight at once) claims up to
MAX_TASKS tasks, checks every claimed task's fields against what the job was created with,
completes each (CompleteTask, or all at once with CompleteTasks), and now and then reads the job
back (GetJob, ListTasks with their attempts): answers of every size the worker and submitter
paths have. Every lane whose index is a multiple of GZIP_EVERY sends its requests gzip-compressed.
Lanes stop once the job has no task left to claim.

usage: grpcio_load.py HOST:PORT WORKLOAD JOB_ID TASKS LANES GZIP_EVERY
Prints one JSON line: calls made, tasks completed, and every error (code, details) seen; a
response grpcio could not parse ("Exception deserializing response!") is an INTERNAL error here.
"""

import asyncio
import json
import random
import sys

import grpc
from google.protobuf import json_format

from leasehold.queue.v1 import queue_pb2, queue_pb2_grpc

MAX_TASKS = 8


def expected_parameters(chunk: int) -> dict[str, object]:
    return {"label": f"Grüße ✓ 🚀 {chunk}", "chunk": chunk, "nested": {"list": [chunk, "ü", None, True]}}


async def main() -> int:
    target, workload, job_id = sys.argv[1], sys.argv[2], sys.argv[3]
    tasks, lanes, gzip_every = int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
    calls = 0
    completed: set[str] = set()
    errors: list[dict[str, str]] = []
    mismatches: list[str] = []

    async with grpc.aio.insecure_channel(target) as channel:
        stub = queue_pb2_grpc.QueueServiceStub(channel)

        async def lane(i: int) -> None:
            nonlocal calls
            rng = random.Random(i)
            compression = grpc.Compression.Gzip if i % gzip_every == 0 else None
            worker = f"load-{i}"
            idle = 0
            while len(completed) < tasks and idle < 3:
                try:
                    calls += 1
                    claim = await stub.ClaimTasks(
                        queue_pb2.ClaimTasksRequest(worker_id=worker, workloads=[workload], max_tasks=rng.randint(1, MAX_TASKS)),
                        compression=compression,
                        timeout=120,
                    )
                    if not claim.tasks:
                        idle += 1
                        continue
                    idle = 0
                    for t in claim.tasks:
                        params = json_format.MessageToDict(t.parameters)
                        if params != expected_parameters(t.chunk_index) or t.input_uri != f"s3://in/{t.chunk_index}" or t.job_id != job_id:
                            mismatches.append(f"{t.id}: {t.chunk_index} {params!r} {t.input_uri}")
                    if rng.random() < 0.5:
                        for t in claim.tasks:
                            calls += 1
                            done = await stub.CompleteTask(
                                queue_pb2.CompleteTaskRequest(
                                    task_id=t.id, worker_id=worker, attempt=t.attempt,
                                    result_uri=f"s3://out/{t.id}", result_sha256="a" * 64,
                                ),
                                compression=compression,
                                timeout=120,
                            )
                            if done.task.status == queue_pb2.TASK_STATUS_COMPLETED:
                                completed.add(t.id)
                    else:
                        calls += 1
                        batch = await stub.CompleteTasks(
                            queue_pb2.CompleteTasksRequest(results=[
                                queue_pb2.CompleteTaskRequest(
                                    task_id=t.id, worker_id=worker, attempt=t.attempt,
                                    result_uri=f"s3://out/{t.id}", result_sha256="b" * 64,
                                )
                                for t in claim.tasks
                            ]),
                            compression=compression,
                            timeout=120,
                        )
                        for outcome in batch.outcomes:
                            if outcome.task.status == queue_pb2.TASK_STATUS_COMPLETED:
                                completed.add(outcome.task_id)
                    if rng.random() < 0.2:
                        calls += 2
                        await stub.GetJob(queue_pb2.GetJobRequest(job_id=job_id), compression=compression, timeout=120)
                        await stub.ListTasks(
                            queue_pb2.ListTasksRequest(job_id=job_id, page_size=rng.randint(1, 50)), compression=compression, timeout=120
                        )
                except grpc.aio.AioRpcError as e:
                    errors.append({"lane": str(i), "code": e.code().name, "details": e.details() or ""})

        await asyncio.gather(*(lane(i) for i in range(lanes)))

    print(json.dumps({"calls": calls, "completed": len(completed), "errors": errors, "mismatches": mismatches}))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
