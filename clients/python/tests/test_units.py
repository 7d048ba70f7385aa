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


def test_a_task_error_reports_its_message_as_given_other_exceptions_with_their_class() -> None:
    from leasehold._task import error_message_of

    assert error_message_of(TaskError("frame 7 is corrupt", code="bad_frame")) == "frame 7 is corrupt"
    assert error_message_of(RetryableError("try later")) == "try later"
    assert error_message_of(ValueError("bad frame")) == "ValueError: bad frame"
    assert error_message_of(TaskError()) == "TaskError"
    assert len(error_message_of(TaskError("x" * 5000))) == 2000


def test_error_details_read_alike_from_connect_json_rest_json_and_grpc_trailers() -> None:
    import json

    from google.protobuf import any_pb2
    from google.rpc import error_details_pb2, status_pb2

    from leasehold import InvalidArgumentError, NotFoundError
    from leasehold._connect import connect_error
    from leasehold._grpc import _details

    violations = [("tasks[0].input_sha256", "must be 64 hexadecimal characters (sha256)"), ("tasks[1].input_uri", "is required")]
    connect = {"code": "invalid_argument", "message": "tasks[0].input_sha256: …", "details": [
        {"type": "google.rpc.BadRequest", "value": "…",
         "debug": {"field_violations": [{"field": f, "description": d, "reason": ""} for f, d in violations]}},
        {"type": "google.rpc.RequestInfo", "value": "…", "debug": {"request_id": "rid-1", "serving_data": ""}}]}
    rest = {"error": {"code": "invalid_argument", "message": "…", "request_id": "rid-2",
                      "violations": [{"field": f, "description": d} for f, d in violations]}}
    a = connect_error("CreateJob", 400, json.dumps(connect).encode(), "rid-1")
    b = connect_error("CreateJob", 400, json.dumps(rest).encode(), None)
    assert isinstance(a, InvalidArgumentError) and isinstance(b, InvalidArgumentError)
    assert [(v.field, v.description) for v in a.violations] == violations
    assert a.violations == b.violations and b.request_id == "rid-2"

    status = status_pb2.Status(code=3, message="…")
    bad = error_details_pb2.BadRequest(field_violations=[
        error_details_pb2.BadRequest.FieldViolation(field=f, description=d) for f, d in violations])
    info = error_details_pb2.ErrorInfo(reason="WORKLOAD_NOT_FOUND", domain="leasehold",
                                       metadata={"workload": "rendr", "known_workloads": "render,thumbs"})
    for detail in (bad, error_details_pb2.RequestInfo(request_id="rid-3"), info):
        packed = any_pb2.Any()
        packed.Pack(detail)
        status.details.append(packed)
    request_id, details = _details(status.SerializeToString())
    assert request_id == "rid-3"
    assert details["violations"] == a.violations
    assert (details["reason"], details["metadata"]) == ("WORKLOAD_NOT_FOUND", {"workload": "rendr",
                                                                                "known_workloads": "render,thumbs"})
    not_found = {"code": "not_found", "message": "workloads[0]: workload \"rendr\" not found", "details": [
        {"type": "google.rpc.ErrorInfo", "value": "…", "debug": {"reason": "WORKLOAD_NOT_FOUND", "domain": "leasehold",
                                                               "metadata": details["metadata"]}}]}
    c = connect_error("ClaimTasks", 404, json.dumps(not_found).encode(), None)
    assert isinstance(c, NotFoundError) and c.violations == []
    assert (c.reason, c.metadata) == (details["reason"], details["metadata"])


def test_the_client_refuses_what_it_cannot_send_before_sending_it() -> None:
    import pytest

    from leasehold import Client, InvalidArgumentError

    sha = "a" * 64
    for transport in ("json", "grpc"):
        with Client("http://127.0.0.1:1", transport=transport) as c:  # nothing listens: the check comes first
            with pytest.raises(InvalidArgumentError) as e:
                c.create_job("w", tasks=[{"chunk_index": 0, "input_uri": "s3://x", "input_sha": sha},
                                         {"chunkIndex": True, "inputUri": "s3://y", "inputSha256": sha}],
                             parameters={"when": datetime.now(timezone.utc)})
            assert [v.field for v in e.value.violations] == ["tasks[0].input_sha", "tasks[1].chunk_index",
                                                             "parameters.when"], transport
            assert e.value.request_id is None and e.value.code == "invalid_argument"


