"""A submitter explains a failed job with the package alone, over both transports: the job's failure, every
failed chunk with its error and attempts, the events' error fields, and the ordered results of the others;
and the same typed errors, with the same violations, from both transports."""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from conftest import Env, WorkerProc

from leasehold import (
    Client,
    InvalidArgumentError,
    LeaseholdError,
    Result,
    Task,
    TaskError,
    TaskSpec,
    Worker,
    WorkerConfigError,
)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_failed_job_explains_itself(admin: Client, workload: Callable[..., str],
                                      spawn: Callable[..., WorkerProc]) -> None:
    w = workload(lease_seconds=30, max_attempts=1)
    # Chunk 3 fails; the others finish first (they are claimed first: chunk order within equal priority).
    tasks = [TaskSpec(i, f"s3://in/{i}", sha(str(i)), {"action": "raise"} if i == 3 else {"action": "ok"})
             for i in range(4)]
    job = admin.create_job(w, tasks=tasks).job
    updates = admin.watch(job.id, timeout=60)
    assert next(updates).snapshot is not None
    worker = spawn(w, "pyw-explain", concurrency=1)
    events = [u.event for u in updates if u.event is not None]
    assert admin.wait(job.id, timeout=60).status == "failed"

    snap = admin.get_job(job.id)
    assert snap.failure is not None
    f = snap.failure
    assert (f.chunk_index, f.error_code, f.error_message, f.attempt, f.worker_id) == \
        (3, "value_error", "ValueError: chunk 3 is malformed", 1, "pyw-explain")
    assert f.failed_at is not None and f.task_id

    failed = list(admin.list_tasks(job.id, status="failed"))
    assert [(d.task.chunk_index, d.task.status, d.task.error_code, d.task.error_message) for d in failed] == \
        [(3, "failed", "value_error", "ValueError: chunk 3 is malformed")]
    [attempt] = failed[0].attempts
    assert (attempt.attempt, attempt.worker_id, attempt.outcome, attempt.error_code, attempt.retried) == \
        (1, "pyw-explain", "failed", "value_error", False)
    assert attempt.leased_at is not None and attempt.ended_at is not None

    detail = admin.get_task(f.task_id)
    assert detail == failed[0]

    every = list(admin.list_tasks(job.id, page_size=1))  # every page
    assert [d.task.chunk_index for d in every] == [0, 1, 2, 3]
    assert [d.task.status for d in every] == ["completed", "completed", "completed", "failed"]
    assert all(d.attempts[-1].outcome == "completed" for d in every[:3])

    [event] = [e for e in events if e.task_status == "failed"]
    assert (event.chunk_index, event.error_code, event.error_message) == \
        (3, "value_error", "ValueError: chunk 3 is malformed")
    assert events[-1].kind == "job_status" and events[-1].job_status == "failed"

    results = list(admin.results(job.id))
    assert [r.chunk_index for r in results] == [0, 1, 2]
    worker.signal(15)
    assert worker.wait() == 0


def test_a_task_error_with_its_own_code_reports_its_message_as_given(admin: Client, workload: Callable[..., str],
                                                                      env: Env, transport: str) -> None:
    w = workload(lease_seconds=30, max_attempts=1)
    job = admin.create_job(w, tasks=[TaskSpec(0, "s3://in/0", sha("0"))]).job
    worker = Worker(env.main.url, workloads=[w], token=env.tokens.worker, transport=transport,  # type: ignore[arg-type]
                    worker_id=f"pyw-taskerror-{transport}", wait_seconds=1)

    @worker.handler(w)
    def fail(task: Task) -> Result:
        raise TaskError("frame 7 is corrupt", code="bad_frame")

    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        assert admin.wait(job.id, timeout=30).status == "failed"
    finally:
        worker.stop()
        thread.join(30)
    failure = admin.get_job(job.id).failure
    assert failure is not None
    assert (failure.error_code, failure.error_message) == ("bad_frame", "frame 7 is corrupt")


