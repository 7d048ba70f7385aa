"""The money path from the client: usage a handler reports, accounts, billing context, settlement.

The first tests need no coordinator (usage checks, reading answers, the requests built); the rest run against
a live coordinator over both transports.
"""

from __future__ import annotations

import hashlib
import pickle
import re
import uuid
from collections.abc import Callable

import pytest
from conftest import WorkerProc, wait_for

from leasehold import (
    Account,
    AlreadyExistsError,
    Billing,
    Client,
    FailedPreconditionError,
    InvalidArgumentError,
    Job,
    JobEvent,
    NotFoundError,
    ResourceExhaustedError,
    Result,
    RetryableError,
    Settlement,
    TaskAttempt,
    TaskError,
    TaskSpec,
    UnavailableError,
    WatchUpdate,
)
from leasehold.accounts import AccountUsage
from leasehold.errors import error_for


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ---------- no coordinator ----------


def test_a_result_and_a_failure_carry_usage_checked_where_the_handler_builds_them() -> None:
    r = Result("s3://out/0", sha("0"), usage={"gpu_ms": 1200, "tokens.in": 5})
    assert r.usage == {"gpu_ms": 1200, "tokens.in": 5}
    assert Result("s3://out/0", sha("0")).usage is None
    for bad, words in [({"GPU": 1}, "counter name 'GPU'"), ({"gpu_ms": -1}, r"Result.usage\[gpu_ms\]"),
                       ({"gpu_ms": 1.5}, "an int"), ({"gpu_ms": True}, "an int"), ({"gpu_ms": 2**53}, "2\\*\\*53"),
                       ({f"k{i}": 1 for i in range(33)}, "at most 32")]:
        with pytest.raises(ValueError, match=words):
            Result("s3://out/0", sha("0"), usage=bad)
    err = RetryableError("again", retry_after=1, usage={"gpu_ms": 7})
    assert (err.usage, err.retryable) == ({"gpu_ms": 7}, True)
    # Process lanes pickle a handler's exception: its usage survives the trip.
    back = pickle.loads(pickle.dumps(TaskError("oom", code="oom", usage={"gpu_ms": 9})))
    assert (type(back), back.code, back.usage) == (TaskError, "oom", {"gpu_ms": 9})
    with pytest.raises(ValueError, match=r"TaskError\.usage"):
        TaskError("x", usage={"a": -3})


def test_money_fields_read_alike_from_proto_json_and_grpc_dicts() -> None:
    # Proto JSON writes int64 as strings; the gRPC transport hands ints. Both read as ints.
    json_job = {"id": "j1", "status": "JOB_STATUS_COMPLETED", "account": "acme",
                "billing": {"reservedUnits": "500", "billingKey": "order-7"}, "usage": {"gpu_ms": "1200"},
                "settlement": {"settlementKey": "inv-1", "settledUnits": "300", "settledAt": "2026-12-04T10:00:00Z"}}
    grpc_job = {"id": "j1", "status": "JOB_STATUS_COMPLETED", "account": "acme",
                "billing": {"reserved_units": 500, "billing_key": "order-7"}, "usage": {"gpu_ms": 1200},
                "settlement": {"settlement_key": "inv-1", "settled_units": 300, "settled_at": "2026-12-04T10:00:00Z"}}
    a, b = Job.from_json(json_job), Job.from_json(grpc_job)
    assert a == b
    assert (a.account, a.billing, a.usage) == ("acme", Billing(500, "order-7"), {"gpu_ms": 1200})
    assert a.settlement is not None and (a.settlement.settlement_key, a.settlement.settled_units) == ("inv-1", 300)
    bare = Job.from_json({"id": "j2", "status": "JOB_STATUS_RUNNING"})
    assert (bare.account, bare.billing, bare.usage, bare.settlement) == ("", None, {}, None)
    assert Settlement.from_json({}) is None
    attempt = TaskAttempt.from_json({"attempt": 2, "outcome": "ATTEMPT_OUTCOME_FAILED", "usage": {"gpu_ms": "4"}})
    assert attempt.usage == {"gpu_ms": 4}
    event = WatchUpdate.from_json({"event": {"id": "9", "jobId": "j1", "kind": "JOB_EVENT_KIND_SETTLED",
                                             "settlementKey": "inv-1", "settledUnits": "300"}}).event
    assert event == JobEvent(id=9, job_id="j1", kind="settled", settlement_key="inv-1", settled_units=300)
    usage = AccountUsage.from_json({"account": "acme", "workloads": [
        {"workload": "render", "jobs": "2", "tasksCompleted": "5", "leaseSeconds": 1.5, "usage": {"gpu_ms": "9"}}]})
    [w] = usage.workloads
    assert (usage.account, w.workload, w.jobs, w.tasks_completed, w.tasks_failed, w.lease_seconds, w.usage) == (
        "acme", "render", 2, 5, 0, 1.5, {"gpu_ms": 9})
    assert Account.from_json({"name": "acme", "maxPendingTasks": 10, "pendingTasks": 3}) == Account(
        "acme", max_pending_tasks=10, pending_tasks=3)


