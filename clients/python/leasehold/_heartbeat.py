"""Heartbeats and progress: every lease renewed on time, and a handler told to stop when its lease is lost."""

from __future__ import annotations

import random
import time
from typing import Any

from . import _worker_calls as calls
from ._state import Lease, WorkerState, log
from ._task import Task, TaskCancelled
from .errors import AbortedError, LeaseholdError, NotFoundError
from .models import TaskRecord, field_of

JsonObject = dict[str, Any]


class Heartbeats:
    """Renews each lease every ``interval`` and reports progress; marks a lease lost when the coordinator refuses it."""

    def __init__(self, w: WorkerState) -> None:
        self.w = w

    def report_progress(self, task: Task, fraction: float, message: str, partial_result_uri: str | None) -> None:
        w = self.w
        with w._cond:
            lease = w._leases.get((task.id, task.attempt))
        if lease is None:
            return
        req = calls.progress_request(w, task, fraction, message, partial_result_uri)
        try:
            res = w._call("ReportProgress", req)
        except (AbortedError, NotFoundError) as e:
            self._refused(lease, e)
            raise TaskCancelled(task.cancel_reason) from e
        except LeaseholdError as e:
            log.warning("progress of task %s not reported (%s)", task.id, e)
            return
        self._renewed(lease, res)

    def forward_progress(self) -> None:
        w = self.w
        while not w._beats_stop.is_set():
            item = w._progress_queue.get()
            task_id, attempt, fraction, message, uri = item
            with w._cond:
                lease = w._leases.get((task_id, attempt))
            if lease is not None:
                try:
                    self.report_progress(lease.task, fraction, message, uri)
                except TaskCancelled:
                    pass

    def _renewed(self, lease: Lease, res: JsonObject) -> None:
        record = TaskRecord.from_json(field_of(res, "task") or {})
        if record.lease_expires_at is not None:
            lease.task.lease_expires_at = record.lease_expires_at
        lease.next_beat = time.monotonic() + lease.interval

    def run(self) -> None:
        w = self.w
        while not w._beats_stop.is_set():
            now = time.monotonic()
            with w._cond:
                # Finished leases too: a result waiting for delivery (a coordinator restart) keeps its lease.
                live = [lease for lease in w._leases.values() if not lease.lost and not lease.cancelled]
            wake = now + 1.0
            for lease in live:
                if lease.next_beat <= now:
                    self._beat(lease)
                wake = min(wake, lease.next_beat)
            w._beat_wake.wait(max(wake - time.monotonic(), 0.01))
            w._beat_wake.clear()

    def _beat(self, lease: Lease) -> None:
        w = self.w
        try:
            res = w._call("RenewLease", w._lease_request(lease.task))
        except (AbortedError, NotFoundError) as e:
            if lease.finished and not calls.cancellation(e):
                lease.lost = True  # its result was accepted meanwhile, or will be dropped as late
            else:
                self._refused(lease, e)
            return
        except LeaseholdError as e:
            # Try again soon: the lease may still be saved once the coordinator is back.
            lease.next_beat = time.monotonic() + min(lease.interval, 1.0) * random.uniform(0.5, 1.0)
            if not lease.beat_failing:
                log.warning("heartbeat of task %s failed (%s); retrying", lease.task.id, e)
            lease.beat_failing = True
            return
        lease.beat_failing = False
        self._renewed(lease, res)

    def _refused(self, lease: Lease, e: LeaseholdError) -> None:
        """A heartbeat or progress report the coordinator refused: the task was cancelled, or the lease lost."""
        if calls.cancellation(e):
            lease.cancelled = True
            self.w._cancel(lease, f"{e.code}: {e.message}")
            log.info("task %s (attempt %d) was cancelled (%s); its handler is told to stop, and a result it still "
                     "returns within the lease is reported and kept (request id %s)",
                     lease.task.id, lease.task.attempt, e.message, e.request_id)
        else:
            self._lost(lease, e)

    def _lost(self, lease: Lease, e: LeaseholdError) -> None:
        w = self.w
        lease.lost = True
        w._cancel(lease, f"{e.code}: {e.message}")
        log.warning("task %s (attempt %d) is no longer ours (%s); its handler is told to stop (request id %s)",
                    lease.task.id, lease.task.attempt, e.message, e.request_id)

