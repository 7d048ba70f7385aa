"""Worker processes against a live coordinator, over both transports: throughput across processes, a worker
killed mid-task, a coordinator restart, cancellation, a late result, drain on SIGTERM, a bad token prefix."""

from __future__ import annotations

import collections
import hashlib
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import Env, WorkerProc, wait_for

import leasehold.worker as worker_module
from leasehold import Client, Result, TaskSpec, UnavailableError, Worker


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def specs(n: int, per_chunk: Callable[[int], dict[str, Any]] | None = None) -> list[TaskSpec]:
    return [TaskSpec(i, f"s3://in/{i}", sha(str(i)), per_chunk(i) if per_chunk else None) for i in range(n)]


def drained(worker: WorkerProc) -> dict[str, int]:
    """SIGTERM, then the worker's final stats; it must exit 0."""
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.stderr
    stats: dict[str, int] = worker.of("stopped")[0]["stats"]
    return stats


def test_a_job_of_200_tasks_completed_by_3_worker_processes(admin: Client, workload: Callable[..., str],
                                                            spawn: Callable[..., WorkerProc]) -> None:
    w = workload(lease_seconds=30)
    job = admin.create_job(w, tasks=specs(200)).job
    workers = [spawn(w, f"pyw-many-{i}", concurrency=4) for i in range(3)]
    assert admin.wait(job.id, timeout=120).status == "completed"
    results = list(admin.results(job.id))
    assert [r.chunk_index for r in results] == list(range(200))
    assert all(r.metrics is not None and r.metrics["attempt"] == 1 for r in results)
    by_worker = collections.Counter(r.metrics["worker"] for r in results if r.metrics)
    assert set(by_worker) <= {f"pyw-many-{i}" for i in range(3)}
    stats = [drained(wp) for wp in workers]
    assert sum(s["completed"] for s in stats) == 200
    assert [s["completed"] for s in stats] == [by_worker[f"pyw-many-{i}"] for i in range(3)]
    assert sum(s["failed"] + s["dropped"] for s in stats) == 0


def test_a_worker_killed_mid_task_loses_nothing(admin: Client, workload: Callable[..., str],
                                                spawn: Callable[..., WorkerProc], tmp_path: Path) -> None:
    w = workload(lease_seconds=2)
    flag = tmp_path / "go"
    job = admin.create_job(w, tasks=specs(1, lambda i: {"action": "wait_file", "path": str(flag)})).job
    doomed = spawn(w, "pyw-doomed")
    doomed.wait_event("started")
    doomed.proc.kill()  # SIGKILL: no drain, no goodbye; the lease simply stops being renewed
    doomed.proc.wait()
    flag.touch()
    rescuer = spawn(w, "pyw-rescuer")
    started = rescuer.wait_event("started", timeout=30)
    assert started[0]["attempt"] == 2
    assert admin.wait(job.id, timeout=30).status == "completed"
    [result] = list(admin.results(job.id))
    assert result.metrics is not None
    assert (result.metrics["worker"], result.metrics["attempt"]) == ("pyw-rescuer", 2)
    assert drained(rescuer)["completed"] == 1


def test_workers_carry_on_through_a_coordinator_restart(env: Env, admin: Client, workload: Callable[..., str],
                                                        spawn: Callable[..., WorkerProc], transport: str) -> None:
    coordinator = env.coordinator(f"restart-{transport}")
    w = workload(lease_seconds=10)
    job = admin.create_job(w, tasks=specs(80, lambda i: {"action": "ok", "sleep": 0.05})).job
    workers = [spawn(w, f"pyw-restart-{i}", url=coordinator.url, concurrency=2) for i in range(2)]
    wait_for(lambda: admin.get_job(job.id).task_counts.completed >= 10, 60, "10 completed tasks")
    coordinator.stop()
    # The database is shared with the main coordinator: the job is still there, unfinished, while this one is down.
    assert admin.get_job(job.id).job.status == "running"
    coordinator.start()
    assert admin.wait(job.id, timeout=90).status == "completed"
    results = list(admin.results(job.id))
    assert [r.chunk_index for r in results] == list(range(80))
    assert all(wp.proc.poll() is None for wp in workers)  # no crash
    stats = [drained(wp) for wp in workers]
    assert sum(s["completed"] for s in stats) == 80
    assert any("coordinator reachable again" in wp.stderr or "delivered after the coordinator came back" in wp.stderr
               for wp in workers)
    coordinator.stop()