def test_failure_attempts_and_policies_read_in_either_spelling() -> None:
    from leasehold import Job, JobFailure, TaskAttempt, TaskDetail

    snap = JobSnapshot.from_json({"job": {"id": "j", "status": "JOB_STATUS_FAILED", "failurePolicy": "FAILURE_POLICY_CONTINUE",
                                          "maxFailedTasks": 2},
                                  "failure": {"taskId": "t", "chunkIndex": 3, "errorCode": "bad", "errorMessage": "m",
                                              "attempt": 2, "workerId": "w", "failedAt": "2026-12-01T10:00:00Z"}})
    assert snap.failure == JobFailure("t", 3, "bad", "m", 2, "w", datetime(2026, 12, 1, 10, tzinfo=timezone.utc))
    assert (snap.job.failure_policy, snap.job.max_failed_tasks) == ("continue", 2)
    assert JobSnapshot.from_json({"job": {"id": "j"}}).failure is None
    assert Job.from_json({"id": "j", "failure_policy": 1}).failure_policy == "fail_fast"
    detail = TaskDetail.from_json({"task": {"id": "t", "status": "TASK_STATUS_FAILED", "parameters": {"n": 2.0}},
                                   "attempts": [{"attempt": 1, "outcome": "ATTEMPT_OUTCOME_LEASE_EXPIRED",
                                                 "error_code": "lease_expired", "retried": True,
                                                 "last_progress": {"progress": 0.5, "message": "half"}}]})
    assert detail.task.parameters == {"n": 2} and type(detail.task.parameters["n"]) is int
    [a] = detail.attempts
    assert (a.outcome, a.retried, a.last_progress and a.last_progress.message) == ("lease_expired", True, "half")
    assert isinstance(a, TaskAttempt)


class _Coordinator:
    """A stand-in coordinator for one leased task whose heartbeats are refused with ``refusal``."""

    NIL = "00000000-0000-0000-0000-000000000000"

    def __init__(self, refusal: str) -> None:
        import threading

        self.refusal = refusal
        self.calls: list[tuple[str, dict[str, object]]] = []
        self.claimed = False
        self.reported = threading.Event()

    def call(self, method: str, request: dict[str, object], timeout: float, interrupt: object = None) -> dict[str, object]:
        import time

        from leasehold import AbortedError, NotFoundError

        self.calls.append((method, request))
        if request.get("task_id") == self.NIL:  # the worker's start probes
            raise NotFoundError(f'{method}: task_id: task "{self.NIL}" not found')
        if method == "ClaimTasks":
            if self.claimed:
                time.sleep(0.05)
                return {}
            self.claimed = True
            expires = datetime.fromtimestamp(time.time() + 30, timezone.utc).isoformat()
            return {"tasks": [{"id": "t1", "job_id": "j1", "workload": "w", "status": "TASK_STATUS_LEASED",
                               "attempt": 1, "lease_expires_at": expires}]}
        if method in ("RenewLease", "ReportProgress"):
            raise AbortedError(f"{method}: {self.refusal}")
        if method == "CompleteTasks":
            self.reported.set()
            return {"outcomes": [{"task_id": "t1", "task": {"id": "t1", "status": "TASK_STATUS_COMPLETED"}}]}
        if method == "FailTask":
            self.reported.set()
            raise AbortedError(f"{method}: {self.refusal}")
        raise AssertionError(method)

    def close(self) -> None:
        pass


def _run_one_task(monkeypatch: object, refusal: str, outcome: str) -> tuple[_Coordinator, dict[str, int]]:
    import threading

    import leasehold.worker as worker_module
    from leasehold import Result, Task, Worker

    fake = _Coordinator(refusal)
    monkeypatch.setattr(worker_module, "make_transport", lambda *a: fake)  # type: ignore[attr-defined]
    worker = Worker("http://127.0.0.1:1", workloads=["w"], heartbeat_interval=0.05, wait_seconds=0)
    told = threading.Event()

    @worker.handler("w")
    def handle(task: Task) -> Result:
        assert task.wait_cancelled(10)  # a refused heartbeat tells the handler
        told.set()
        if outcome == "raise":
            raise ValueError("gave up")
        return Result("mem://t1", "a" * 64)  # finished anyway

    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        assert told.wait(10)
        fake.reported.wait(1)
    finally:
        worker.stop()
        thread.join(10)
    return fake, worker.stats


