"""Periodic schedules through the submitter API against a live coordinator, over both transports."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable

import pytest
from conftest import wait_for

from leasehold import Client, InvalidArgumentError, Job, NotFoundError, TaskSpec


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_put_get_list_pause_resume_delete(admin: Client, workload: Callable[..., str]) -> None:
    w = workload()
    name = f"nightly-{uuid.uuid4().hex[:8]}"
    job = {"workload": w, "tasks": [TaskSpec(0, "s3://in/0", sha("0")), {"chunk_index": 1, "input_uri": "s3://in/1",
                                                                           "input_sha256": sha("1")}],
           "parameters": {"kind": "daily"}}
    s = admin.put_schedule(name, "30 2 * * *", job, timezone="Europe/Berlin", overlap="skip", catch_up="all",
                           max_catch_up=3)
    assert (s.name, s.cron, s.timezone, s.overlap, s.catch_up, s.max_catch_up) == (
        name, "30 2 * * *", "Europe/Berlin", "skip", "all", 3)
    assert not s.paused
    assert s.job["workload"] == w
    assert len(s.job["tasks"]) == 2
    assert len(s.next_fire_times) == 5
    assert s.next_fire_times == sorted(s.next_fire_times)

    assert admin.get_schedule(name).cron == "30 2 * * *"
    assert name in [x.name for x in admin.list_schedules()]
    paused = admin.pause_schedule(name)
    assert paused.paused and paused.next_fire_times == []
    resumed = admin.resume_schedule(name)
    assert not resumed.paused and len(resumed.next_fire_times) == 5
    assert admin.delete_schedule(name).name == name
    with pytest.raises(NotFoundError) as missing:
        admin.get_schedule(name)
    assert missing.value.request_id


def test_a_per_second_schedule_creates_jobs_that_carry_its_name(admin: Client, workload: Callable[..., str]) -> None:
    w = workload()
    name = f"tick-{uuid.uuid4().hex[:8]}"
    admin.put_schedule(name, "* * * * * *", {"workload": w, "input_uri": "s3://in/t", "input_sha256": sha("t")})
    def two_ticks() -> list[Job] | None:
        found = list(admin.list_jobs(schedule_name=name))
        return found if len(found) >= 2 else None

    try:
        jobs: list[Job] = wait_for(two_ticks, 30, "two ticks")
    finally:
        admin.delete_schedule(name)
    assert all(j.schedule_name == name and j.workload == w for j in jobs)
    assert all(j.schedule_fire_time is not None for j in jobs)
    assert len({j.schedule_fire_time for j in jobs}) == len(jobs)


@pytest.mark.parametrize(("cron", "timezone", "field"), [
    ("61 * * * *", None, "cron"),
    ("* * * * *", "Mars/Olympus_Mons", "timezone"),
])
def test_bad_cron_or_timezone_names_the_field(admin: Client, workload: Callable[..., str], cron: str,
                                              timezone: str | None, field: str) -> None:
    w = workload()
    with pytest.raises(InvalidArgumentError) as bad:
        admin.put_schedule("bad", cron, {"workload": w, "input_uri": "s3://x", "input_sha256": sha("x")},
                           timezone=timezone)
    assert field in [v.field for v in bad.value.violations]
    with pytest.raises(InvalidArgumentError) as template:
        admin.put_schedule("bad", "* * * * *", {"workload": w, "input_uri": "s3://x"})
    assert "job.input_sha256" in [v.field for v in template.value.violations]
    with pytest.raises(NotFoundError):
        admin.get_schedule("bad")
