"""Submit a job of N chunks, follow it, print its results: python3 examples/python/submit.py [URL] [WORKLOAD] [N]

LEASEHOLD_TOKEN: a submitter token. Prints the job's status, one JSON line per change of it, then one per result.
"""

import hashlib
import json
import os
import sys

from leasehold import Client, TaskSpec

url = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"
workload = sys.argv[2] if len(sys.argv) > 2 else "scimesh"
n = int(sys.argv[3]) if len(sys.argv) > 3 else 4
with Client(url, token=os.environ.get("LEASEHOLD_TOKEN")) as client:
    chunks = [TaskSpec(i, f"s3://in/{i}", hashlib.sha256(str(i).encode()).hexdigest()) for i in range(n)]
    job = client.create_job(workload, tasks=chunks).job
    for update in client.watch(job.id):
        if update.snapshot is not None:
            print(json.dumps({"job_id": job.id, "status": update.snapshot.job.status}), flush=True)
        elif update.event is not None and update.event.kind == "job_status":
            print(json.dumps({"job_id": job.id, "status": update.event.job_status}), flush=True)
    for result in client.results(job.id):
        print(json.dumps({"chunk_index": result.chunk_index, "uri": result.result_uri, "sha256": result.result_sha256}))
