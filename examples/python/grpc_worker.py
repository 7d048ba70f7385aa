#!/usr/bin/env python3
"""A Leasehold worker over gRPC, with `grpcio` stubs generated from the proto.

    pip install grpcio grpcio-tools protobuf googleapis-common-protos
    python3 examples/python/grpc_worker.py --target 127.0.0.1:8080 \
        --workload thumbnails --worker-id py-grpc-1 --tasks 2

The stubs are generated at run time from proto/leasehold/queue/v1/queue.proto
(`python3 -m grpc_tools.protoc`) into a cache directory keyed by the proto's
content, so nothing generated is committed; `--generate-only` just does that.

Flow, per task: ClaimTasks -> RenewLease (heartbeat) -> (simulated work in
--progress-steps steps, each followed by ReportProgress with progress =
step/steps and a message "step k/n", which also extends the lease) ->
CompleteTask with a result manifest (result_uri, sha256 of the result bytes,
metrics Struct). Every task but the last of --tasks N is completed; with N >= 2
the last one is reported with FailTask (retryable=false) to show the failure
path. The channel is grpc.insecure_channel: cleartext HTTP/2 with prior
knowledge, which the coordinator's single port accepts.

Prints one JSON object per line on stdout for every action (claim, heartbeat,
progress, complete, fail, lease_lost, error, done), in the same shape as json_worker.py.
Exit status: 0 when every task was processed as planned (or the queue ran dry
first); 3 when a lease was lost (ABORTED: the task was reclaimed, cancelled or
its lease expired; the worker drops it and goes on); 1 on any other error;
2 on bad arguments or when the stubs cannot be generated.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_LEASE_LOST = 3

PROTO_FILE = "leasehold/queue/v1/queue.proto"
DEFAULT_PROTO_ROOT = Path(__file__).resolve().parent.parent.parent / "proto"


def emit(action: str, **fields: Any) -> None:
    """One JSON line per action, flushed at once so a supervising process sees it."""
    print(json.dumps({"action": action, **fields}, sort_keys=True), flush=True)


def google_api_protos() -> Path:
    """Where googleapis-common-protos keeps google/api/annotations.proto, which the proto imports.

    The same package provides google.api.annotations_pb2, which the generated queue_pb2 imports.
    """
    from google.api import annotations_pb2  # noqa: PLC0415 - only stub generation needs it

    return Path(annotations_pb2.__file__).resolve().parent.parent.parent


def generate_stubs(proto_root: Path, stubs_dir: Optional[Path] = None) -> Path:
    """Generates queue_pb2.py and queue_pb2_grpc.py (once per proto content) and returns their root.

    The cache directory name carries a hash of the proto, so an edited proto gets
    fresh stubs. Generation goes to a temporary directory first and is renamed
    into place, so concurrent workers never import a half-written module.
    """
    proto_path = proto_root / PROTO_FILE
    digest = hashlib.sha256(proto_path.read_bytes()).hexdigest()[:16]
    if stubs_dir is None:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path(tempfile.gettempdir()))
        stubs_dir = cache / f"leasehold-py-stubs-{digest}"
    if (stubs_dir / "leasehold/queue/v1/queue_pb2_grpc.py").exists():
        return stubs_dir
    stubs_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".leasehold-stubs-", dir=stubs_dir.parent))
    try:
        cmd = [sys.executable, "-m", "grpc_tools.protoc", f"-I{proto_root}", f"-I{google_api_protos()}",
               f"--python_out={work}", f"--grpc_python_out={work}", str(proto_path)]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if run.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stderr.strip()}")
        try:
            os.rename(work, stubs_dir)
        except OSError:
            if not (stubs_dir / "leasehold/queue/v1/queue_pb2_grpc.py").exists():
                raise  # not "another worker got there first"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return stubs_dir


def load_stubs(stubs_dir: Path):
    """Imports the generated modules. The package is leasehold.queue.v1, so nothing shadows the stdlib `queue`."""
    sys.path.insert(0, str(stubs_dir))
    pb2 = importlib.import_module("leasehold.queue.v1.queue_pb2")
    pb2_grpc = importlib.import_module("leasehold.queue.v1.queue_pb2_grpc")
    return pb2, pb2_grpc


def request_id_of(err) -> Optional[str]:
    """The coordinator's X-Request-Id of a failed call (sent in the response metadata)."""
    for getter in ("trailing_metadata", "initial_metadata"):
        try:
            for key, value in getattr(err, getter)() or ():
                if key.lower() == "x-request-id":
                    return value
        except Exception:  # noqa: BLE001 - metadata is best effort
            pass
    return None


class LeaseLost(Exception):
    """ABORTED: we no longer hold the lease; drop the task."""

    def __init__(self, step: str, task_id: str, message: str, request_id: Optional[str]):
        super().__init__(message)
        self.step, self.task_id, self.request_id = step, task_id, request_id


