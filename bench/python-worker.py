"""No-op tasks per second through one Python worker process (the leasehold package), per transport.

    .venv/bin/python bench/python-worker.py [--tasks 5000] [--concurrency 32] [--runs 1]

Starts a coordinator (`node --import tsx src/main.ts`) on an embedded PostgreSQL in a temporary directory
(or on DATABASE_URL, a migrated database), then for each transport (Connect JSON, gRPC) and each mode
(prefetch, batched results, reports carrying claim_next: on and off) queues --tasks no-op tasks and runs
one Worker in this process until it has completed them all. Prints one line per run: tasks/s (wall clock
from run() until the last result is acknowledged), CPU seconds per 1,000 tasks of the worker and of the
coordinator with its embedded PostgreSQL (their whole process tree; with DATABASE_URL only the
coordinator's), and the worker's calls per task. A benchmark, not a test: numbers move with the machine's
load.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import leasehold.worker as worker_module
from leasehold import Client, DeadlineExceededError, Result, Task, TaskSpec, UnavailableError, Worker

ROOT = Path(__file__).resolve().parents[1]
SHA = hashlib.sha256(b"noop").hexdigest()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_coordinator(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PORT", "HOST", "AUTH_TOKENS_FILE")}
    env.update(PORT=str(port), LOG_LEVEL="warn")
    if "DATABASE_URL" not in env:
        os.chmod(tmp, 0o755)
        env.update(EMBEDDED_PG_DIR=str(tmp / "pg"), EMBEDDED_PG_PORT=str(free_port()))
    log = open(tmp / "coordinator.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(["node", "--import", "tsx", "src/main.ts"], cwd=ROOT, env=env, stdout=log, stderr=log)
    deadline = time.monotonic() + 90
    while not re.search(r"leasehold listening on", (tmp / "coordinator.log").read_text(errors="replace")):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"coordinator did not start:\n{(tmp / 'coordinator.log').read_text()}")
        time.sleep(0.1)
    return proc, f"http://127.0.0.1:{port}"


class CountingTransport:
    """The worker's transport, counting its calls by method."""

    def __init__(self, inner: Any, calls: collections.Counter[str]) -> None:
        self.inner, self.calls = inner, calls

    def call(self, method: str, request: dict[str, Any], timeout: float, interrupt: Any = None) -> dict[str, Any]:
        self.calls[method] += 1
        answer: dict[str, Any] = self.inner.call(method, request, timeout, interrupt)
        return answer

    def close(self) -> None:
        self.inner.close()


def tree_cpu(root: int) -> float:
    """CPU seconds of a process and its descendants (reaped children included): the coordinator and its
    embedded PostgreSQL."""
    parent: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        times[int(entry)] = sum(int(x) for x in fields[11:15]) / tick
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo.extend(child for child, p in parent.items() if p == pid)
    return total


def one_run(url: str, admin: Client, coordinator: int, transport: str, prefetch: bool, batched: bool, claim: bool,
            tasks: int, concurrency: int, n: int, work: float) -> None:
    workload = f"bench_{transport}_{int(prefetch)}{int(batched)}{int(claim)}_{n}"
    admin.put_workload(workload, lease_seconds=60)
    for start in range(0, tasks, 500):
        count = min(500, tasks - start)
        chunks = [TaskSpec(i, f"mem://in/{i}", SHA) for i in range(count)]
        # On a loaded machine a large CreateJob can hit the statement timeout; the key makes a retry safe.
        for attempt in range(5):
            try:
                admin.create_job(workload, tasks=chunks, idempotency_key=f"{workload}-{start}")
                break
            except (DeadlineExceededError, UnavailableError):
                if attempt == 4:
                    raise
                time.sleep(1)
    calls: collections.Counter[str] = collections.Counter()
    make = worker_module.make_transport
    worker_module.make_transport = lambda *a: CountingTransport(make(*a), calls)  # type: ignore[assignment]
    worker = Worker(url, workloads=[workload], concurrency=concurrency, transport=transport, wait_seconds=1,
                    prefetch=prefetch, batch_results=batched, claim_with_results=claim)

    @worker.handler(workload)
    def noop(task: Task) -> Result:
        if work:
            time.sleep(work)
        return Result(uri="mem://out", sha256=SHA)

    def stop_when_done() -> None:
        while worker.stats["completed"] < tasks:
            time.sleep(0.005)
        worker.stop()

    threading.Thread(target=stop_when_done, daemon=True).start()
    cpu0, server0, t0 = time.process_time(), tree_cpu(coordinator), time.perf_counter()
    try:
        worker.run()
    finally:
        worker_module.make_transport = make
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    server = tree_cpu(coordinator) - server0
    mode = (("prefetch" if prefetch else "1 per claim") + ", " + ("batches" if batched else "each")
            + ", " + ("claim_next" if claim else "no claim_next"))
    # The identity probe at start is not part of the work.
    work = sum(calls.values()) - calls["RenewLease"]
    print(f"{transport:4}  {mode:36}  {tasks / elapsed:8,.0f} tasks/s  ({tasks} tasks in {elapsed:5.2f} s; "
          f"CPU per 1,000 tasks: worker {cpu / tasks * 1000:.2f} s, coordinator + PostgreSQL "
          f"{server / tasks * 1000:.2f} s; {work / tasks:.3f} calls per task: {calls['ClaimTasks']} ClaimTasks, "
          f"{calls['CompleteTasks'] + calls['CompleteTask']} reports)", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=5000)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--transports", default="json,grpc")
    p.add_argument("--work-ms", type=float, default=0.0, help="each task sleeps this long in its handler")
    p.add_argument("--batched-only", action="store_true",
                   help="only the prefetch + CompleteTasks batches modes (with and without claim_next)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="leasehold-pybench-") as d:
        proc, url = start_coordinator(Path(d))
        try:
            load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
            handler = f"{args.work_ms:g} ms handler" if args.work_ms else "no-op handler"
            print(f"one worker process, {args.concurrency} lanes, {handler}; coordinator {url}; "
                  f"{os.cpu_count()} CPUs, load average {load}", flush=True)
            with Client(url) as admin:
                for n in range(args.runs):
                    for transport in args.transports.split(","):
                        modes = ((True, True, True), (True, True, False))
                        if not args.batched_only:
                            modes += ((True, False, True), (True, False, False), (False, True, True),
                                      (False, False, False))
                        for prefetch, batched, claim in modes:
                            # The slow modes need fewer tasks for a stable figure.
                            tasks = args.tasks if prefetch and batched else min(args.tasks, 1000)
                            one_run(url, admin, proc.pid, transport, prefetch, batched, claim, tasks,
                                    args.concurrency, n, args.work_ms / 1000)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
