"""A Leasehold worker: python3 examples/python/worker.py [URL] [WORKLOAD]   (needs: pip install ./clients/python)

LEASEHOLD_TOKEN: a worker token; LEASEHOLD_TRANSPORT: "json" (default) or "grpc". SIGTERM or Ctrl-C drains.
"""

import hashlib
import logging
import os
import sys

from leasehold import Result, Task, Worker

url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"
workload = sys.argv[2] if len(sys.argv) > 2 else "scimesh"
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
worker = Worker(url, workloads=[workload], concurrency=4, token=os.environ.get("LEASEHOLD_TOKEN"),
                transport=os.environ.get("LEASEHOLD_TRANSPORT", "json"))


@worker.handler(workload)
def handle(task: Task) -> Result:
    output = f"{task.input_uri} processed by {worker.worker_id}".encode()  # the "work"
    task.progress(0.5, "halfway")
    return Result(uri=f"mem://results/{task.job_id}/{task.chunk_index}", sha256=hashlib.sha256(output).hexdigest(),
                  metrics={"bytes": len(output), "worker": worker.worker_id})


worker.run()