def test_cancel_reaches_the_running_handler_and_its_result_is_dropped(admin: Client, workload: Callable[..., str],
                                                                      spawn: Callable[..., WorkerProc]) -> None:
    # A 3 s lease: heartbeats every second, so the cancel arrives within about a second.
    w = workload(lease_seconds=3)
    job = admin.create_job(w, tasks=specs(1, lambda i: {"action": "hang"})).job
    worker = spawn(w, "pyw-cancel")
    [started] = worker.wait_event("started")
    admin.cancel(job.id, reason="user gave up")
    [cancelled] = worker.wait_event("cancelled", timeout=15)
    assert cancelled["task_id"] == started["task_id"]
    assert "aborted" in cancelled["reason"]
    stats = drained(worker)
    assert (stats["dropped"], stats["completed"], stats["failed"]) == (1, 0, 0)
    assert worker.stderr.count(f"dropping the result of task {started['task_id']}") == 1
    assert "refused" not in worker.stderr  # dropped before sending, not sent into a 409
    snap = admin.get_job(job.id)
    assert (snap.job.status, snap.task_counts.cancelled) == ("cancelled", 1)
    assert list(admin.results(job.id)) == []


def test_a_late_result_is_refused_logged_and_not_retried(admin: Client, workload: Callable[..., str],
                                                         spawn: Callable[..., WorkerProc]) -> None:
    # No heartbeat before the 1 s lease runs out: the reaper fails the task (one attempt), then the handler
    # returns and the worker sends a result the coordinator must refuse.
    w = workload(lease_seconds=1, max_attempts=1)
    job = admin.create_job(w, tasks=specs(1, lambda i: {"action": "outlive"})).job
    worker = spawn(w, "pyw-late", heartbeat_interval=600)
    [started] = worker.wait_event("started")
    worker.wait_event("finished", timeout=30)
    line = f"late result of task {started['task_id']} (attempt 1) refused"
    wait_for(lambda: line in worker.stderr, 15, "the refusal log line")
    stats = drained(worker)
    assert worker.stderr.count(line) == 1
    assert (stats["dropped"], stats["completed"]) == (1, 0)
    snap = admin.get_job(job.id)
    assert (snap.job.status, snap.task_counts.failed) == ("failed", 1)
    assert list(admin.results(job.id)) == []


def test_drain_on_sigterm_finishes_in_flight_work_and_gives_back_the_rest(
        admin: Client, workload: Callable[..., str], spawn: Callable[..., WorkerProc], tmp_path: Path) -> None:
    w = workload(lease_seconds=30)
    paths = [tmp_path / "chunk0", tmp_path / "chunk1"]
    job = admin.create_job(w, tasks=specs(3, lambda i: {"action": "wait_file", "path": str(paths[i])} if i < 2 else {})).job
    worker = spawn(w, "pyw-drain", concurrency=2, drain_timeout=2)
    worker.wait_event("started", count=2)
    worker.signal(signal.SIGTERM)
    paths[0].touch()  # chunk 0 finishes during the drain; chunk 1 outlives the drain deadline
    assert worker.wait() == 0, worker.stderr
    stats = worker.of("stopped")[0]["stats"]
    # Chunk 0 may finish before the worker handles the signal; its lane then claims chunk 2, which the
    # draining worker gives back as it arrives.
    assert stats["claimed"] in (2, 3)
    assert (stats["completed"], stats["released"]) == (1, stats["claimed"] - 1)
    [finished1] = [e for e in worker.of("finished") if e["chunk"] == 1]
    assert finished1["cancelled"] is True  # the handler was told
    snap = admin.get_job(job.id)
    assert (snap.task_counts.completed, snap.task_counts.pending, snap.task_counts.leased) == (1, 2, 0), worker.stderr
    assert [r.chunk_index for r in admin.results(job.id)] == [0]

    # Given back as retryable with no delay: the next worker gets it at once, on its next attempt.
    paths[1].touch()
    successor = spawn(w, "pyw-successor", concurrency=2)
    assert admin.wait(job.id, timeout=30).status == "completed"
    attempts = {r.chunk_index: r.metrics["attempt"] for r in admin.results(job.id) if r.metrics}
    assert attempts == {0: 1, 1: 2, 2: stats["claimed"] - 1}
    assert drained(successor)["completed"] == 2


def test_a_worker_id_outside_the_token_prefix_fails_at_start(env: Env, workload: Callable[..., str],
                                                              spawn: Callable[..., WorkerProc]) -> None:
    w = workload()
    worker = spawn(w, "gpu-7")
    assert worker.wait(30) == 2
    assert "'gpu-7'" in worker.stderr and "prefix" in worker.stderr
    assert "pyw-" in worker.stderr  # the token's prefix, as the coordinator named it
    bad = spawn(w, "pyw-1", token="not-a-token")
    assert bad.wait(30) == 2
    assert "refuses the token" in bad.stderr