def test_usage_goes_into_the_grpc_messages_of_results_and_failures() -> None:
    pytest.importorskip("grpc")
    from leasehold._grpc import request_message

    one = {"task_id": str(uuid.uuid4()), "worker_id": "w", "attempt": 1, "result_uri": "s3://o", "result_sha256": sha("o"),
           "usage": {"gpu_ms": 12, "tokens": 2**53 - 1}}
    msg = request_message("CompleteTasks", {"results": [one]})
    assert dict(msg.results[0].usage) == {"gpu_ms": 12, "tokens": 2**53 - 1}
    fail = request_message("FailTask", {"task_id": one["task_id"], "worker_id": "w", "attempt": 1,
                                               "error_code": "oom", "usage": {"gpu_ms": 3}})
    assert dict(fail.usage) == {"gpu_ms": 3}
    created = request_message("CreateJob", {"workload": "w", "account": "acme",
                                                   "billing": Billing(500, "order-7").to_json()})
    assert (created.account, created.billing.reserved_units, created.billing.billing_key) == ("acme", 500, "order-7")


def test_a_bad_billing_context_is_refused_before_anything_is_sent() -> None:
    client = Client("http://127.0.0.1:1", timeout=1)  # nothing listens: a request sent would be unavailable
    with pytest.raises(InvalidArgumentError) as e:
        client.create_job("w", input_uri="s3://in", input_sha256=sha("in"),
                          billing={"reserved_units": "5", "billing_ky": "x"})
    assert [v.field for v in e.value.violations] == ["billing.reserved_units", "billing.billing_ky"]
    with pytest.raises(UnavailableError):
        client.create_job("w", input_uri="s3://in", input_sha256=sha("in"), billing={"reserved_units": 5})


def test_a_quota_refusal_is_its_own_class_and_still_unavailable() -> None:
    err = error_for("resource_exhausted", "CreateJob: account acme has 10 pending tasks of 10")
    assert isinstance(err, ResourceExhaustedError) and isinstance(err, UnavailableError)
    assert err.code == "resource_exhausted"


# ---------- against a live coordinator (the server's money path) ----------

_seq = 0


def account_name(transport: str) -> str:
    global _seq
    _seq += 1
    return f"acct-{_seq}-{transport}-{uuid.uuid4().hex[:8]}"


def test_usage_from_results_and_failures_sums_into_the_job(admin: Client, workload: Callable[..., str],
                                                           spawn: Callable[..., WorkerProc]) -> None:
    w = workload(lease_seconds=30, max_attempts=3)
    tasks = [TaskSpec(0, "s3://in/0", sha("0"), {"action": "usage", "usage": {"gpu_ms": 100, "tokens": 7}}),
             TaskSpec(1, "s3://in/1", sha("1"), {"action": "usage", "usage": {"gpu_ms": 30},
                                                 "fail_usage": {"gpu_ms": 20}})]
    job = admin.create_job(w, tasks=tasks).job
    worker = spawn(w, f"pyw-usage-{uuid.uuid4().hex[:6]}", concurrency=2)
    assert admin.wait(job.id, timeout=60).status == "completed"
    # The failed attempt's usage counts too: 100 + 20 + 30.
    assert admin.get_job(job.id).job.usage == {"gpu_ms": 150, "tokens": 7}
    by_chunk = {d.task.chunk_index: d for d in admin.list_tasks(job.id)}
    assert by_chunk[0].task.usage == {"gpu_ms": 100, "tokens": 7}
    assert by_chunk[1].task.usage == {"gpu_ms": 50}
    assert [(a.outcome, a.usage) for a in by_chunk[1].attempts] == [("failed", {"gpu_ms": 20}),
                                                                    ("completed", {"gpu_ms": 30})]
    worker.signal(15)
    assert worker.wait() == 0, worker.stderr


