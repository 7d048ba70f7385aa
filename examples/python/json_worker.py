#!/usr/bin/env python3
"""A Leasehold worker over the REST JSON routes, with the Python standard library only.

    python3 examples/python/json_worker.py --target 127.0.0.1:8080 \
        --workload thumbnails --worker-id py-json-1 --tasks 2

Flow, per task: POST /tasks/claim -> POST /tasks/{id}/heartbeat -> (simulated
work in --progress-steps steps, each followed by POST /tasks/{id}/progress with
progress = step/steps and a message "step k/n", which also extends the lease)
-> POST /tasks/{id}/result with a result manifest (result_uri, sha256 of the
result bytes, metrics). Every task but the last of --tasks N is completed; with
N >= 2 the last one is reported with POST /tasks/{id}/failure
(retryable=false) to show the failure path.

Prints one JSON object per line on stdout for every action (claim, heartbeat,
progress, complete, fail, lease_lost, error, done). Exit status: 0 when every task was
processed as planned (or the queue ran dry first); 3 when a lease was lost
(HTTP 409: the task was reclaimed, cancelled or its lease expired; the worker
drops it and goes on); 1 on any other error; 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Optional

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_LEASE_LOST = 3


def emit(action: str, **fields: Any) -> None:
    """One JSON line per action, flushed at once so a supervising process sees it."""
    print(json.dumps({"action": action, **fields}, sort_keys=True), flush=True)


class LeaseLost(Exception):
    """HTTP 409 with code "aborted": we no longer hold the lease; drop the task."""

    def __init__(self, step: str, task_id: str, message: str, request_id: Optional[str]):
        super().__init__(message)
        self.step, self.task_id, self.request_id = step, task_id, request_id


class ApiError(Exception):
    """Any other unexpected answer from the coordinator."""

    def __init__(self, step: str, status: int, code: str, message: str, request_id: Optional[str]):
        super().__init__(f"{step}: HTTP {status} {code}: {message} (request id {request_id})")
        self.step, self.status, self.code, self.message, self.request_id = step, status, code, message, request_id


class Client:
    def __init__(self, target: str, timeout: float):
        self.base = target.rstrip("/") if "://" in target else f"http://{target}"
        self.timeout = timeout

    def post(self, step: str, path: str, body: dict, task_id: str = "", extra_timeout: float = 0.0) -> tuple[int, Optional[dict]]:
        data = json.dumps(body).encode("utf-8")
        req = urllib.request.Request(
            self.base + path,
            data=data,
            method="POST",
            headers={"content-type": "application/json", "accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout + extra_timeout) as res:
                raw = res.read()
                return res.status, (json.loads(raw) if raw else None)
        except urllib.error.HTTPError as err:
            request_id = err.headers.get("x-request-id")
            raw = err.read()
            code, message = "unknown", raw.decode("utf-8", "replace")
            try:
                payload = json.loads(raw)["error"]
                code, message = payload["code"], payload["message"]
                request_id = payload.get("request_id") or request_id
            except (ValueError, KeyError, TypeError):
                pass
            if err.code == 409 and code == "aborted":
                raise LeaseLost(step, task_id, message, request_id) from None
            raise ApiError(step, err.code, code, message, request_id) from None

    def claim(self, worker_id: str, workload: str, max_tasks: int, lease_seconds: Optional[int], wait_seconds: int) -> list[dict]:
        body: dict[str, Any] = {"worker_id": worker_id, "workloads": [workload], "max_tasks": max_tasks, "wait_seconds": wait_seconds}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        status, answer = self.post("claim", "/tasks/claim", body, extra_timeout=wait_seconds)
        if status == 204:  # nothing was leased
            return []
        return (answer or {}).get("tasks", [])

    def heartbeat(self, task: dict, worker_id: str, lease_seconds: Optional[int]) -> dict:
        body: dict[str, Any] = {"worker_id": worker_id, "attempt": task["attempt"]}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        _, answer = self.post("heartbeat", f"/tasks/{task['id']}/heartbeat", body, task["id"])
        return answer["task"]

    def progress(self, task: dict, worker_id: str, progress: float, message: str, lease_seconds: Optional[int]) -> dict:
        """Lease-checked like a heartbeat (409 aborted when the lease is no longer ours), and extends the lease."""
        body: dict[str, Any] = {"worker_id": worker_id, "attempt": task["attempt"], "progress": progress, "message": message}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        _, answer = self.post("progress", f"/tasks/{task['id']}/progress", body, task["id"])
        return answer["task"]

    def complete(self, task: dict, worker_id: str, result_uri: str, result_sha256: str, metrics: dict) -> dict:
        body = {
            "worker_id": worker_id,
            "attempt": task["attempt"],
            "result_uri": result_uri,
            "result_sha256": result_sha256,
            "metrics": metrics,
        }
        _, answer = self.post("complete", f"/tasks/{task['id']}/result", body, task["id"])
        return answer["task"]

    def fail(self, task: dict, worker_id: str, error_code: str, error_message: str, retryable: bool) -> dict:
        body = {
            "worker_id": worker_id,
            "attempt": task["attempt"],
            "error_code": error_code,
            "error_message": error_message,
            "retryable": retryable,
        }
        _, answer = self.post("fail", f"/tasks/{task['id']}/failure", body, task["id"])
        return answer["task"]


def process(client: Client, args: argparse.Namespace, task: dict, number: int) -> None:
    """Heartbeat, do the (simulated) work reporting progress after each step, then report a result or a failure."""
    started = time.monotonic()
    renewed = client.heartbeat(task, args.worker_id, args.lease_seconds)
    emit("heartbeat", task_id=task["id"], attempt=task["attempt"], lease_expires_at=renewed.get("lease_expires_at"))
    steps = args.progress_steps
    if steps == 0 and args.work_seconds > 0:
        time.sleep(args.work_seconds)  # no progress reports: the work in one go
    for step in range(1, steps + 1):
        if args.work_seconds > 0:
            time.sleep(args.work_seconds / steps)
        progress, message = step / steps, f"step {step}/{steps}"
        reported = client.progress(task, args.worker_id, progress, message, args.lease_seconds)
        emit("progress", task_id=task["id"], attempt=task["attempt"], progress=progress, message=message,
             lease_expires_at=reported.get("lease_expires_at"))

    if args.tasks >= 2 and number == args.tasks:
        error_code, error_message = "example_failure", f"json_worker was told to fail task {number} of {args.tasks}"
        failed = client.fail(task, args.worker_id, error_code, error_message, retryable=False)
        emit("fail", task_id=task["id"], attempt=task["attempt"], error_code=error_code, error_message=error_message,
             retryable=False, status=failed["status"])
        return

    # The "work": a small result document; its bytes are what the manifest's sha256 covers.
    result = json.dumps(
        {"task_id": task["id"], "chunk_index": task.get("chunk_index", 0), "input_uri": task.get("input_uri", ""), "worker": args.worker_id},
        sort_keys=True,
    ).encode("utf-8")
    result_uri = f"{args.result_prefix}/{task['job_id']}/{task.get('chunk_index', 0)}.json"
    result_sha256 = hashlib.sha256(result).hexdigest()
    metrics = {"bytes": len(result), "duration_ms": round((time.monotonic() - started) * 1000, 3), "worker": args.worker_id}
    done = client.complete(task, args.worker_id, result_uri, result_sha256, metrics)
    emit("complete", task_id=task["id"], attempt=task["attempt"], result_uri=result_uri, result_sha256=result_sha256,
         metrics=metrics, status=done["status"])


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Leasehold worker over REST JSON (standard library only).")
    p.add_argument("--target", default="127.0.0.1:8080", help="coordinator host:port or http://host:port (default %(default)s)")
    p.add_argument("--workload", required=True, help="registered workload to claim from")
    p.add_argument("--worker-id", required=True, help="stable id of this worker (the lease owner)")
    p.add_argument("--tasks", type=int, default=2,
                   help="tasks to process before exiting; all but the last are completed, and with 2 or more "
                        "the last is reported as a non-retryable failure (default %(default)s)")
    p.add_argument("--max-tasks", type=int, default=1, help="max_tasks per claim (default %(default)s)")
    p.add_argument("--lease-seconds", type=int, default=None, help="lease length to ask for (default: the workload's)")
    p.add_argument("--wait-seconds", type=int, default=2, help="long-poll a claim up to this long (default %(default)s)")
    p.add_argument("--work-seconds", type=float, default=0.0, help="simulated work time between heartbeat and result")
    p.add_argument("--progress-steps", type=int, default=4,
                   help="split the work into this many steps, reporting progress (which extends the lease) after "
                        "each; 0 reports no progress (default %(default)s)")
    p.add_argument("--result-prefix", default="example://leasehold-results", help="prefix of the result_uri written in manifests")
    p.add_argument("--timeout", type=float, default=10.0, help="per-request timeout in seconds (default %(default)s)")
    args = p.parse_args(argv)
    if args.tasks < 1 or args.max_tasks < 1:
        p.error("--tasks and --max-tasks must be at least 1")
    if args.progress_steps < 0:
        p.error("--progress-steps must be at least 0")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    client = Client(args.target, args.timeout)
    processed = 0
    lost = 0
    try:
        while processed < args.tasks:
            batch = min(args.max_tasks, args.tasks - processed)
            tasks = client.claim(args.worker_id, args.workload, batch, args.lease_seconds, args.wait_seconds)
            emit("claim", worker_id=args.worker_id, workload=args.workload,
                 tasks=[{"task_id": t["id"], "job_id": t["job_id"], "chunk_index": t.get("chunk_index", 0), "attempt": t["attempt"]} for t in tasks])
            if not tasks:
                break  # the queue ran dry (204 No Content)
            for task in tasks:
                processed += 1
                try:
                    process(client, args, task, processed)
                except LeaseLost as e:
                    # 409: someone else holds the task now (or it was cancelled, or the lease ran out).
                    # Whatever we computed must not be reported; drop it and carry on.
                    lost += 1
                    emit("lease_lost", task_id=e.task_id, attempt=task["attempt"], step=e.step, message=str(e), request_id=e.request_id)
                    print(f"lease lost on {e.step} of task {e.task_id} (X-Request-Id: {e.request_id}): {e}", file=sys.stderr)
    except ApiError as e:
        emit("error", step=e.step, status=e.status, code=e.code, message=e.message, request_id=e.request_id)
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except (urllib.error.URLError, OSError) as e:
        emit("error", step="connect", message=str(e), request_id=None)
        print(f"error: cannot reach {client.base}: {e}", file=sys.stderr)
        return EXIT_ERROR
    emit("done", processed=processed, lease_lost=lost)
    return EXIT_LEASE_LOST if lost else EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
