"""A Leasehold worker: python3 examples/python/worker.py [URL] [WORKLOAD]   (needs: pip install ./clients/python)

LEASEHOLD_TOKEN: a worker token; LEASEHOLD_TRANSPORT: "json" (default) or "grpc". SIGTERM or Ctrl-C drains.
A chunk whose parameters carry {"fail": "why"} fails for good with error_code "bad_chunk" (see submit.py).
"""

import hashlib
import logging
import os
import sys

from leasehold import Result, Task, TaskError, Worker, WorkerConfigError

url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"
workload = sys.argv[2] if len(sys.argv) > 2 else "scimesh"
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
worker = Worker(url, workloads=[workload], concurrency=4, token=os.environ.get("LEASEHOLD_TOKEN"),
                transport="grpc" if os.environ.get("LEASEHOLD_TRANSPORT") == "grpc" else "json")


@worker.handler(workload)
def handle(task: Task) -> Result:
    if task.parameters.get("fail"):
        raise TaskError(str(task.parameters["fail"]), code="bad_chunk")  # permanent: no retry
    output = f"{task.input_uri} processed by {worker.worker_id}".encode()  # the "work"
    task.progress(0.5, "halfway")
    return Result(uri=f"mem://results/{task.job_id}/{task.chunk_index}", sha256=hashlib.sha256(output).hexdigest(),
                  metrics={"bytes": len(output), "worker": worker.worker_id})


try:
    worker.run()
except WorkerConfigError as e:  # a refused token or worker_id, or a workload the coordinator does not know
    sys.exit(f"worker: {e}")