def test_a_failure_for_good_reports_its_usage(admin: Client, workload: Callable[..., str],
                                              spawn: Callable[..., WorkerProc]) -> None:
    w = workload(lease_seconds=30, max_attempts=1)
    job = admin.create_job(w, tasks=[TaskSpec(0, "s3://in/0", sha("0"), {
        "action": "usage", "usage": {}, "fail_usage": {"gpu_ms": 40}, "fail_for_good": True})]).job
    worker = spawn(w, f"pyw-usage-fail-{uuid.uuid4().hex[:6]}")
    assert admin.wait(job.id, timeout=60).status == "failed"
    snap = admin.get_job(job.id)
    assert snap.failure is not None and snap.failure.error_code == "no_luck"
    assert snap.job.usage == {"gpu_ms": 40}
    worker.signal(15)
    assert worker.wait() == 0, worker.stderr


def test_accounts_billing_context_and_the_account_filter(admin: Client, workload: Callable[..., str],
                                                         transport: str) -> None:
    w = workload()
    name = account_name(transport)
    put = admin.put_account(name, max_pending_tasks=2, priority=3)
    assert (put.name, put.max_pending_tasks, put.priority) == (name, 2, 3)
    assert admin.get_account(name).pending_tasks == 0
    assert name in [a.name for a in admin.list_accounts()]

    key = f"order-{uuid.uuid4().hex[:8]}"
    created = admin.create_job(w, input_uri="s3://in", input_sha256=sha("in"), account=name,
                               billing=Billing(reserved_units=500, billing_key=key)).job
    assert (created.account, created.billing, created.priority) == (name, Billing(500, key), 3)
    assert created.concurrency_key == name  # defaults to the account
    again = admin.create_job(w, input_uri="s3://in", input_sha256=sha("in"), account=name,
                             billing={"reserved_units": 500, "billing_key": key}).job
    assert again.id == created.id
    read = admin.get_job(created.id).job
    assert (read.account, read.billing) == (name, Billing(500, key))
    assert [j.id for j in admin.list_jobs(account=name)] == [created.id]
    assert admin.get_account(name).pending_tasks == 1

    with pytest.raises(ResourceExhaustedError) as quota:
        admin.create_job(w, tasks=[TaskSpec(i, f"s3://in/{i}", sha(str(i))) for i in range(2)], account=name)
    assert quota.value.code == "resource_exhausted" and re.search(r"\b2\b", quota.value.message)
    assert [j.id for j in admin.list_jobs(account=name)] == [created.id]  # nothing written
    with pytest.raises(NotFoundError):
        admin.create_job(w, input_uri="s3://in", input_sha256=sha("in"), account=f"nobody-{uuid.uuid4().hex[:8]}")
    with pytest.raises(NotFoundError):
        admin.get_account(f"nobody-{uuid.uuid4().hex[:8]}")
    with pytest.raises(InvalidArgumentError) as bad:
        admin.put_account("Not A Name")
    assert "name" in bad.value.message


def test_settle_a_final_job_exactly_once(admin: Client, workload: Callable[..., str], transport: str) -> None:
    w = workload()
    name = account_name(transport)
    admin.put_account(name)
    job = admin.create_job(w, input_uri="s3://in", input_sha256=sha("in"), account=name,
                           billing=Billing(reserved_units=100)).job
    with pytest.raises(FailedPreconditionError):
        admin.settle_job(job.id, "inv-early", 0)  # not final yet
    admin.cancel(job.id, reason="customer changed their mind")
    listed = wait_for(lambda: [j for j in admin.list_settlements(account=name) if j.id == job.id], 10,
                      "the cancelled job among the unsettled")
    assert (listed[0].status, listed[0].account, listed[0].billing) == ("cancelled", name, Billing(100, ""))

    key = f"inv-{uuid.uuid4().hex[:8]}"
    settled = admin.settle_job(job.id, key, 0)
    assert settled.settlement is not None
    assert (settled.settlement.settlement_key, settled.settlement.settled_units) == (key, 0)
    assert admin.settle_job(job.id, key, 0).settlement == settled.settlement  # a settler's retry
    with pytest.raises(AlreadyExistsError) as conflict:
        admin.settle_job(job.id, key, 5)
    assert key in conflict.value.message
    assert job.id not in [j.id for j in admin.list_settlements(account=name)]
    assert admin.get_job(job.id).job.settlement == settled.settlement

    usage = admin.get_account_usage(name)
    assert usage.account == name
    assert all(u.workload == w for u in usage.workloads)


def test_money_calls_with_bad_input_raise_the_coordinators_codes(admin: Client) -> None:
    with pytest.raises(InvalidArgumentError):
        admin.settle_job(str(uuid.uuid4()), "", 1)
    with pytest.raises(InvalidArgumentError):
        admin.settle_job(str(uuid.uuid4()), "inv-1", -1)
    with pytest.raises(NotFoundError):
        admin.get_account_usage(f"nobody-{uuid.uuid4().hex[:8]}")
