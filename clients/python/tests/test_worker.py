"""Worker processes against a live coordinator, over both transports: throughput across processes, a worker
killed mid-task, a coordinator restart, cancellation (a result returned within the lease is kept), a result after
the lease, drain on SIGTERM, a bad token prefix."""

from __future__ import annotations

import collections
import copy
import hashlib
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Env, WorkerProc, wait_for

import leasehold.worker as worker_module
from leasehold import Client, InvalidArgumentError, Result, RetryableError, TaskSpec, UnavailableError, Worker
from leasehold.models import field_of


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


def test_cancel_reaches_the_running_handler_and_a_result_it_still_returns_is_kept(
        admin: Client, workload: Callable[..., str], spawn: Callable[..., WorkerProc]) -> None:
    # A 3 s lease: heartbeats every second, so the cancel arrives within about a second.
    w = workload(lease_seconds=3)
    job = admin.create_job(w, tasks=specs(1, lambda i: {"action": "hang"})).job
    worker = spawn(w, "pyw-cancel")
    [started] = worker.wait_event("started")
    admin.cancel(job.id, reason="user gave up")
    [cancelled] = worker.wait_event("cancelled", timeout=15)
    assert cancelled["task_id"] == started["task_id"]
    assert "aborted" in cancelled["reason"] and "was cancelled" in cancelled["reason"]
    stats = drained(worker)
    # The handler was told to stop and returned a result anyway, within the lease: the coordinator keeps it
    # (the work is done), and the job stays cancelled.
    assert (stats["dropped"], stats["completed"], stats["failed"]) == (0, 1, 0), worker.stderr
    assert "refused" not in worker.stderr
    assert admin.get_job(job.id).job.status == "cancelled"
    assert [(r.chunk_index, r.task_id) for r in admin.results(job.id)] == [(0, started["task_id"])]


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
    paths = [tmp_path / "chunk0", tmp_path / "chunk1", tmp_path / "chunk2"]
    # Every chunk waits for its file: a chunk 2 claimed before the signal is handled (below) is then in
    # flight at the drain too, never completed by the draining worker however late the signal lands.
    job = admin.create_job(w, tasks=specs(3, lambda i: {"action": "wait_file", "path": str(paths[i])})).job
    worker = spawn(w, "pyw-drain", concurrency=2, drain_timeout=2)
    worker.wait_event("started", count=2)
    worker.signal(signal.SIGTERM)
    paths[0].touch()  # chunk 0 finishes during the drain; chunk 1 outlives the drain deadline
    assert worker.wait() == 0, worker.stderr
    stats = worker.of("stopped")[0]["stats"]
    # Chunk 0 may finish before the worker handles the signal; its lane then claims chunk 2, which the
    # draining worker gives back with chunk 1.
    assert stats["claimed"] in (2, 3)
    assert (stats["completed"], stats["released"]) == (1, stats["claimed"] - 1)
    [finished1] = [e for e in worker.of("finished") if e["chunk"] == 1]
    assert finished1["cancelled"] is True  # the handler was told
    snap = admin.get_job(job.id)
    assert (snap.task_counts.completed, snap.task_counts.pending, snap.task_counts.leased) == (1, 2, 0), worker.stderr
    assert [r.chunk_index for r in admin.results(job.id)] == [0]

    # Given back as retryable with no delay: the next worker gets it at once, on its next attempt.
    paths[1].touch()
    paths[2].touch()
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
    stats2 = drained(worker2)
    assert (stats2["dropped"], stats2["completed"]) == (0, 1)  # its result, returned within the lease, is kept
    assert [r.task_id for r in admin.results(hung.id)] == [started["task_id"]]
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


