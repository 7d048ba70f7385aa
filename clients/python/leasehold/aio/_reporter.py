"""The reporter of an async worker: results and failures, batched, retried until answered, refilling lanes.

The asyncio twin of ``leasehold._reporter``, sending the same requests (``leasehold._worker_calls``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .. import _worker_calls as calls
from .._state import MAX_BATCH, Backoff, log
from .._task import TaskError
from ..errors import InvalidArgumentError, LeaseholdError
from ..models import field_of
from ._state import AOutcome, AsyncWorkerState

JsonObject = dict[str, Any]

# How long a report that will claim waits for the rest of its first result's cohort (the tasks leased with
# it, still running): lanes filled together often finish together, and one report then refills them all.
_LINGER = 0.002


class Reporter(AsyncWorkerState):
    """Sends outcomes from the outbox: a batch's failures, then its results in one ``CompleteTasks`` with ``claim_next``."""

    async def _reports(self) -> None:
        closing = False
        while not closing:
            first = await self._outbox.get()
            if first is None:
                return
            batch = [first]
            cohort = first.lease.cohort
            linger = time.monotonic() + _LINGER if first.reserved and self.batch_results else 0.0
            while len(batch) < MAX_BATCH:
                if self._outbox.empty():
                    left = linger - time.monotonic()
                    if left <= 0 or cohort.running == 0:
                        break
                    try:
                        more = await asyncio.wait_for(self._outbox.get(), left)
                    except asyncio.TimeoutError:
                        break
                else:
                    more = self._outbox.get_nowait()
                if more is None:
                    closing = True
                    break
                batch.append(more)
            try:
                await self._report(batch)
            except Exception:
                log.exception("reporting results failed")

    async def _report(self, batch: list[AOutcome]) -> None:
        reserved = sum(1 for o in batch if o.reserved)
        try:
            live: list[AOutcome] = []
            for o in batch:
                if o.lease.lost:
                    self._drop(o.lease, o.lease.task.cancel_reason or "lease lost")
                    self._forget(o.lease)
                else:
                    live.append(o)
            for o in live:
                if o.error is not None:
                    await self._send_failure(o)
            completes = [o for o in live if o.result is not None]
            if not completes:
                return
            if self.batch_results:
                await self._send_results(completes, self._claim_next(reserved))
            else:
                budget = reserved
                for i, o in enumerate(completes):
                    n = budget if i == len(completes) - 1 else min(budget, 1)
                    budget -= n
                    await self._send_one_result(o, self._claim_next(n))
        finally:
            if reserved:
                # Whatever the reports brought back is dispatched by now: lanes still free go to the claimer.
                self._reserved -= reserved
                self._changed()

    def _claim_next(self, lanes: int) -> JsonObject | None:
        if lanes <= 0 or not self.claim_with_results or self._claims_refused or self._stopping:
            return None
        return calls.claim_next(self, lanes)

    async def _retrying(self, method: str, request: JsonObject) -> JsonObject:
        """Calls until the coordinator answers: a result replayed after a lost answer is accepted again."""
        backoff = Backoff()
        outage = False
        while True:
            if self._stopping:
                request.pop("claim_next", None)  # a drain claims nothing new, not even through a retried report
            try:
                res = await self._call(method, request)
                if outage:
                    log.info("%s delivered after the coordinator came back", method)
                return res
            except LeaseholdError as e:
                if not calls.transient(e):
                    raise
                if not outage:
                    log.warning("%s failed (%s); retrying with backoff", method, e)
                outage = True
                await asyncio.sleep(backoff.next())

    async def _report_call(self, method: str, request: JsonObject) -> JsonObject:
        """:meth:`_retrying`, sent again without ``claim_next`` if the coordinator refuses that part."""
        try:
            return await self._retrying(method, request)
        except LeaseholdError as e:
            if "claim_next" not in request or "claim_next" not in e.message:
                raise
            self._claims_refused = True
            log.warning("the coordinator refuses claim_next (%s); reports claim nothing from now on", e)
            del request["claim_next"]
            return await self._retrying(method, request)

    async def _send_results(self, completes: list[AOutcome], claim: JsonObject | None) -> None:
        req: JsonObject = {"results": [self._result_request(o) for o in completes]}
        if claim is not None:
            req["claim_next"] = claim
        try:
            res = await self._report_call("CompleteTasks", req)
        except InvalidArgumentError as e:
            # One malformed result refuses the whole batch: send them one by one to fail only the bad one.
            log.warning("CompleteTasks refused the batch (%s); sending the results one by one", e)
            for o in completes:
                await self._send_one_result(o)
            return
        except LeaseholdError as e:
            log.error("results of %d task(s) not reported: %s", len(completes), e)
            for o in completes:
                self._forget(o.lease)
            return
        for o, out in zip(completes, field_of(res, "outcomes") or [], strict=False):
            err = field_of(out, "error")
            if err:
                self._refused_result(o, str(field_of(err, "code", "unknown")), str(field_of(err, "message", "")), None)
            else:
                self._count("completed")
            self._forget(o.lease)
        await self._dispatch(field_of(res, "next_tasks") or [])

    async def _send_one_result(self, o: AOutcome, claim: JsonObject | None = None) -> None:
        req = self._result_request(o)
        if claim is not None:
            req["claim_next"] = claim
        try:
            res = await self._report_call("CompleteTask", req)
            self._count("completed")
        except InvalidArgumentError as e:
            o.error = TaskError(f"the coordinator refused the handler's result: {e.message}", code="invalid_result")
            await self._send_failure(o)
            return
        except LeaseholdError as e:
            self._refused_result(o, e.code, e.message, e.request_id)
            self._forget(o.lease)
            return
        self._forget(o.lease)
        await self._dispatch(field_of(res, "next_tasks") or [])

    def _result_request(self, o: AOutcome) -> JsonObject:
        assert o.result is not None
        return calls.result_request(self, o.lease.task, o.result)

    def _refused_result(self, o: AOutcome, code: str, message: str, request_id: str | None) -> None:
        """A result the coordinator would not take; never sent again (it would be refused again)."""
        self._count("dropped")
        task = o.lease.task
        if code == "aborted":
            log.warning("late result of task %s (attempt %d) refused, lease lost: %s (request id %s)",
                        task.id, task.attempt, message, request_id)
        else:
            log.error("result of task %s (attempt %d) refused: %s: %s (request id %s)",
                      task.id, task.attempt, code, message, request_id)

    async def _send_failure(self, o: AOutcome) -> None:
        assert o.error is not None
        task, e = o.lease.task, o.error
        req = calls.failure_request(self, task, e)
        if not req["retryable"]:
            log.warning("task %s (attempt %d) failed for good: %s", task.id, task.attempt, req["error_message"],
                        exc_info=e if not isinstance(e, TaskError) else None)
        try:
            try:
                await self._retrying("FailTask", req)
            except InvalidArgumentError:
                if "retry_after_seconds" not in req:
                    raise
                # A delay the coordinator will not take (an explicit 0, say): let it pick the backoff.
                del req["retry_after_seconds"]
                await self._retrying("FailTask", req)
            self._count("failed")
        except LeaseholdError as err:
            self._refused_result(o, err.code, err.message, err.request_id)
        self._forget(o.lease)