def test_bad_input_raises_the_same_errors_with_violations_on_both_transports(admin: Client,
                                                                               workload: Callable[..., str]) -> None:
    w = workload()
    good = {"chunk_index": 0, "input_uri": "s3://in/0", "input_sha256": sha("0")}

    def refused(**kwargs: Any) -> InvalidArgumentError:
        with pytest.raises(InvalidArgumentError) as e:
            admin.create_job(w, **kwargs)
        assert e.value.code == "invalid_argument"
        return e.value

    # Refused by the client before anything is sent (over gRPC no message can carry them).
    e = refused(tasks=[good, {**good, "chunk_index": 1, "chunk_idx": 1}])
    assert [(v.field, v.description.split(" (")[0]) for v in e.violations] == [("tasks[1].chunk_idx", "unknown field")]
    assert e.request_id is None
    e = refused(tasks=[{**good, "chunk_index": "zero"}])
    assert [v.field for v in e.violations] == ["tasks[0].chunk_index"]
    e = refused(tasks=[good], parameters={"frames": {1, 2}, "fps": float("nan")})
    assert [v.field for v in e.violations] == ["parameters.frames", "parameters.fps"]

    # Refused by the coordinator: its google.rpc.BadRequest details, read from either transport.
    e = refused(tasks=[{**good, "input_sha256": "abc"}, {**good, "input_uri": ""}])
    assert [v.field for v in e.violations] == ["tasks[0].input_sha256", "tasks[1].chunk_index", "tasks[1].input_uri"]
    assert e.violations[0].description == "must be 64 hexadecimal characters (sha256)"
    assert e.request_id
    assert "tasks[0].input_sha256" in str(e)

    # Errors that are not about fields carry none.
    with pytest.raises(LeaseholdError) as missing:
        admin.get_job(str(uuid.uuid4()))
    assert missing.value.code == "not_found" and missing.value.violations == []


def test_a_misspelled_workload_fails_the_worker_at_start(env: Env, admin: Client, workload: Callable[..., str],
                                                         spawn: Callable[..., WorkerProc], transport: str) -> None:
    w = workload()
    typo = f"{w}x"
    # A worker token: the coordinator's refusal names the workload.
    worker = spawn(typo, "pyw-typo")
    assert worker.wait(30) == 2, worker.stderr
    assert f'"{typo}"' in worker.stderr and "not found" in worker.stderr
    assert not worker.of("started")

    # Beside a busy workload (whose claims find tasks, and so never look at the other names): still at start.
    job = admin.create_job(w, tasks=[TaskSpec(0, "s3://in/0", sha("0"))]).job
    both = spawn(w, "pyw-typo-both", workloads=[w, typo])
    assert both.wait(30) == 2, both.stderr
    assert f'"{typo}"' in both.stderr and not both.of("started")
    assert admin.get_job(job.id).task_counts.pending == 1  # nothing was claimed

    # An admin token may list the workloads: the message names the known ones.
    admin_worker = Worker(env.main.url, workloads=[typo], token=env.tokens.admin, transport=transport,  # type: ignore[arg-type]
                          worker_id=f"pyw-typo-admin-{transport}", wait_seconds=1)
    admin_worker.handler(typo)(lambda task: Result("mem://x", sha("x")))
    with pytest.raises(WorkerConfigError) as e:
        admin_worker.run()
    assert typo in str(e.value) and w in str(e.value).replace(f'"{typo}"', "")




