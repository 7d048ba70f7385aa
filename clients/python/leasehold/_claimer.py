"""The claimer: long-poll claims for the worker's free lanes, with jittered backoff while the coordinator is away."""

from __future__ import annotations

from typing import Any

from . import _worker_calls as calls
from ._state import Backoff, Cohort, WorkerState, log
from .errors import LeaseholdError, NotFoundError, WorkerConfigError
from .models import TaskRecord, field_of

JsonObject = dict[str, Any]


class Claimer:
    """Claims tasks for as many lanes as are free (none reserved by the reporter) and dispatches them."""

    def __init__(self, w: WorkerState) -> None:
        self.w = w

    def run(self) -> None:
        w = self.w
        backoff = Backoff()
        outage = False
        while True:
            with w._cond:
                while w._busy + w._reserved >= w.concurrency and not w._stop.is_set():
                    w._cond.wait()
                if w._stop.is_set():
                    return
                free = w.concurrency - w._busy - w._reserved
            req = calls.claim_request(w, free)
            try:
                res = w._call("ClaimTasks", req, extra_timeout=w.wait_seconds, interrupt=w._poll)
            except NotFoundError as e:
                # The one NOT_FOUND a claim answers: a workload the coordinator does not know. No retry fixes a
                # misspelled name, so the worker stops (and run() raises) rather than idle forever.
                self._unknown_workloads(e)
                return
            except LeaseholdError as e:
                if w._stop.is_set():
                    return
                delay = backoff.next()
                if not outage:
                    log.warning("claim failed (%s); retrying with backoff", e)
                outage = True
                w._stop.wait(delay)
                continue
            except Exception:
                log.exception("claim failed unexpectedly; retrying")
                w._stop.wait(backoff.next())
                continue
            if outage:
                log.info("coordinator reachable again at %s", w.url)
                outage = False
            backoff.reset()
            tasks = [TaskRecord.from_json(t) for t in field_of(res, "tasks") or []]
            cohort = Cohort()
            for record in tasks:
                w._dispatch(record, cohort)
            if not tasks and w.wait_seconds == 0:
                w._stop.wait(1.0)

    def _unknown_workloads(self, e: NotFoundError) -> None:
        w = self.w
        w._fatal = unknown_workloads(w, e)
        log.error("%s", w._fatal)
        w._stop.set()
        with w._cond:
            w._cond.notify_all()


def unknown_workloads(w: WorkerState, e: LeaseholdError) -> WorkerConfigError:
    """The error of a worker whose workloads the coordinator refuses, naming the workloads it knows."""
    known = calls.known_workloads_of(e)  # the coordinator's google.rpc.ErrorInfo names the registered ones
    if known is None:
        # A coordinator that does not list them: ask (an admin or open coordinator tells; a worker token may
        # not, and the message then goes without the list).
        try:
            known = calls.workload_names(w._call("ListWorkloads", {}))
        except LeaseholdError:
            pass
    return calls.unknown_workloads(w, e, known)