def test_a_cancelled_tasks_result_is_still_reported_a_lost_leases_is_not(monkeypatch: object) -> None:
    fake, stats = _run_one_task(monkeypatch, "task t1 was cancelled", "result")
    [report] = [r for m, r in fake.calls if m == "CompleteTasks"]
    assert report["results"] == [{"task_id": "t1", "worker_id": report["results"][0]["worker_id"],  # type: ignore[index]
                                  "attempt": 1, "result_uri": "mem://t1", "result_sha256": "a" * 64}]
    assert (stats["completed"], stats["dropped"]) == (1, 0)
    beats = [m for m, r in fake.calls if m == "RenewLease" and r["task_id"] == "t1"]
    assert len(beats) == 1  # a cancelled task's lease is not renewed again

    fake, stats = _run_one_task(monkeypatch, "task t1 is leased by another worker", "result")
    assert not [m for m, r in fake.calls if m in ("CompleteTasks", "CompleteTask") and r.get("task_id") != fake.NIL]
    assert (stats["completed"], stats["dropped"]) == (0, 1)

    fake, stats = _run_one_task(monkeypatch, "task t1 was cancelled", "raise")  # nothing comes of its failure
    assert not [m for m, r in fake.calls if m == "FailTask" and r["task_id"] == "t1"]
    assert (stats["failed"], stats["dropped"]) == (0, 1)


def test_flow_control_fields_read_in_either_spelling_and_enum_form() -> None:
    from leasehold import TaskDetail, Workload

    snake = {"task": {"id": "t1", "status": "TASK_STATUS_PENDING", "concurrency_key": "acme",
                      "required_labels": {"gpu": "a100"}},
             "waiting_reason": "WAITING_REASON_LABELS_UNMATCHED", "waiting_detail": "needs labels gpu=a100"}
    camel = {"task": {"id": "t1", "status": "TASK_STATUS_PENDING", "concurrencyKey": "acme",
                      "requiredLabels": {"gpu": "a100"}},
             "waitingReason": 7, "waitingDetail": "needs labels gpu=a100"}
    a, b = TaskDetail.from_json(snake), TaskDetail.from_json(camel)
    assert a == b
    assert (a.waiting_reason, a.task.concurrency_key, a.task.required_labels) == ("labels_unmatched", "acme",
                                                                                  {"gpu": "a100"})
    # A leased task: the coordinator leaves the reason unset.
    assert TaskDetail.from_json({"task": {"id": "t1"}}).waiting_reason == ""
    w = Workload.from_json({"name": "w", "maxLeased": 8, "maxLeasedPerKey": 2, "maxLeasesPerSecond": 2.5,
                            "leasesBurst": 5, "paused": True})
    assert (w.max_leased, w.max_leased_per_key, w.max_leases_per_second, w.leases_burst, w.paused) == (8, 2, 2.5, 5, True)
    assert Workload.from_json({"name": "w"}).paused is False


def test_worker_labels_are_checked_locally_and_kept() -> None:
    import pytest

    from leasehold import Worker
    from leasehold._reporter import Reporter

    plain = Worker("http://127.0.0.1:1", workloads=["w"])
    labelled = Worker("http://127.0.0.1:1", workloads=["w"], labels={"gpu": "a100"})
    assert (plain.labels, labelled.labels) == ({}, {"gpu": "a100"})
    # A report's claim_next is a claim like the claimer's: it carries the labels, and none when there are none.
    assert Reporter(labelled)._claim_next(2) == {"workloads": ["w"], "labels": {"gpu": "a100"}, "max_tasks": 2}
    assert Reporter(plain)._claim_next(1) == {"workloads": ["w"]}
    with pytest.raises(ValueError, match="labels"):
        Worker("http://127.0.0.1:1", workloads=["w"], labels={"gpu": 100})  # type: ignore[dict-item]