def test_failure_policy_settings_are_stored_and_read_back(admin: Client, workload: Callable[..., str]) -> None:
    plain = workload()
    [registered] = [x for x in admin.list_workloads() if x.name == plain]
    assert (registered.failure_policy, registered.max_failed_tasks) == ("fail_fast", 0)
    w = workload(failure_policy="continue", max_failed_tasks=1)
    [registered] = [x for x in admin.list_workloads() if x.name == w]
    assert (registered.failure_policy, registered.max_failed_tasks) == ("continue", 1)
    tasks = [TaskSpec(0, "s3://in/0", sha("0"))]
    job = admin.create_job(w, tasks=tasks).job  # the workload's settings
    assert (job.failure_policy, job.max_failed_tasks) == ("continue", 1)
    strict = admin.create_job(w, tasks=tasks, failure_policy="fail_fast", max_failed_tasks=0).job
    assert (strict.failure_policy, strict.max_failed_tasks) == ("fail_fast", 0)
    assert admin.get_job(strict.id).job.failure_policy == "fail_fast"
    assert next(iter(admin.list_jobs(workload=w))).failure_policy in ("continue", "fail_fast")
    with pytest.raises(InvalidArgumentError) as e:
        admin.create_job(w, tasks=tasks, max_failed_tasks=-1)
    assert [v.field for v in e.value.violations] == ["max_failed_tasks"]


def test_failure_policy_continue_lets_the_other_chunks_finish(admin: Client, workload: Callable[..., str],
                                                             spawn: Callable[..., WorkerProc]) -> None:
    w = workload(lease_seconds=30, max_attempts=1)
    # Chunk 1 fails at once while the others take a moment: fail-fast would cancel most of them.
    tasks = [TaskSpec(i, f"s3://in/{i}", sha(str(i)), {"action": "raise"} if i == 1 else {"action": "ok", "sleep": 0.3})
             for i in range(6)]
    job = admin.create_job(w, tasks=tasks, failure_policy="continue").job
    assert (job.failure_policy, job.max_failed_tasks) == ("continue", 0)
    worker = spawn(w, "pyw-continue", concurrency=2)
    assert admin.wait(job.id, timeout=60).status == "failed"
    snap = admin.get_job(job.id)
    assert (snap.task_counts.completed, snap.task_counts.failed, snap.task_counts.cancelled) == (5, 1, 0)
    assert snap.failure is not None and snap.failure.chunk_index == 1
    assert [d.task.chunk_index for d in admin.list_tasks(job.id, status="failed")] == [1]
    assert [r.chunk_index for r in admin.results(job.id)] == [0, 2, 3, 4, 5]
    worker.signal(15)
    assert worker.wait() == 0


def test_a_workload_tolerating_failed_chunks_completes_its_jobs(admin: Client, workload: Callable[..., str],
                                                                spawn: Callable[..., WorkerProc]) -> None:
    w = workload(lease_seconds=30, max_attempts=1, failure_policy="continue", max_failed_tasks=1)
    [registered] = [x for x in admin.list_workloads() if x.name == w]
    assert (registered.failure_policy, registered.max_failed_tasks) == ("continue", 1)
    tasks = [TaskSpec(i, f"s3://in/{i}", sha(str(i)), {"action": "raise"} if i == 2 else {"action": "ok"})
             for i in range(4)]
    job = admin.create_job(w, tasks=tasks).job  # the workload's settings
    assert (job.failure_policy, job.max_failed_tasks) == ("continue", 1)
    strict = admin.create_job(w, tasks=tasks, failure_policy="fail_fast", max_failed_tasks=0).job
    assert (strict.failure_policy, strict.max_failed_tasks) == ("fail_fast", 0)
    worker = spawn(w, "pyw-tolerant", concurrency=2)
    done = admin.wait(job.id, timeout=60)
    assert done.status == "completed"
    snap = admin.get_job(job.id)
    assert (snap.task_counts.completed, snap.task_counts.failed, snap.failure) == (3, 1, None)
    assert [d.task.error_code for d in admin.list_tasks(job.id, status="failed")] == ["value_error"]
    assert [r.chunk_index for r in admin.results(job.id)] == [0, 1, 3]
    assert admin.wait(strict.id, timeout=60).status == "failed"
    worker.signal(15)
    assert worker.wait() == 0
