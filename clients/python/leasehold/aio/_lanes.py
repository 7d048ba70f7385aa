"""The lanes and the heartbeats of an async worker: each leased task's handler, and every lease kept alive."""

from __future__ import annotations

import asyncio
import random
import time

from .. import _otel
from .. import _worker_calls as calls
from .._state import log
from .._task import Result, Task, TaskCancelled, TaskError
from ..errors import AbortedError, LeaseholdError, NotFoundError
from ._state import ALease, AOutcome, AsyncHandler, AsyncWorkerState
from ._task import AsyncTask


class Lanes(AsyncWorkerState):
    """Runs leased tasks' handlers (``async def`` ones on the loop, plain ones in the thread pool)."""

    async def _run_lane(self, lease: ALease) -> None:
        try:
            outcome = await self._execute(lease)
        except Exception:  # a bug of ours must not lose the lane
            log.exception("lane failed on task %s", lease.task.id)
            outcome = None
        # Queued before the lane counts as free: a drain that sees no busy lane then finds every outcome
        # ahead of its end-of-reports marker.
        lease.finished = True
        if outcome is not None:
            if self.claim_with_results and not self._stopping:
                # Its task stays ours until the report is answered: the report's claim_next refills the lane.
                outcome.reserved = True
                self._reserved += 1
            self._outbox.put_nowait(outcome)
        else:
            self._forget(lease)
        self._busy -= 1
        lease.cohort.running -= 1
        self._changed()

    async def _execute(self, lease: ALease) -> AOutcome | None:
        task = lease.task
        if lease.lost:  # given back by the drain before the lane started
            return None
        if self._stopping and not lease.started:
            lease.lost = True
            await self._release(task, "the worker is draining")
            return None
        lease.started = True
        outcome = AOutcome(lease)
        try:
            if lease.is_async:
                # In this lane's own task: a cancellation (_cancel) strikes the handler's await.
                result = await self._run_async(lease)
            else:
                assert self._loop is not None
                result = await self._loop.run_in_executor(self._threads, self._run_sync, lease)
            if isinstance(result, Result):
                outcome.result = result
            else:
                outcome.error = TaskError(f"the handler returned {type(result).__name__}, not a Result",
                                          code="invalid_result")
        except asyncio.CancelledError:
            if not lease.cancel_sent and not (lease.is_async and task.cancelled):
                raise  # not ours: the worker itself is being cancelled
            _uncancel()
            self._drop(lease, f"handler stopped: {task.cancel_reason}")
            return None
        except TaskCancelled as e:
            self._drop(lease, f"handler stopped: {e}")
            return None
        except Exception as e:
            outcome.error = e
        # A cancelled task's result still goes out (kept when it arrives within the lease); its failure does
        # not (nothing would come of it).
        if lease.lost or (task.cancelled and (outcome.result is None or not lease.cancelled)):
            self._drop(lease, task.cancel_reason or "lease lost")
            return None
        return outcome

    async def _run_async(self, lease: ALease) -> Result:
        task = lease.task
        assert isinstance(task, AsyncTask)
        handler: AsyncHandler = lease.handler  # type: ignore[assignment]
        with _otel.handler_span(task.traceparent, f"leasehold.task {task.workload}", _attributes(task)):
            return await handler(task)

    @staticmethod
    def _run_sync(lease: ALease) -> Result:
        """A plain handler, in a thread of the pool (its span is the thread's)."""
        task = lease.task
        assert isinstance(task, Task)
        with _otel.handler_span(task.traceparent, f"leasehold.task {task.workload}", _attributes(task)):
            return lease.handler(task)  # type: ignore[arg-type, return-value]

    # ---------- heartbeats ----------

    async def _heartbeats(self) -> None:
        """Renews each lease every ``interval``, each heartbeat on its own so a slow one delays no other."""
        while True:
            now = time.monotonic()
            wake = now + 1.0
            # Finished leases too: a result waiting for delivery (a coordinator restart) keeps its lease.
            for lease in list(self._leases.values()):
                if lease.lost or lease.cancelled or lease.beating:
                    continue
                if lease.next_beat <= now:
                    lease.beating = True
                    self._keep(asyncio.create_task(self._beat(lease)))
                wake = min(wake, lease.next_beat)
            self._beat_wake.clear()
            try:
                await asyncio.wait_for(self._beat_wake.wait(), max(wake - time.monotonic(), 0.01))
            except asyncio.TimeoutError:
                pass

    async def _beat(self, lease: ALease) -> None:
        try:
            res = await self._call("RenewLease", calls.lease_request(self, lease.task))
            lease.beat_failing = False
            self._renewed(lease, res)
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
        finally:
            lease.beating = False
            self._beat_wake.set()


def _uncancel() -> None:
    """Counts the cancellation this lane requested and handled as done (Python 3.11+ keeps a count)."""
    current = asyncio.current_task()
    cancelling, uncancel = getattr(current, "cancelling", None), getattr(current, "uncancel", None)
    if cancelling is not None and uncancel is not None and cancelling():
        uncancel()


def _attributes(task: AsyncTask | Task) -> dict[str, object]:
    return {"leasehold.task_id": task.id, "leasehold.job_id": task.job_id, "leasehold.attempt": task.attempt}
