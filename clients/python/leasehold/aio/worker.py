"""The asyncio worker: ``async def`` handlers (and plain ones in a thread pool), run as :class:`~leasehold.Worker` runs its own.

Claims, heartbeats and reports are coroutines of one event loop: the claimer (here), the lanes and the
heartbeats (``_lanes``), the reporter (``_reporter``), sharing the worker's state (``_state``). They send the
sync worker's requests and read its refusals the same way (``leasehold._worker_calls``), so the two behave
alike; only how they wait differs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from .. import _worker_calls as calls
from .._state import Backoff, log
from .._transport import TransportName
from ..errors import LeaseholdError, NotFoundError, WorkerConfigError
from ..models import field_of
from ._lanes import Lanes
from ._reporter import Reporter
from ._state import AnyHandler
from ._transport import make_async_transport

__all__ = ["AsyncWorker"]

H = TypeVar("H", bound=AnyHandler)


class AsyncWorker(Lanes, Reporter):
    """Runs ``async def`` handlers (and plain ones) for leased tasks of ``workloads``, on an event loop.

    Example::

        worker = AsyncWorker("http://127.0.0.1:8080", workloads=["scimesh"], concurrency=16)

        @worker.handler("scimesh")
        async def mesh(task: AsyncTask) -> Result:
            data = await fetch(task.input_uri)            # awaits I/O: the other lanes run meanwhile
            await task.progress(0.5, "halfway")
            return Result(uri=await upload(data), sha256=hashlib.sha256(data).hexdigest())

        asyncio.run(worker.run())  # SIGTERM / SIGINT drain

    Everything :class:`~leasehold.Worker` does, with the same options and the same behaviour: long-poll
    claims for the free lanes (``prefetch``), a heartbeat at a third of each lease, results batched into
    ``CompleteTasks`` calls that claim the next tasks (``claim_with_results``), retries with jittered backoff
    through outages, a drain on SIGTERM/SIGINT, and :class:`~leasehold.WorkerConfigError` at start for a
    refused token, ``worker_id`` or labels, or an unknown workload. A lane is a coroutine, not a thread:
    ``concurrency`` bounds the tasks held at once, and a handler that awaits I/O leaves the loop to the others.

    An ``async def`` handler gets an :class:`~leasehold.aio.AsyncTask` (``await task.progress(...)``); when
    its task is cancelled, its lease lost or a drain gives it back, the handler's coroutine is cancelled
    (:class:`asyncio.CancelledError`). A plain ``def`` handler gets a :class:`~leasehold.Task` and runs in a
    pool of ``concurrency`` threads, told of a cancellation by ``task.cancelled`` as in the sync worker. The
    exceptions that fail a task and the :class:`~leasehold.Result` it returns are the sync worker's.

    Args:
        url, workloads, concurrency, token, transport, worker_id, worker_prefix, lease_seconds, wait_seconds,
        prefetch, batch_results, claim_with_results, drain_timeout, heartbeat_interval, request_timeout,
        labels: as :class:`~leasehold.Worker` (``transport="json"`` is Connect JSON over aiohttp:
        ``pip install "leasehold[aio]"``; ``"grpc"`` is ``grpc.aio``).
        handle_signals: Drain on SIGTERM/SIGINT (``loop.add_signal_handler``) while :meth:`run` runs in the
            main thread. Off for a worker that shares its process with a server that handles them (call
            :meth:`stop` from its shutdown).
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
        request_timeout: float = 10.0,
        labels: Mapping[str, str] | None = None,
        handle_signals: bool = True,
    ) -> None:
        worker_id = calls.check_options(workloads, concurrency, wait_seconds, transport, labels, worker_id,
                                        worker_prefix)
        super().__init__(url, workloads, concurrency, worker_id, lease_seconds, wait_seconds, prefetch, batch_results,
                         claim_with_results, drain_timeout, heartbeat_interval, request_timeout,
                         dict(labels) if labels else None)
        self._token = token
        self._transport_name: TransportName = transport
        self.handle_signals = handle_signals

    # ---------- registration ----------

    def handler(self, workload: str) -> Callable[[H], H]:
        """Decorator: ``fn`` handles the tasks of ``workload``; ``async def`` or plain, it returns a Result or raises.

        Example::

            @worker.handler("render")
            async def render(task: AsyncTask) -> Result:
                frames = task.parameters["frames"]   # an int on both transports
                ...
        """

        def register(fn: H) -> H:
            self._handlers[workload] = fn
            return fn

        return register

    # ---------- lifecycle ----------

    def stop(self) -> None:
        """Begins a drain, as SIGTERM does (from any thread); a second call gives in-flight tasks back now."""
        loop = self._loop
        if loop is not None and threading.get_ident() != self._loop_thread and not loop.is_closed():
            loop.call_soon_threadsafe(self.stop)
            return
        if self._stopping:
            self._hurrying = True
            if loop is not None:
                self._hurry.set()
        self._stopping = True
        if loop is not None:
            self._stop.set()
            self._changed()

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("signal %s: draining (stop claiming, finish in-flight tasks within %g s)", sig.name, self.drain_timeout)
        self.stop()

    async def run(self) -> None:
        """Claims and runs tasks until SIGTERM/SIGINT (or :meth:`stop`), then drains and returns.

        Raises :class:`~leasehold.errors.WorkerConfigError` at start as :meth:`leasehold.Worker.run` does: a
        workload without a handler, a token, ``worker_id`` or labels the coordinator refuses, or a workload
        it does not know (the message names the ones it knows).

        Example::

            try:
                asyncio.run(worker.run())
            except WorkerConfigError as e:
                sys.exit(f"worker: {e}")
        """
        missing = [w for w in self.workloads if w not in self._handlers]
        if missing:
            raise WorkerConfigError(f"no handler for workload(s) {', '.join(missing)}")
        stopped_early = self._stopping
        self._start_state()
        if stopped_early:
            self._stop.set()
        self._transport = make_async_transport(self.url, self._token, self._transport_name)
        self._threads = concurrent.futures.ThreadPoolExecutor(self.concurrency, thread_name_prefix="leasehold-lane")
        loop = asyncio.get_running_loop()
        signals: dict[signal.Signals, Any] = {}
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    previous = signal.getsignal(sig)
                    loop.add_signal_handler(sig, self._on_signal, sig)
                    signals[sig] = previous
                except (NotImplementedError, RuntimeError):  # an event loop without signal support
                    pass
        try:
            await self._check_identity()
            await self._check_workloads()
            await self._run()
            if self._fatal is not None:
                raise self._fatal
        finally:
            for sig, previous in signals.items():
                loop.remove_signal_handler(sig)
                signal.signal(sig, previous)
            self._threads.shutdown(wait=False, cancel_futures=True)
            await self._transport.close()

    async def _check_identity(self) -> None:
        """Fails fast on a token or worker_id the coordinator refuses, rather than on every claim."""
        backoff = Backoff()
        warned = False
        while not self._stopping:
            try:
                await self._call("RenewLease", calls.identity_probe(self))
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
                await self._sleep_unless_stopped(backoff.next())

    async def _check_workloads(self) -> None:
        """Fails fast on a workload the coordinator does not know, as the sync worker does (its probe)."""
        try:
            await self._call("CompleteTask", calls.workloads_probe(self))
        except LeaseholdError as e:
            kind, refusal = calls.workloads_refusal(self, e)
            if kind == "unknown_workloads":
                raise await self._unknown_workloads(e) from e
            if refusal is not None:
                raise refusal from e
            if kind == "no_claim_next":
                self._claims_refused = True
                log.warning("the coordinator refuses claim_next (%s); reports claim nothing from now on", e)

    async def _unknown_workloads(self, e: LeaseholdError) -> WorkerConfigError:
        known = calls.known_workloads_of(e)
        if known is None:
            try:  # an admin or open coordinator tells; a worker token may not
                known = calls.workload_names(await self._call("ListWorkloads", {}))
            except LeaseholdError:
                pass
        return calls.unknown_workloads(self, e, known)

    async def _run(self) -> None:
        log.info("worker %s: %d lane(s) for %s at %s over %s (asyncio)", self.worker_id, self.concurrency,
                 ", ".join(self.workloads), self.url, self._transport_name)
        reporter = asyncio.create_task(self._reports(), name="leasehold-reporter")
        beats = asyncio.create_task(self._heartbeats(), name="leasehold-heartbeats")
        claimer = asyncio.create_task(self._claims(), name="leasehold-claimer")
        try:
            await self._stop.wait()
            await self._drain(claimer, reporter)
        finally:
            for part in (claimer, beats, reporter, *self._chores):
                part.cancel()
            for lease in self._leases.values():
                self._cancel(lease, "the worker stopped")
            await asyncio.gather(claimer, beats, reporter, *self._lanes, *self._chores, return_exceptions=True)

    async def _claims(self) -> None:
        """Claims tasks for as many lanes as are free (none reserved by the reporter) and runs them."""
        backoff = Backoff()
        outage = False
        while True:
            while self._busy + self._reserved >= self.concurrency and not self._stopping:
                self._freed.clear()
                await self._freed.wait()
            if self._stopping:
                return
            req = calls.claim_request(self, self.concurrency - self._busy - self._reserved)
            try:
                res = await self._call("ClaimTasks", req, extra_timeout=self.wait_seconds)
            except NotFoundError as e:
                # A workload the coordinator does not know: no retry fixes a misspelled name.
                self._fatal = await self._unknown_workloads(e)
                log.error("%s", self._fatal)
                self.stop()
                return
            except LeaseholdError as e:
                if self._stopping:
                    return
                if not outage:
                    log.warning("claim failed (%s); retrying with backoff", e)
                outage = True
                await self._sleep_unless_stopped(backoff.next())
                continue
            if outage:
                log.info("coordinator reachable again at %s", self.url)
                outage = False
            backoff.reset()
            tasks = field_of(res, "tasks") or []
            await self._dispatch(tasks)
            if not tasks and self.wait_seconds == 0:
                await self._sleep_unless_stopped(1.0)

    async def _drain(self, claimer: asyncio.Task[None], reporter: asyncio.Task[None]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_timeout
        while self._busy > 0 and not self._hurrying:
            left = deadline - loop.time()
            if left <= 0:
                break
            self._freed.clear()
            try:
                await asyncio.wait_for(self._freed.wait(), min(left, 0.5))
            except asyncio.TimeoutError:
                pass
        # Only now abort a claim still in flight: it is parked (a claim that finds tasks answers at once, and
        # its tasks are given back as they arrive); aborted any earlier, a claim being answered would leave
        # its tasks leased to this worker until their lease expired.
        claimer.cancel()
        await asyncio.gather(claimer, return_exceptions=True)
        unfinished = [lease for lease in self._leases.values() if not lease.finished and not lease.lost]
        for lease in unfinished:
            lease.lost = True
            self._cancel(lease, "worker draining: the task was given back")
            await self._release(lease.task, "the worker stopped before the handler finished")
        self._outbox.put_nowait(None)
        try:
            await asyncio.wait_for(asyncio.shield(reporter), self.request_timeout * 3)
        except asyncio.TimeoutError:
            pass
        log.info("worker %s drained: %s", self.worker_id, self.stats)