class ApiError(Exception):
    """Any other failed call (UNAVAILABLE, ALREADY_EXISTS, INVALID_ARGUMENT, ...)."""

    def __init__(self, step: str, code: str, message: str, request_id: Optional[str]):
        super().__init__(f"{step}: {code}: {message} (x-request-id: {request_id})")
        self.step, self.code, self.message, self.request_id = step, code, message, request_id


class Worker:
    def __init__(self, args: argparse.Namespace, pb2, pb2_grpc, grpc_module):
        self.args, self.pb2, self.grpc = args, pb2, grpc_module
        self.channel = grpc_module.insecure_channel(args.target)
        self.stub = pb2_grpc.QueueServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def status_name(self, task) -> str:
        return self.pb2.TaskStatus.Name(task.status)

    @staticmethod
    def lease_expires_at(task) -> Optional[str]:
        return task.lease_expires_at.ToJsonString() if task.HasField("lease_expires_at") else None

    def call(self, step: str, task_id: str, method, request, timeout: float):
        try:
            return method(request, timeout=timeout)
        except self.grpc.RpcError as err:
            if err.code() == self.grpc.StatusCode.ABORTED:
                # We no longer hold this lease: it was reclaimed, cancelled or expired.
                raise LeaseLost(step, task_id, err.details(), request_id_of(err)) from None
            raise ApiError(step, err.code().name, err.details(), request_id_of(err)) from None

    def claim(self, max_tasks: int):
        req = self.pb2.ClaimTasksRequest(worker_id=self.args.worker_id, workloads=[self.args.workload],
                                         max_tasks=max_tasks, wait_seconds=self.args.wait_seconds)
        if self.args.lease_seconds is not None:
            req.lease_seconds = self.args.lease_seconds
        return self.call("claim", "", self.stub.ClaimTasks, req, self.args.timeout + self.args.wait_seconds).tasks

    def process(self, task, number: int) -> None:
        args, pb2 = self.args, self.pb2
        started = time.monotonic()
        req = pb2.RenewLeaseRequest(task_id=task.id, worker_id=args.worker_id, attempt=task.attempt)
        if args.lease_seconds is not None:
            req.lease_seconds = args.lease_seconds
        renewed = self.call("heartbeat", task.id, self.stub.RenewLease, req, args.timeout).task
        emit("heartbeat", task_id=task.id, attempt=task.attempt, lease_expires_at=self.lease_expires_at(renewed))
        steps = args.progress_steps
        if steps == 0 and args.work_seconds > 0:
            time.sleep(args.work_seconds)  # no progress reports: the work in one go
        for step in range(1, steps + 1):
            if args.work_seconds > 0:
                time.sleep(args.work_seconds / steps)
            # ReportProgress is lease-checked like RenewLease (ABORTED when the lease is no longer ours)
            # and extends the lease the same way.
            progress, message = step / steps, f"step {step}/{steps}"
            req = pb2.ReportProgressRequest(task_id=task.id, worker_id=args.worker_id, attempt=task.attempt,
                                            progress=progress, message=message)
            if args.lease_seconds is not None:
                req.lease_seconds = args.lease_seconds
            reported = self.call("progress", task.id, self.stub.ReportProgress, req, args.timeout).task
            emit("progress", task_id=task.id, attempt=task.attempt, progress=progress, message=message,
                 lease_expires_at=self.lease_expires_at(reported))

        if args.tasks >= 2 and number == args.tasks:
            error_code, error_message = "example_failure", f"grpc_worker was told to fail task {number} of {args.tasks}"
            failed = self.call("fail", task.id, self.stub.FailTask, pb2.FailTaskRequest(
                task_id=task.id, worker_id=args.worker_id, attempt=task.attempt,
                error_code=error_code, error_message=error_message, retryable=False), args.timeout).task
            emit("fail", task_id=task.id, attempt=task.attempt, error_code=error_code, error_message=error_message,
                 retryable=False, status=self.status_name(failed))
            return

        # The "work": a small result document; its bytes are what the manifest's sha256 covers.
        result = json.dumps({"task_id": task.id, "chunk_index": task.chunk_index, "input_uri": task.input_uri,
                             "worker": args.worker_id}, sort_keys=True).encode("utf-8")
        result_uri = f"{args.result_prefix}/{task.job_id}/{task.chunk_index}.json"
        result_sha256 = hashlib.sha256(result).hexdigest()
        metrics = {"bytes": len(result), "duration_ms": round((time.monotonic() - started) * 1000, 3), "worker": args.worker_id}
        req = pb2.CompleteTaskRequest(task_id=task.id, worker_id=args.worker_id, attempt=task.attempt,
                                      result_uri=result_uri, result_sha256=result_sha256)
        req.metrics.update(metrics)  # google.protobuf.Struct (numbers become doubles)
        done = self.call("complete", task.id, self.stub.CompleteTask, req, args.timeout).task
        emit("complete", task_id=task.id, attempt=task.attempt, result_uri=result_uri, result_sha256=result_sha256,
             metrics=metrics, status=self.status_name(done))


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Leasehold worker over gRPC (grpcio stubs generated from the proto).")
    p.add_argument("--target", default="127.0.0.1:8080", help="coordinator host:port (default %(default)s)")
    p.add_argument("--workload", help="registered workload to claim from")
    p.add_argument("--worker-id", help="stable id of this worker (the lease owner)")
    p.add_argument("--tasks", type=int, default=2,
                   help="tasks to process before exiting; all but the last are completed, and with 2 or more "
                        "the last is reported as a non-retryable failure (default %(default)s)")
    p.add_argument("--max-tasks", type=int, default=1, help="max_tasks per ClaimTasks (default %(default)s)")
    p.add_argument("--lease-seconds", type=int, default=None, help="lease length to ask for (default: the workload's)")
    p.add_argument("--wait-seconds", type=int, default=2, help="long-poll a claim up to this long (default %(default)s)")
    p.add_argument("--work-seconds", type=float, default=0.0, help="simulated work time between heartbeat and result")
    p.add_argument("--progress-steps", type=int, default=4,
                   help="split the work into this many steps, reporting progress (which extends the lease) after "
                        "each; 0 reports no progress (default %(default)s)")
    p.add_argument("--result-prefix", default="example://leasehold-results", help="prefix of the result_uri written in manifests")
    p.add_argument("--timeout", type=float, default=10.0, help="per-call deadline in seconds (default %(default)s)")
    p.add_argument("--proto-root", type=Path, default=DEFAULT_PROTO_ROOT, help="directory holding leasehold/queue/v1/queue.proto")
    p.add_argument("--stubs-dir", type=Path, default=None, help="where to generate the stubs (default: leasehold-py-stubs-<proto hash> in $XDG_CACHE_HOME, else the temp dir)")
    p.add_argument("--generate-only", action="store_true", help="generate the stubs, print their directory (a JSON line) and exit")
    args = p.parse_args(argv)
    if not args.generate_only and (not args.workload or not args.worker_id):
        p.error("--workload and --worker-id are required")
    if args.tasks < 1 or args.max_tasks < 1:
        p.error("--tasks and --max-tasks must be at least 1")
    if args.progress_steps < 0:
        p.error("--progress-steps must be at least 0")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        import grpc  # noqa: PLC0415 - a clear message beats an ImportError at the top
    except ImportError:
        print("error: grpcio is not installed; run: pip install grpcio grpcio-tools protobuf googleapis-common-protos", file=sys.stderr)
        return EXIT_USAGE
    try:
        stubs_dir = generate_stubs(args.proto_root, args.stubs_dir)
        pb2, pb2_grpc = load_stubs(stubs_dir)
    except (RuntimeError, OSError, ImportError, subprocess.TimeoutExpired) as e:
        print(f"error: cannot generate or import the stubs (pip install grpcio grpcio-tools protobuf googleapis-common-protos): {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.generate_only:
        emit("stubs", dir=str(stubs_dir))
        return EXIT_OK

    worker = Worker(args, pb2, pb2_grpc, grpc)
    processed = 0
    lost = 0
    try:
        while processed < args.tasks:
            tasks = worker.claim(min(args.max_tasks, args.tasks - processed))
            emit("claim", worker_id=args.worker_id, workload=args.workload,
                 tasks=[{"task_id": t.id, "job_id": t.job_id, "chunk_index": t.chunk_index, "attempt": t.attempt} for t in tasks])
            if not tasks:
                break  # the queue ran dry
            for task in tasks:
                processed += 1
                try:
                    worker.process(task, processed)
                except LeaseLost as e:
                    # ABORTED: someone else holds the task now (or it was cancelled, or the lease ran out).
                    # Whatever we computed must not be reported; drop it and carry on.
                    lost += 1
                    emit("lease_lost", task_id=e.task_id, attempt=task.attempt, step=e.step, message=str(e), request_id=e.request_id)
                    print(f"lease lost on {e.step} of task {e.task_id} (x-request-id: {e.request_id}): {e}", file=sys.stderr)
    except LeaseLost as e:  # a claim is never ABORTED today; treat it as an error if it ever is
        emit("error", step=e.step, code="ABORTED", message=str(e), request_id=e.request_id)
        print(f"error: {e.step}: ABORTED: {e} (x-request-id: {e.request_id})", file=sys.stderr)
        return EXIT_ERROR
    except ApiError as e:
        emit("error", step=e.step, code=e.code, message=e.message, request_id=e.request_id)
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        worker.close()
    emit("done", processed=processed, lease_lost=lost)
    return EXIT_LEASE_LOST if lost else EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