class Recorder:
    """The worker's transport, recording every call, and how many tasks the worker holds at most.

    A task is held from the answer that leased it (a claim, or a report's ``next_tasks``) to the answer that
    took its result or failure. ``refuse`` may raise instead of calling the coordinator.
    """

    def __init__(self, inner: Any, refuse: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self.inner = inner
        self.refuse = refuse
        self.lock = threading.Lock()
        self.calls: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
        self.held: set[str] = set()
        self.max_held = 0

    def call(self, method: str, request: dict[str, Any], timeout: float, interrupt: Any = None) -> dict[str, Any]:
        sent = copy.deepcopy(request)
        if self.refuse is not None:
            self.refuse(method, sent)
        answer: dict[str, Any] = self.inner.call(method, request, timeout, interrupt)
        with self.lock:
            self.calls.append((method, sent, answer))
            leased = field_of(answer, "tasks" if method == "ClaimTasks" else "next_tasks") or []
            done = [r["task_id"] for r in sent.get("results", [sent]) if method in REPORTS]
            self.held.difference_update(done)
            self.held.update(t["id"] for t in leased)
            self.max_held = max(self.max_held, len(self.held))
        return answer

    def of(self, *methods: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        with self.lock:
            return [(req, ans) for m, req, ans in self.calls if m in methods]

    def claims_that_leased(self) -> int:
        return sum(1 for _, ans in self.of("ClaimTasks") if field_of(ans, "tasks"))

    def close(self) -> None:
        self.inner.close()


REPORTS = ("CompleteTask", "CompleteTasks", "FailTask")


def run_worker(env: Env, admin: Client, job_id: str, worker: Worker, *, sleep: float = 0.0,
               stop_after: int | None = None, retry_first_attempt: Callable[[int], bool] | None = None) -> int:
    """Runs ``worker`` with a handler of ``sleep`` seconds until the job completes (or ``stop_after`` results);
    returns the most handlers that ran at once. Chunks ``retry_first_attempt`` picks fail their first attempt
    (retryable, due at once)."""
    lock = threading.Lock()
    running = [0, 0]

    def handle(task: Any) -> Result:
        with lock:
            running[0] += 1
            running[1] = max(running)
        time.sleep(sleep)
        with lock:
            running[0] -= 1
        if retry_first_attempt is not None and task.attempt == 1 and retry_first_attempt(task.chunk_index):
            raise RetryableError("once more", retry_after=0)
        return Result(uri=f"mem://{task.chunk_index}", sha256=sha(str(task.chunk_index)))

    for w in worker.workloads:
        worker.handler(w)(handle)
    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        if stop_after is None:
            assert admin.wait(job_id, timeout=60).status == "completed"
        else:
            wait_for(lambda: worker.stats["completed"] >= stop_after, 60, f"{stop_after} results")
    finally:
        worker.stop()
        runner.join(60)
    assert not runner.is_alive()
    return running[1]


def recording(monkeypatch: Any, refuse: Callable[[str, dict[str, Any]], None] | None = None) -> list[Recorder]:
    made: list[Recorder] = []
    real = worker_module.make_transport

    def make(*a: Any) -> Recorder:
        made.append(Recorder(real(*a), refuse))
        return made[-1]

    monkeypatch.setattr(worker_module, "make_transport", make)
    return made


def test_reports_claim_the_next_tasks_so_a_busy_worker_needs_one_call_per_batch(
        env: Env, admin: Client, workload: Callable[..., str], transport: str, monkeypatch: Any) -> None:
    w = workload(lease_seconds=30)
    job = admin.create_job(w, tasks=specs(60)).job
    made = recording(monkeypatch)
    worker = Worker(env.main.url, workloads=[w], token=env.tokens.worker, worker_id="pyw-chain", transport=transport,
                    concurrency=4, wait_seconds=1)
    peak = run_worker(env, admin, job.id, worker, sleep=0.01)
    [rec] = made
    assert worker.stats == {"claimed": 60, "completed": 60, "failed": 0, "dropped": 0, "released": 0}
    # The first claim fills the lanes; from then on each report refills the lanes it frees. The long-poll
    # claims only lease again once a report comes back short (the backlog ran out), and here nothing came after.
    assert rec.claims_that_leased() == 1
    reports = rec.of("CompleteTask", "CompleteTasks")
    leased_by_reports = sum(len(field_of(ans, "next_tasks") or []) for _, ans in reports)
    assert leased_by_reports == 60 - len(field_of(rec.of("ClaimTasks")[0][1], "tasks"))
    assert len(reports) <= 60
    for req, _ in reports:
        claim = req["claim_next"]  # every report but none in a drain (this one had nothing left to report)
        assert claim["workloads"] == [w] and "wait_seconds" not in claim and "worker_id" not in claim
        assert 1 <= claim.get("max_tasks", 1) <= 4
    # Never more leased to it than it has lanes, and never two claims for one lane.
    assert rec.max_held <= 4 and peak <= 4
    assert [r.result_uri for r in admin.results(job.id)] == [f"mem://{i}" for i in range(60)]


def test_a_failure_holds_its_lane_until_reported_and_carries_no_claim(
        env: Env, admin: Client, workload: Callable[..., str], transport: str, monkeypatch: Any) -> None:
    w = workload(lease_seconds=30, max_attempts=3)
    job = admin.create_job(w, tasks=specs(30)).job
    made = recording(monkeypatch)
    worker = Worker(env.main.url, workloads=[w], token=env.tokens.worker, worker_id="pyw-chain-fail",
                    transport=transport, concurrency=3, wait_seconds=1)
    run_worker(env, admin, job.id, worker, sleep=0.005, retry_first_attempt=lambda chunk: chunk % 5 == 0)
    [rec] = made
    assert worker.stats == {"claimed": 36, "completed": 30, "failed": 6, "dropped": 0, "released": 0}
    assert all("claim_next" not in req for req, _ in rec.of("FailTask"))
    assert rec.max_held <= 3
    assert [r.chunk_index for r in admin.results(job.id)] == list(range(30))


def test_without_claim_with_results_the_claims_do_all_the_leasing(
        env: Env, admin: Client, workload: Callable[..., str], transport: str, monkeypatch: Any) -> None:
    w = workload(lease_seconds=30)
    job = admin.create_job(w, tasks=specs(40)).job
    made = recording(monkeypatch)
    worker = Worker(env.main.url, workloads=[w], token=env.tokens.worker, worker_id="pyw-nochain", transport=transport,
                    concurrency=4, wait_seconds=1, claim_with_results=False)
    run_worker(env, admin, job.id, worker, sleep=0.01)
    [rec] = made
    assert (worker.stats["claimed"], worker.stats["completed"]) == (40, 40)
    assert all("claim_next" not in req for req, _ in rec.of("CompleteTask", "CompleteTasks"))
    assert rec.claims_that_leased() >= 10  # at most 4 lanes' worth per claim


def test_a_drain_claims_nothing_through_reports_and_leaves_nothing_leased(
        env: Env, admin: Client, workload: Callable[..., str], transport: str, monkeypatch: Any) -> None:
    w = workload(lease_seconds=30)
    job = admin.create_job(w, tasks=specs(200)).job
    made = recording(monkeypatch)
    worker = Worker(env.main.url, workloads=[w], token=env.tokens.worker, worker_id="pyw-chain-drain",
                    transport=transport, concurrency=4, wait_seconds=1)
    run_worker(env, admin, job.id, worker, sleep=0.02, stop_after=20)
    [rec] = made
    stats = worker.stats
    assert stats["completed"] >= 20 and stats["failed"] == stats["dropped"] == 0
    # Tasks a report leased just as the drain began were given back at once, as a claim's are.
    assert stats["claimed"] == stats["completed"] + stats["released"]
    snap = admin.get_job(job.id)
    assert (snap.task_counts.leased, snap.task_counts.completed) == (0, stats["completed"])
    assert rec.max_held <= 4


def test_a_batch_refused_as_invalid_is_sent_one_by_one_and_the_claims_take_over(
        env: Env, admin: Client, workload: Callable[..., str], transport: str, monkeypatch: Any) -> None:
    w = workload(lease_seconds=30)
    job = admin.create_job(w, tasks=specs(12)).job

    def refuse(method: str, request: dict[str, Any]) -> None:
        if method == "CompleteTasks":
            raise InvalidArgumentError("CompleteTasks: results[0].result_uri: refused by the test")

    made = recording(monkeypatch, refuse)
    worker = Worker(env.main.url, workloads=[w], token=env.tokens.worker, worker_id="pyw-chain-invalid",
                    transport=transport, concurrency=3, wait_seconds=1)
    run_worker(env, admin, job.id, worker)
    [rec] = made
    assert worker.stats == {"claimed": 12, "completed": 12, "failed": 0, "dropped": 0, "released": 0}
    assert len(rec.of("CompleteTask")) == 12 and rec.of("CompleteTasks") == []
    assert all("claim_next" not in req for req, _ in rec.of("CompleteTask"))
    assert rec.max_held <= 3


@pytest.mark.parametrize("batch_results", [True, False])
def test_a_coordinator_without_claim_next_gets_results_without_it(
        env: Env, admin: Client, workload: Callable[..., str], transport: str, monkeypatch: Any,
        batch_results: bool) -> None:
    # As an older coordinator answers over Connect JSON: the unknown field refuses the call, writing nothing.
    w = workload(lease_seconds=30)
    job = admin.create_job(w, tasks=specs(10)).job
    refused: list[str] = []

    def refuse(method: str, request: dict[str, Any]) -> None:
        if "claim_next" in request:
            refused.append(method)
            raise InvalidArgumentError(f'{method}: cannot decode message from JSON: key "claim_next" is unknown')

    made = recording(monkeypatch, refuse)
    worker = Worker(env.main.url, workloads=[w], token=env.tokens.worker, worker_id="pyw-chain-old",
                    transport=transport, concurrency=2, wait_seconds=1, batch_results=batch_results)
    run_worker(env, admin, job.id, worker)
    [rec] = made
    assert worker.stats == {"claimed": 10, "completed": 10, "failed": 0, "dropped": 0, "released": 0}
    assert len(refused) == 1  # asked once, then never again
    assert rec.claims_that_leased() >= 5
    assert [r.result_uri for r in admin.results(job.id)] == [f"mem://{i}" for i in range(10)]
