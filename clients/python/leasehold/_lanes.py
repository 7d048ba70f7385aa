"""The lanes: each runs one task's handler at a time (in a thread, or in a child process) and queues its outcome."""

from __future__ import annotations

from . import _otel
from ._state import Lease, Outcome, WorkerState, log
from ._task import Result, TaskCancelled, TaskError, child_run


class Lanes:
    """The handler side of a worker: runs leased tasks' handlers and hands their outcomes to the reporter."""

    def __init__(self, w: WorkerState) -> None:
        self.w = w

    def run_lane(self) -> None:
        w = self.w
        while True:
            lease = w._work.get()
            if lease is None:
                return
            try:
                outcome = self._execute(lease)
            except Exception:  # a bug of ours must not kill the lane
                log.exception("lane failed on task %s", lease.task.id)
                outcome = None
            # Queue the outcome before the lane counts as free: a drain that sees no busy lane then
            # finds every outcome ahead of its end-of-reports marker.
            lease.finished = True
            if outcome is not None:
                if w.claim_with_results and not w._stop.is_set():
                    # Its task stays ours until the report is answered: the report's claim_next refills the
                    # lane (a failure's too, when results go out with it), not the claimer. Reserved before
                    # the outbox gets it, so the reporter never releases a reservation not yet counted;
                    # until the lane is free below, the lane just counts twice.
                    outcome.reserved = True
                    with w._cond:
                        w._reserved += 1
                w._outbox.put(outcome)
            else:
                w._forget(lease)
            with w._cond:
                w._busy -= 1
                lease.cohort.running -= 1
                w._cond.notify_all()

    def _execute(self, lease: Lease) -> Outcome | None:
        w = self.w
        task = lease.task
        if lease.lost:  # given back by the drain before a lane got to it
            return None
        if w._stop.is_set() and not lease.started:
            # Claimed before the drain began but not yet started: someone else can start it now.
            lease.lost = True
            w._release(task, "the worker is draining")
            return None
        lease.started = True
        outcome = Outcome(lease)
        attrs = {"leasehold.task_id": task.id, "leasehold.job_id": task.job_id, "leasehold.attempt": task.attempt}
        try:
            with _otel.handler_span(task.traceparent, f"leasehold.task {task.workload}", attrs):
                if w._pool is not None:
                    result = w._pool.apply_async(child_run, (lease.handler, task)).get()
                else:
                    result = lease.handler(task)
            if isinstance(result, Result):
                outcome.result = result
            else:
                outcome.error = TaskError(f"the handler returned {type(result).__name__}, not a Result",
                                          code="invalid_result")
        except TaskCancelled as e:
            w._drop(lease, f"handler stopped: {e}")
            return None
        except Exception as e:
            outcome.error = e
        # A cancelled task's result still goes out (kept when it arrives within the lease); its failure does
        # not (nothing would come of it).
        if lease.lost or (task.cancelled and (outcome.result is None or not lease.cancelled)):
            w._drop(lease, task.cancel_reason or "lease lost")
            return None
        return outcome
