"""A worker process for the tests: one handler whose behaviour each task's parameters choose.

Argument: a JSON object with the Worker's options plus ``admin_token``. Prints one JSON event per line.
Task parameters: ``{"action": ...}``:
  - ``ok`` (default): returns a result at once; ``sleep`` seconds of work first when given.
  - ``hang``: waits until the task is cancelled, then returns a result anyway (the worker must drop it).
  - ``wait_file``: waits until the file ``path`` exists (or the task is cancelled), then returns a result.
  - ``outlive``: waits until the job is failed (its lease expired, reaped), then returns a result.
  - ``raise``: raises ValueError; ``retryable``: raises RetryableError on attempt 1, then succeeds.
  - ``usage``: returns a result with the usage ``usage`` (the parameter); with ``fail_usage``, attempt 1 first
    raises RetryableError carrying ``fail_usage``, and with ``fail_for_good`` a TaskError carrying it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
import time
from typing import Any

from leasehold import Client, Result, RetryableError, Task, TaskError, Worker, WorkerConfigError

_print_lock = threading.Lock()


def in_child(task: Task) -> Result:
    """The handler of process lanes (module level, so a child process can run it)."""
    if task.parameters.get("action") == "hang":
        emit("started", task_id=task.id, chunk=task.chunk_index, attempt=task.attempt, pid=os.getpid())
        task.wait_cancelled(120)
        emit("cancelled", task_id=task.id, chunk=task.chunk_index, pid=os.getpid())
    else:
        task.progress(0.5, "halfway")
    body = f"{task.id}:{task.attempt}".encode()
    return Result(uri=f"mem://{task.job_id}/{task.chunk_index}", sha256=hashlib.sha256(body).hexdigest(),
                  metrics={"worker": task.worker_id, "attempt": task.attempt, "pid": os.getpid()})


def emit(event: str, **fields: Any) -> None:
    with _print_lock:
        print(json.dumps({"event": event, **fields}), flush=True)


def main() -> int:
    config = json.loads(sys.argv[1])
    admin_token = config.pop("admin_token")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
    worker = Worker(config.pop("url"), **config)
    admin = Client(worker.url, token=admin_token, transport="json")

    def result(task: Task, **metrics: Any) -> Result:
        body = f"{task.id}:{task.attempt}".encode()
        return Result(uri=f"mem://{task.job_id}/{task.chunk_index}", sha256=hashlib.sha256(body).hexdigest(),
                      metrics={"worker": worker.worker_id, "attempt": task.attempt, "pid": os.getpid(), **metrics})

    def handle(task: Task) -> Result:
        action = task.parameters.get("action", "ok")
        emit("started", task_id=task.id, chunk=task.chunk_index, attempt=task.attempt, action=action)
        if action == "ok":
            if task.parameters.get("sleep"):
                time.sleep(float(task.parameters["sleep"]))
            return result(task)
        if action == "hang":
            task.wait_cancelled(120)
            emit("cancelled", task_id=task.id, chunk=task.chunk_index, reason=task.cancel_reason)
            return result(task)
        if action == "wait_file":
            path = task.parameters["path"]
            while not os.path.exists(path) and not task.cancelled:
                task.wait_cancelled(0.05)
            emit("finished", task_id=task.id, chunk=task.chunk_index, cancelled=task.cancelled)
            return result(task)
        if action == "outlive":
            while admin.get_job(task.job_id).job.status != "failed":
                time.sleep(0.1)
            emit("finished", task_id=task.id, chunk=task.chunk_index, cancelled=task.cancelled)
            return result(task)
        if action == "trace":
            from opentelemetry import trace

            ctx = trace.get_current_span().get_span_context()
            emit("trace", task_id=task.id, trace_id=f"{ctx.trace_id:032x}", span_id=f"{ctx.span_id:016x}")
            return result(task)
        if action == "progress":
            task.progress(0.5, "halfway")
            return result(task)
        if action == "raise":
            raise ValueError(f"chunk {task.chunk_index} is malformed")
        if action == "usage":
            if task.parameters.get("fail_for_good"):
                raise TaskError("no luck", code="no_luck", usage=task.parameters["fail_usage"])
            if task.parameters.get("fail_usage") and task.attempt == 1:
                raise RetryableError("try again", retry_after=0, usage=task.parameters["fail_usage"])
            r = result(task)
            return Result(uri=r.uri, sha256=r.sha256, metrics=r.metrics, usage=task.parameters["usage"])
        if action == "retryable":
            if task.attempt == 1:
                raise RetryableError("try again", retry_after=0)
            return result(task)
        raise AssertionError(f"unknown action {action}")

    for name in worker.workloads:
        worker.handler(name)(in_child if worker.executor == "process" else handle)
    emit("running", worker_id=worker.worker_id, pid=os.getpid())
    try:
        worker.run()
    except WorkerConfigError as e:
        print(f"leasehold worker: {e}", file=sys.stderr)
        return 2
    emit("stopped", stats=worker.stats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
