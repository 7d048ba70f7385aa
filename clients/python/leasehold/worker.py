"""The worker: claims tasks, runs handlers in lanes, heartbeats leases, reports results, drains on SIGTERM.

The :class:`Worker` here starts and stops the parts, each in a module of its own: the claimer
(``_claimer``), the lanes that run handlers (``_lanes``), the heartbeats (``_heartbeat``) and the reporter of
results (``_reporter``), which share the worker's state (``_state``). What a handler sees is in ``_task``.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
import time
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any, Literal, TypeVar

from . import _worker_calls as calls
from ._claimer import Claimer, unknown_workloads
from ._heartbeat import Heartbeats
from ._lanes import Lanes
from ._reporter import Reporter
from ._state import Backoff, WorkerState, log
from ._task import (
    CancelledIds,
    Handler,
    Result,
    RetryableError,
    Task,
    TaskCancelled,
    TaskError,
    child_init,
    error_code_of,
)
from ._transport import TransportName, make_transport
from .errors import (
    LeaseholdError,
    NotFoundError,
    WorkerConfigError,
)

__all__ = ["Result", "RetryableError", "Task", "TaskCancelled", "TaskError", "Worker", "error_code_of"]

H = TypeVar("H", bound=Handler)
Executor = Literal["thread", "process"]


class Worker(WorkerState):
    """Runs handlers for leased tasks of ``workloads``.

    Example::

        worker = Worker("http://127.0.0.1:8080", workloads=["scimesh"], concurrency=4)

        @worker.handler("scimesh")
        def mesh(task: Task) -> Result:
            task.progress(0.5, "halfway")
            return Result(uri="s3://out/...", sha256=digest, metrics={"seconds": 1.2})

        worker.run()  # blocks; SIGTERM / SIGINT drain

    Claims long-poll (``wait_seconds``) for up to as many tasks as there are free lanes (``prefetch``); each task
    runs in one of ``concurrency`` lanes (threads, or processes with ``executor="process"`` for CPU-bound
    handlers, which must then be module-level functions). Each lease is renewed every third of its length.
    A result goes out with the others that are ready at the same moment in one ``CompleteTasks`` call
    (``batch_results``), and is sent again until the coordinator answers. That report also claims the next
    tasks for the lanes its results free (``claim_with_results``), so a busy worker makes about one call per
    batch of results rather than two; the long-poll claims take over when a report brings back fewer. A
    handler's exception fails the task: :class:`RetryableError` for another attempt, anything else for good. An
    unreachable coordinator is retried with jittered backoff.

    ``task.parameters`` read the same on both transports: integral numbers within ±2**53 as ``int`` (over
    gRPC they travel as doubles, ``240.0``), others as ``float`` (:func:`~leasehold.models.plain_json`).

    Args:
        url: ``http://host:port`` (or ``https://``) of the coordinator.
        workloads: Registered workloads to claim; each needs a handler before :meth:`run`.
        concurrency: Number of lanes (tasks run at once).
        token: A worker token (its prefix must begin ``worker_id``) when the coordinator requires one.
        transport: ``"json"`` (Connect JSON over HTTP/1.1, standard library) or ``"grpc"``.
        worker_id: The lease owner's id; default ``worker_prefix`` + ``<hostname>-<pid>``.
        worker_prefix: Prepended to the default ``worker_id`` (a worker token's prefix).
        lease_seconds: Lease to ask for on claims and heartbeats; default each workload's.
        wait_seconds: Long-poll of each claim (1–30); also bounds how long a drain waits for a parked claim.
        prefetch: Claim up to as many tasks as lanes are free (else one at a time).
        batch_results: Report the results that are ready together in one ``CompleteTasks``.
        claim_with_results: Let each result report claim the next tasks for the lanes it frees (the call's
            ``claim_next``; never while draining, never on failures). Off: only the long-poll claims lease tasks.
        drain_timeout: On SIGTERM/SIGINT, seconds in-flight handlers may still run before their tasks are given
            back (failed as retryable, re-leased at once).
        heartbeat_interval: Seconds between heartbeats; default a third of each lease.
        executor: ``"thread"`` or ``"process"``.
        request_timeout: Seconds a call may take (a claim: plus its wait).
        labels: The worker's labels (``{"gpu": "a100", "region": "eu"}``), sent on every claim: it then also
            leases tasks whose ``required_labels`` they all match (a task requiring a label the worker lacks, or
            has with another value, is never leased by it). Names and values match ``^[a-z0-9._/-]{1,63}$``, at
            most 16; ones the coordinator refuses fail :meth:`run` at start with ``WorkerConfigError``.
            Without labels, only tasks that require none are leased.
    """

    def __init__(
        self,
        url: str,
        *,
        workloads: list[str],
        concurrency: int = 1,
        token: str | None = None,
        transport: TransportName = "json",
        worker_id: str | None = None,
        worker_prefix: str = "",
        lease_seconds: int | None = None,
        wait_seconds: int = 5,
        prefetch: bool = True,
        batch_results: bool = True,
        claim_with_results: bool = True,
        drain_timeout: float = 30.0,
        heartbeat_interval: float | None = None,
        executor: Executor = "thread",
        request_timeout: float = 10.0,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        if executor not in ("thread", "process"):
            raise ValueError('executor must be "thread" or "process"')
        worker_id = calls.check_options(workloads, concurrency, wait_seconds, transport, labels, worker_id,
                                        worker_prefix)
        super().__init__(url, workloads, concurrency, worker_id, lease_seconds, wait_seconds, prefetch, batch_results,
                         claim_with_results, drain_timeout, heartbeat_interval, executor, request_timeout,
                         labels=dict(labels) if labels else None)
        self._token = token
        self._transport_name: TransportName = transport
        self._claimer = Claimer(self)
        self._lanes = Lanes(self)
        self._beats = Heartbeats(self)
        self._reporter = Reporter(self)
        self._progress_sink = self._beats.report_progress

    # ---------- registration ----------

    def handler(self, workload: str) -> Callable[[H], H]:
        """Decorator: ``fn`` handles the tasks of ``workload``; it returns a :class:`Result` or raises.

        Example::

            @worker.handler("render")
            def render(task: Task) -> Result:
                frames = task.parameters["frames"]   # an int on both transports
                ...
        """

        def register(fn: H) -> H:
            self._handlers[workload] = fn
            return fn

        return register

    # ---------- lifecycle ----------

    def stop(self) -> None:
        """Begins a drain, as SIGTERM does (callable from any thread); a second call gives in-flight tasks back now."""
        if self._stop.is_set():
            self._hurry.set()
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.info("signal %s: draining (stop claiming, finish in-flight tasks within %g s)",
                 signal.Signals(signum).name, self.drain_timeout)
        self.stop()

    def run(self) -> None:
        """Claims and runs tasks until SIGTERM/SIGINT (or :meth:`stop`), then drains and returns.

        Raises :class:`~leasehold.errors.WorkerConfigError` at start when a workload has no handler, when
        the coordinator refuses the token, the ``worker_id`` (e.g. outside the worker token's prefix) or the
        ``labels`` (a name or value outside ``^[a-z0-9._/-]{1,63}$``), or when it does not know one of
        ``workloads`` (a misspelled name): the message names the workloads it knows (when the coordinator
        tells, or the token may list them).

        Example::

            try:
                worker.run()
            except WorkerConfigError as e:
                sys.exit(f"worker: {e}")   # e.g. workload "rendr" not found ... known workloads: render, thumbs
        """
        missing = [w for w in self.workloads if w not in self._handlers]
        if missing:
            raise WorkerConfigError(f"no handler for workload(s) {', '.join(missing)}")
        if self.executor == "process":
            # Fork before any thread or channel exists: a forked child must not inherit either.
            ctx = multiprocessing.get_context("fork")
            self._progress_queue = ctx.SimpleQueue()
            self._cancelled_ids = CancelledIds(ctx, max(64, 4 * self.concurrency))
            self._pool = ctx.Pool(self.concurrency, initializer=child_init,
                                  initargs=(self._progress_queue, self._cancelled_ids))
        self._transport = make_transport(self.url, self._token, self._transport_name)
        previous: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            self._check_identity()
            self._check_workloads()
            self._run()
            if self._fatal is not None:
                raise self._fatal
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
            if self._pool is not None:
                self._pool.terminate()
            self._transport.close()

    def _check_identity(self) -> None:
        """Fails fast on a token or worker_id the coordinator refuses, rather than on every claim."""
        backoff = Backoff()
        req = calls.identity_probe(self)
        warned = False
        while not self._stop.is_set():
            try:
                self._call("RenewLease", req)
                return
            except NotFoundError:
                return
            except LeaseholdError as e:
                refusal = calls.identity_refusal(self, e)
                if refusal is not None:
                    raise refusal from e
                if not warned:
                    log.warning("coordinator not reachable at %s (%s); retrying with backoff", self.url, e)
                warned = True
                self._stop.wait(backoff.next())

    def _check_workloads(self) -> None:
        """Fails fast on a workload the coordinator does not know (a misspelled name), rather than idling.

        A result for a task that cannot exist, whose ``claim_next`` names the worker's workloads: the
        coordinator checks a claim_next's workloads before it looks the task up, so NOT_FOUND of the task
        means every workload is known (and the worker's labels, which it carries too, are good), and nothing
        is written either way. A coordinator that cannot tell
        (one older than claim_next, or out of reach now) leaves it to the claims: the claimer stops the
        worker on the first claim refused for an unknown workload.
        """
        try:
            self._call("CompleteTask", calls.workloads_probe(self))
        except LeaseholdError as e:
            kind, refusal = calls.workloads_refusal(self, e)
            if kind == "unknown_workloads":
                raise unknown_workloads(self, e) from e
            if refusal is not None:
                # Labels no claim can carry: every claim would be refused the same way, so fail at start.
                raise refusal from e
            if kind == "no_claim_next":
                # A coordinator older than claim_next: no report will carry one (it would be refused too).
                self._claims_refused = True
                log.warning("the coordinator refuses claim_next (%s); reports claim nothing from now on", e)

    def _run(self) -> None:
        log.info("worker %s: %d lane(s) for %s at %s over %s", self.worker_id, self.concurrency,
                 ", ".join(self.workloads), self.url, self._transport_name)
        threads = [threading.Thread(target=self._lanes.run_lane, name=f"leasehold-lane-{i}", daemon=True)
                   for i in range(self.concurrency)]
        reporter = threading.Thread(target=self._reporter.run, name="leasehold-reporter", daemon=True)
        beats = threading.Thread(target=self._beats.run, name="leasehold-heartbeats", daemon=True)
        claimer = threading.Thread(target=self._claimer.run, name="leasehold-claimer", daemon=True)
        if self._pool is not None:
            threading.Thread(target=self._beats.forward_progress, name="leasehold-progress", daemon=True).start()
        for t in [*threads, reporter, beats, claimer]:
            t.start()
        # The main thread only waits, so signal handlers run at once even while a claim is parked.
        while not self._stop.wait(0.5):
            pass
        self._drain(claimer, reporter)
        # The channel closes once no thread may still be calling on it: grpcio can crash the process
        # (SIGSEGV) when a channel is closed under a call in flight. A lane whose handler ignores its
        # cancel is not waited for long: it holds no call of its own.
        beats.join(self.request_timeout + 1)
        until = time.monotonic() + 1
        for t in threads:
            t.join(max(0.0, until - time.monotonic()))

    def _drain(self, claimer: threading.Thread, reporter: threading.Thread) -> None:
        deadline = time.monotonic() + self.drain_timeout
        with self._cond:
            while self._busy > 0 and not self._hurry.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
        # Only now abort a claim still in flight: it is parked (a claim that finds tasks answers at once,
        # and its tasks are given back as they arrive), and waiting for it would hold the exit up to
        # wait_seconds. Aborted any earlier, a claim being answered (a lane had just freed up) would
        # leave its tasks leased to this worker until their lease expired.
        self._poll.cancel()
        claimer.join(self.wait_seconds + self.request_timeout)
        with self._cond:
            unfinished = [lease for lease in self._leases.values() if not lease.finished and not lease.lost]
        for lease in unfinished:
            lease.lost = True
            self._cancel(lease, "worker draining: the task was given back")
            self._release(lease.task, "the worker stopped before the handler finished")
        self._outbox.put(None)
        reporter.join(self.request_timeout * 3)
        self._beats_stop.set()
        self._beat_wake.set()
        for _ in range(self.concurrency):
            self._work.put(None)
        log.info("worker %s drained: %s", self.worker_id, self.stats)
