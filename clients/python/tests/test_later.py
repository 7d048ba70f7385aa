"""Delayed jobs and finalizers through Client.create_job, against a live coordinator, over both transports."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import pytest

from leasehold import Client, InvalidArgumentError, NotFoundError, TaskSpec


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_run_at_schedules_and_finalizer_links_both_ways(admin: Client, workload: Callable[..., str]) -> None:
    w, stitch = workload(), workload()
    due = datetime.now(timezone.utc) + timedelta(hours=1)
    created = admin.create_job(
        w, input_uri="s3://in/0", input_sha256=sha("0"), run_at=due,
        finalizer={"workload": stitch, "parameters": {"out": "s3://manifest"}, "run_on_failure": True},
    )
    assert created.job.status == "scheduled"
    assert created.job.run_at is not None and abs((created.job.run_at - due).total_seconds()) < 0.001
    assert admin.get_job(created.job.id).job.status == "scheduled"

    admin.cancel(created.job.id, reason="not needed")
    parent = admin.get_job(created.job.id).job
    assert parent.status == "cancelled"
    assert parent.finalizer_job_id
    fin = admin.get_job(parent.finalizer_job_id).job
    assert fin.workload == stitch
    assert fin.parent_job_id == created.job.id
    assert fin.parameters == {"out": "s3://manifest", "parent_job_id": created.job.id, "parent_status": "cancelled"}


def test_past_run_at_means_now(admin: Client, workload: Callable[..., str]) -> None:
    created = admin.create_job(workload(), input_uri="s3://in/1", input_sha256=sha("1"), run_at="2001-01-01T00:00:00Z")
    assert created.job.status == "pending"
    assert created.job.run_at is None


def test_bad_run_at_and_finalizer_name_the_field(admin: Client, workload: Callable[..., str]) -> None:
    w = workload()
    far = datetime.now(timezone.utc) + timedelta(days=400)
    cases: list[tuple[dict[str, object], str]] = [
        ({"run_at": far}, "run_at"),
        ({"finalizer": {"workload": w, "on_failure": True}}, "finalizer.on_failure"),
    ]
    for extra, field in cases:
        with pytest.raises(InvalidArgumentError) as bad:
            admin.create_job(w, input_uri="s3://in/2", input_sha256=sha("2"), **extra)  # type: ignore[arg-type]
        assert [v.field for v in bad.value.violations] == [field]
    # An unknown workload is NOT_FOUND wherever it is named, a finalizer's too, with one reason.
    with pytest.raises(NotFoundError) as missing:
        admin.create_job(w, input_uri="s3://in/2", input_sha256=sha("2"), finalizer={"workload": "no_such_workload"})
    assert missing.value.reason == "WORKLOAD_NOT_FOUND"


def test_a_task_sets_its_own_run_at(admin: Client, workload: Callable[..., str]) -> None:
    w = workload()
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    created = admin.create_job(w, tasks=[
        TaskSpec(0, "s3://in/0", sha("0"), run_at=later),
        {"chunk_index": 1, "input_uri": "s3://in/1", "input_sha256": sha("1"), "run_at": later.isoformat()},
    ])
    assert created.job.status == "scheduled"
    with pytest.raises(InvalidArgumentError) as bad:
        admin.create_job(w, tasks=[{"chunk_index": 0, "input_uri": "s3://x", "input_sha256": sha("x"), "run_at": 5}])
    assert [v.field for v in bad.value.violations] == ["tasks[0].run_at"]