def test_exceptions_become_failures_and_progress_is_reported(admin: Client, workload: Callable[..., str],
                                                             spawn: Callable[..., WorkerProc]) -> None:
    w = workload(lease_seconds=30, max_attempts=3)
    broken = admin.create_job(w, tasks=specs(1, lambda i: {"action": "raise"})).job
    flaky = admin.create_job(w, tasks=specs(1, lambda i: {"action": "retryable"})).job
    chatty = admin.create_job(w, tasks=specs(1, lambda i: {"action": "progress"})).job
    watches = {j.id: admin.watch(j.id, timeout=60) for j in (broken, flaky, chatty)}
    for it in watches.values():
        assert next(it).snapshot is not None
    worker = spawn(w, "pyw-errors")
    events = {job_id: [u.event for u in it if u.event is not None] for job_id, it in watches.items()}

    failed = [e for e in events[broken.id] if e.task_status == "failed"]
    assert [(e.error_code, e.attempt) for e in failed] == [("value_error", 1)]
    assert admin.get_job(broken.id).job.status == "failed"

    retried = [(e.previous_task_status, e.task_status, e.attempt, e.error_code) for e in events[flaky.id]
               if e.kind == "task_status" and e.previous_task_status == "leased"]
    assert retried == [("leased", "pending", 1, "retryable_error"), ("leased", "completed", 2, "")]

    progress = [(e.progress, e.message, e.worker_id) for e in events[chatty.id] if e.kind == "task_progress"]
    assert progress == [(0.5, "halfway", "pyw-errors")]
    assert admin.get_job(chatty.id).job.status == "completed"
    stats = drained(worker)
    assert (stats["completed"], stats["failed"]) == (2, 2)


def test_a_lost_complete_tasks_answer_is_sent_again_and_accepted(
        env: Env, admin: Client, workload: Callable[..., str], transport: str, monkeypatch: Any) -> None:
    # The first CompleteTasks is applied by the coordinator but its answer "lost" on the way back.
    w = workload(lease_seconds=30)
    job = admin.create_job(w, tasks=specs(5)).job
    real = worker_module.make_transport
    lost: list[int] = []

    class LossyTransport:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def call(self, method: str, request: dict[str, Any], timeout: float, interrupt: Any = None) -> dict[str, Any]:
            answer: dict[str, Any] = self.inner.call(method, request, timeout, interrupt)
            if method == "CompleteTasks" and not lost:
                lost.append(len(request["results"]))
                raise UnavailableError("the answer was lost")
            return answer

        def close(self) -> None:
            self.inner.close()

    monkeypatch.setattr(worker_module, "make_transport", lambda *a: LossyTransport(real(*a)))
    worker = Worker(env.main.url, workloads=[w], token=env.tokens.worker, worker_id="pyw-lossy", transport=transport,
                    concurrency=5)
    worker.handler(w)(lambda task: Result(uri=f"mem://{task.chunk_index}", sha256=sha(str(task.chunk_index))))
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        assert admin.wait(job.id, timeout=30).status == "completed"
    finally:
        worker.stop()
        runner.join(30)
    assert lost and lost[0] >= 1
    assert (worker.stats["completed"], worker.stats["dropped"], worker.stats["failed"]) == (5, 0, 0)
    assert [r.result_uri for r in admin.results(job.id)] == [f"mem://{i}" for i in range(5)]


def test_process_lanes_run_handlers_in_child_processes(admin: Client, workload: Callable[..., str],
                                                       spawn: Callable[..., WorkerProc]) -> None:
    w = workload(lease_seconds=30)
    job = admin.create_job(w, tasks=specs(4, lambda i: {"action": "progress"})).job
    worker = spawn(w, "pyw-procs", concurrency=2, executor="process")
    [running] = worker.wait_event("running")
    assert admin.wait(job.id, timeout=60).status == "completed"
    pids = {r.metrics["pid"] for r in admin.results(job.id) if r.metrics}
    assert pids and running["pid"] not in pids

    # A cancel found by the parent's heartbeat reaches the handler in its child process.
    w2 = workload(lease_seconds=3)
    hung = admin.create_job(w2, tasks=specs(1, lambda i: {"action": "hang"})).job
    worker2 = spawn(w2, "pyw-procs-2", executor="process")
    [started] = worker2.wait_event("started")
    assert started["pid"] != worker2.wait_event("running")[0]["pid"]
    admin.cancel(hung.id)
    [cancelled] = worker2.wait_event("cancelled", timeout=15)
    assert cancelled["task_id"] == started["task_id"]
    assert drained(worker2)["dropped"] == 1
    assert drained(worker)["completed"] == 4


def test_the_jobs_traceparent_is_the_handlers_trace_context(admin: Client, workload: Callable[..., str],
                                                            spawn: Callable[..., WorkerProc]) -> None:
    # opentelemetry-api is installed (no SDK): the handler's current span carries the job's trace.
    w = workload(lease_seconds=30)
    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    job = admin.create_job(w, tasks=specs(1, lambda i: {"action": "trace"}), traceparent=f"00-{trace_id}-{span_id}-01").job
    worker = spawn(w, "pyw-trace")
    [seen] = worker.wait_event("trace")
    assert seen["trace_id"] == trace_id
    assert admin.wait(job.id, timeout=30).status == "completed"
    assert drained(worker)["completed"] == 1
