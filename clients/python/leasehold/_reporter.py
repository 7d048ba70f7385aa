"""The reporter: results and failures to the coordinator, batched, retried until answered, refilling lanes."""

from __future__ import annotations

import queue
import time
from typing import Any

from . import _worker_calls as calls
from ._state import MAX_BATCH, Backoff, Cohort, Outcome, WorkerState, log, transient
from ._task import TaskError
from .errors import InvalidArgumentError, LeaseholdError
from .models import TaskRecord, field_of

JsonObject = dict[str, Any]

# How long a report that will claim waits for the rest of its first result's cohort (the tasks leased with
# it, still running): lanes filled together often finish together, and one report then refills them all.
_LINGER = 0.002


class Reporter:
    """Sends outcomes from the outbox: a batch's failures, then its results in one ``CompleteTasks`` with ``claim_next``."""

    def __init__(self, w: WorkerState) -> None:
        self.w = w

    def run(self) -> None:
        w = self.w
        closing = False
        while not closing:
            first = w._outbox.get()
            if first is None:
                return
            batch = [first]
            # Tasks leased together tend to finish together: wait a little for the rest of the first one's
            # cohort, so their lanes are refilled by one report rather than two.
            cohort = first.lease.cohort
            linger = time.monotonic() + _LINGER if first.reserved and w.batch_results else 0.0
            while len(batch) < MAX_BATCH:
                try:
                    more = w._outbox.get_nowait()
                except queue.Empty:
                    left = linger - time.monotonic()
                    if left <= 0 or cohort.running == 0:
                        break
                    try:
                        more = w._outbox.get(timeout=left)
                    except queue.Empty:
                        break
                if more is None:
                    closing = True
                    break
                batch.append(more)
            try:
                self._report(batch)
            except Exception:
                log.exception("reporting results failed")

    def _report(self, batch: list[Outcome]) -> None:
        w = self.w
        reserved = sum(1 for o in batch if o.reserved)
        try:
            self._report_batch(batch, reserved)
        finally:
            if reserved:
                # Whatever the reports brought back is dispatched by now: lanes still free go to the claimer.
                with w._cond:
                    w._reserved -= reserved
                    w._cond.notify_all()

    def _report_batch(self, batch: list[Outcome], reserved: int) -> None:
        """Sends the batch's failures, then its results; the results' report claims for ``reserved`` lanes."""
        w = self.w
        live: list[Outcome] = []
        for o in batch:
            if o.lease.lost:
                w._drop(o.lease, o.lease.task.cancel_reason or "lease lost")
                w._forget(o.lease)
            else:
                live.append(o)
        completes = [o for o in live if o.result is not None]
        for o in live:
            if o.error is not None:
                self._send_failure(o)
        if not completes:
            return
        if w.batch_results:
            self._send_results(completes, self._claim_next(reserved))
        else:
            budget = reserved
            for i, o in enumerate(completes):
                n = budget if i == len(completes) - 1 else min(budget, 1)
                budget -= n
                self._send_one_result(o, self._claim_next(n))

    def _claim_next(self, lanes: int) -> JsonObject | None:
        """The ``claim_next`` of a report that frees ``lanes`` lanes: as the claimer's claim, but never parked."""
        w = self.w
        if lanes <= 0 or not w.claim_with_results or w._claims_refused or w._stop.is_set():
            return None
        return calls.claim_next(w, lanes)

    def _report_call(self, method: str, request: JsonObject) -> JsonObject:
        """:meth:`_retrying`, sent again without ``claim_next`` if the coordinator refuses that part.

        A coordinator older than ``claim_next`` refuses the field (over JSON; gRPC drops it unread, and then
        no task comes back). The refusal names the field, and nothing was written, so the results go out again
        without it, and from then on every report does without.
        """
        w = self.w
        try:
            return self._retrying(method, request)
        except LeaseholdError as e:
            if "claim_next" not in request or "claim_next" not in e.message:
                raise
            w._claims_refused = True
            log.warning("the coordinator refuses claim_next (%s); reports claim nothing from now on", e)
            del request["claim_next"]
            return self._retrying(method, request)

    def _take_next(self, res: JsonObject) -> None:
        """Dispatches the tasks a report's ``claim_next`` leased, exactly as claimed ones."""
        w = self.w
        cohort = Cohort()
        for t in field_of(res, "next_tasks") or []:
            w._dispatch(TaskRecord.from_json(t), cohort)

    def _result_request(self, o: Outcome) -> JsonObject:
        assert o.result is not None
        return calls.result_request(self.w, o.lease.task, o.result)

    def _retrying(self, method: str, request: JsonObject) -> JsonObject:
        """Calls until the coordinator answers: a result replayed after a lost answer is accepted again."""
        w = self.w
        backoff = Backoff()
        outage = False
        while True:
            if w._stop.is_set():
                request.pop("claim_next", None)  # a drain claims nothing new, not even through a retried report
            try:
                res = w._call(method, request)
                if outage:
                    log.info("%s delivered after the coordinator came back", method)
                return res
            except LeaseholdError as e:
                if not transient(e):
                    raise
                if not outage:
                    log.warning("%s failed (%s); retrying with backoff", method, e)
                outage = True
                time.sleep(backoff.next())

    def _send_results(self, completes: list[Outcome], claim: JsonObject | None) -> None:
        w = self.w
        req: JsonObject = {"results": [self._result_request(o) for o in completes]}
        if claim is not None:
            req["claim_next"] = claim
        try:
            res = self._report_call("CompleteTasks", req)
        except InvalidArgumentError as e:
            # One malformed result refuses the whole batch: send them one by one to fail only the bad one.
            log.warning("CompleteTasks refused the batch (%s); sending the results one by one", e)
            for o in completes:
                self._send_one_result(o)
            return
        except LeaseholdError as e:
            log.error("results of %d task(s) not reported: %s", len(completes), e)
            for o in completes:
                w._forget(o.lease)
            return
        outcomes = field_of(res, "outcomes") or []
        for o, out in zip(completes, outcomes, strict=False):
            err = field_of(out, "error")
            if err:
                code = str(field_of(err, "code", "unknown"))
                self._refused(o, code, str(field_of(err, "message", "")), None)
            else:
                w._count("completed")
            w._forget(o.lease)
        self._take_next(res)

    def _send_one_result(self, o: Outcome, claim: JsonObject | None = None) -> None:
        w = self.w
        req = self._result_request(o)
        if claim is not None:
            req["claim_next"] = claim
        try:
            res = self._report_call("CompleteTask", req)
            w._count("completed")
        except InvalidArgumentError as e:
            o.error = TaskError(f"the coordinator refused the handler's result: {e.message}", code="invalid_result")
            self._send_failure(o)
            return
        except LeaseholdError as e:
            self._refused(o, e.code, e.message, e.request_id)
            w._forget(o.lease)
            return
        w._forget(o.lease)
        self._take_next(res)

    def _refused(self, o: Outcome, code: str, message: str, request_id: str | None) -> None:
        """A result the coordinator would not take; never sent again (it would be refused again)."""
        w = self.w
        w._count("dropped")
        task = o.lease.task
        if code == "aborted":
            log.warning("late result of task %s (attempt %d) refused, lease lost: %s (request id %s)",
                        task.id, task.attempt, message, request_id)
        else:
            log.error("result of task %s (attempt %d) refused: %s: %s (request id %s)",
                      task.id, task.attempt, code, message, request_id)

    def _send_failure(self, o: Outcome) -> None:
        w = self.w
        assert o.error is not None
        task, e = o.lease.task, o.error
        req = calls.failure_request(w, task, e)
        if not req["retryable"]:
            log.warning("task %s (attempt %d) failed for good: %s", task.id, task.attempt, req["error_message"],
                        exc_info=e if not isinstance(e, TaskError) else None)
        try:
            try:
                self._retrying("FailTask", req)
            except InvalidArgumentError:
                if "retry_after_seconds" not in req:
                    raise
                # A delay the coordinator will not take (an explicit 0, say): let it pick the backoff.
                del req["retry_after_seconds"]
                self._retrying("FailTask", req)
            w._count("failed")
        except LeaseholdError as err:
            self._refused(o, err.code, err.message, err.request_id)
        w._forget(o.lease)
