"""Parts that need no coordinator: reading either JSON spelling, and error codes from exceptions."""

from __future__ import annotations

from datetime import datetime, timezone

from leasehold import JobEvent, JobSnapshot, RetryableError, TaskError, TaskRecord, WatchUpdate, error_code_of


class HTTPTimeoutError(Exception):
    pass


def test_answers_read_the_same_in_proto_names_camel_case_and_without_defaults() -> None:
    snake = {"id": "t1", "job_id": "j1", "chunk_index": 0, "workload": "w", "status": "TASK_STATUS_LEASED",
             "attempt": 1, "lease_expires_at": "2026-11-30T10:00:00.123456789Z",
             "parameters": {"someKey": 1, "other_key": 2}, "error_code": ""}
    camel = {"id": "t1", "jobId": "j1", "workload": "w", "status": "TASK_STATUS_LEASED", "attempt": 1,
             "leaseExpiresAt": "2026-11-30T10:00:00.123456789Z", "parameters": {"someKey": 1, "other_key": 2}}
    a, b = TaskRecord.from_json(snake), TaskRecord.from_json(camel)
    assert a == b
    assert (a.chunk_index, a.status, a.error_code, a.max_attempts) == (0, "leased", "", 0)
    assert a.lease_expires_at == datetime(2026, 11, 30, 10, 0, 0, 123456, tzinfo=timezone.utc)
    assert a.parameters == {"someKey": 1, "other_key": 2}  # user data is never renamed

    snap = JobSnapshot.from_json({"job": {"id": "j1", "status": "JOB_STATUS_RUNNING"}, "taskCounts": {"leased": 2}})
    assert (snap.job.status, snap.task_counts.leased, snap.task_counts.pending, snap.total_tasks) == ("running", 2, 0, 0)
    event = WatchUpdate.from_json({"event": {"id": "42", "jobId": "j1", "kind": "JOB_EVENT_KIND_TASK_STATUS",
                                             "taskStatus": "TASK_STATUS_COMPLETED", "previousTaskStatus": 2}}).event
    assert event == JobEvent(id=42, job_id="j1", kind="task_status", task_status="completed",
                             previous_task_status="leased")


def test_error_codes_fit_the_coordinator_limits() -> None:
    assert error_code_of(ValueError("x")) == "value_error"
    assert error_code_of(HTTPTimeoutError()) == "http_timeout_error"
    assert error_code_of(RetryableError("later")) == "retryable_error"
    assert error_code_of(TaskError("bad", code="Bad Input!")) == "bad_input"
    long = type("A" * 100 + "Error", (Exception,), {})
    code = error_code_of(long())
    assert len(code) == 64 and code == "a" * 64


def test_worker_id_defaults_to_hostname_pid_and_is_checked_locally() -> None:
    import os
    import socket

    import pytest

    from leasehold import Worker

    assert Worker("http://127.0.0.1:1", workloads=["w"]).worker_id == f"{socket.gethostname()}-{os.getpid()}"
    prefixed = Worker("http://127.0.0.1:1", workloads=["w"], worker_prefix="gpu-")
    assert prefixed.worker_id == f"gpu-{socket.gethostname()}-{os.getpid()}"
    with pytest.raises(ValueError, match="worker_id"):
        Worker("http://127.0.0.1:1", workloads=["w"], worker_id="has space")
    with pytest.raises(ValueError, match="transport"):
        Worker("http://127.0.0.1:1", workloads=["w"], transport="carrier-pigeon")
