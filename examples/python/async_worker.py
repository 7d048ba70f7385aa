"""An asyncio Leasehold worker: python3 examples/python/async_worker.py [URL] [WORKLOAD].

Needs: pip install "./clients/python[aio]".

LEASEHOLD_TOKEN: a worker token; LEASEHOLD_TRANSPORT: "json" (default) or "grpc". SIGTERM or Ctrl-C drains.
Its handler is an ``async def``: while one task awaits its I/O, the worker's other lanes run. A chunk whose
parameters carry {"fail": "why"} fails for good with error_code "bad_chunk" (see gateway.py's "fail_chunk").
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import sys

from leasehold import Result, TaskError, WorkerConfigError
from leasehold.aio import AsyncTask, AsyncWorker

url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"
workload = sys.argv[2] if len(sys.argv) > 2 else "scimesh"
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
worker = AsyncWorker(url, workloads=[workload], concurrency=8, token=os.environ.get("LEASEHOLD_TOKEN"),
                     transport="grpc" if os.environ.get("LEASEHOLD_TRANSPORT") == "grpc" else "json")


async def fetch(uri: str) -> bytes:
    """Stands for the I/O a real handler awaits (an object store, a model server)."""
    await asyncio.sleep(0.05)
    return uri.encode()


@worker.handler(workload)
async def handle(task: AsyncTask) -> Result:
    """Fetches the chunk, reports halfway, returns where its result went."""
    if task.parameters.get("fail"):
        raise TaskError(str(task.parameters["fail"]), code="bad_chunk")  # permanent: no retry
    data = await fetch(task.input_uri)
    await task.progress(0.5, "halfway")  # also renews the lease; a cancelled task raises CancelledError
    output = data + f" processed by {worker.worker_id}".encode()
    return Result(uri=f"mem://results/{task.job_id}/{task.chunk_index}", sha256=hashlib.sha256(output).hexdigest(),
                  metrics={"bytes": len(output), "worker": worker.worker_id})


try:
    asyncio.run(worker.run())
except WorkerConfigError as e:  # a refused token or worker_id, or a workload the coordinator does not know
    sys.exit(f"worker: {e}")
