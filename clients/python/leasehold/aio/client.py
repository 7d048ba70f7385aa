"""The asyncio submitter: every :class:`~leasehold.Client` method as a coroutine, listings as async iterators."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from .. import _admin_calls as admin
from .. import _calls as calls
from .. import _workflow_calls as workflows
from .._calls import Paged, Unary
from .._transport import TransportName
from ..client import WAIT_RETRY_FIRST, WAIT_RETRY_MAX
from ..errors import UnavailableError
from ..models import Job, WatchUpdate
from ..workflows import Workflow, WorkflowUpdate
from ._transport import AsyncTransport, make_async_transport

__all__ = ["AsyncClient"]

JsonObject = dict[str, Any]
P = ParamSpec("P")
T = TypeVar("T")


def unary(build: Callable[P, Unary[T]]) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]]:
    """The :class:`AsyncClient` coroutine of a call of ``leasehold._calls``: its signature and docstring."""

    @functools.wraps(build)
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        call = build(*args, **kwargs)
        return call.parse(await self._call(call.method, call.request))

    return method


def paged(build: Callable[P, Paged[T]]) -> Callable[Concatenate[AsyncClient, P], AsyncIterator[T]]:
    """The :class:`AsyncClient` method of a paged listing: an async iterator over the items of every page."""

    @functools.wraps(build)
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
        listing = build(*args, **kwargs)
        token = ""
        while True:
            items, token = listing.read(await self._call(listing.method, listing.page(token)))
            for item in items:
                yield item
            if not token:
                return

    return method


class AsyncClient:
    """A submitter's connection to a coordinator, for asyncio code: the :class:`~leasehold.Client` as coroutines.

    Every method of :class:`~leasehold.Client` with the same name, arguments, answers and exceptions: the
    calls return coroutines, and the listings (``list_jobs``, ``list_tasks``, ``results``,
    ``list_settlements``, ``list_adjustments``, ``list_workflows``) and ``watch`` and ``watch_workflow`` are
    async iterators. Both clients build their requests and read
    their answers with the same code, so they cannot drift apart.

    Example::

        async with AsyncClient("http://127.0.0.1:8080", token=os.environ.get("LEASEHOLD_TOKEN")) as client:
            created = await client.create_job("scimesh", tasks=[TaskSpec(0, "s3://in/0", sha)])
            async for update in client.watch(created.job.id):
                if update.event and update.event.kind == "task_progress":
                    print(update.event.chunk_index, update.event.progress, update.event.message)
            async for manifest in client.results(created.job.id):
                print(manifest.chunk_index, manifest.result_uri)

    One client serves any number of concurrent coroutines of one event loop (a FastAPI app's requests):
    over Connect JSON through aiohttp's pool of keep-alive connections (``pip install "leasehold[aio]"``),
    over gRPC through one ``grpc.aio`` channel.

    Args:
        url: ``http://host:port`` (or ``https://``) of the coordinator.
        token: Bearer token (a submitter or admin token) when the coordinator requires one.
        transport: ``"json"`` (Connect JSON over aiohttp) or ``"grpc"`` (grpc.aio).
        timeout: Seconds each call may take.
    """

    def __init__(self, url: str, *, token: str | None = None, transport: TransportName = "json",
                 timeout: float = 10.0) -> None:
        self._transport: AsyncTransport = make_async_transport(url, token, transport)
        self._timeout = timeout

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the connections."""
        await self._transport.close()

    async def _call(self, method: str, request: JsonObject) -> JsonObject:
        return await self._transport.call(method, request, self._timeout)

    # ---- jobs and tasks (submitter token); each method's text is its function's in leasehold._calls ----

    create_job = unary(calls.create_job)
    get_job = unary(calls.get_job)
    get_task = unary(calls.get_task)
    list_tasks = paged(calls.list_tasks)
    results = paged(calls.results)
    cancel = unary(calls.cancel)
    retry = unary(calls.retry)
    list_jobs = paged(calls.list_jobs)

    async def watch(self, job_id: str, *, timeout: float | None = None) -> AsyncIterator[WatchUpdate]:
        """Iterates over the job's updates: first a snapshot, then every event as it commits.

        The iterator ends after the event that makes the job final (at once for a finished job).
        ``timeout`` bounds the whole stream (default: none).
        """
        async for message in self._transport.stream("WatchJob", calls.watch_request(job_id), timeout):
            yield WatchUpdate.from_json(message)

    async def wait(self, job_id: str, *, timeout: float | None = None) -> Job:
        """Waits until the job is final (completed, failed or cancelled) and returns it.

        A stream the coordinator ends early (it shuts down streams on restart) is opened again.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = WAIT_RETRY_FIRST
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            try:
                async for _ in self.watch(job_id, timeout=left):
                    pass
                job = (await self.get_job(job_id)).job
                if job.finished:
                    return job
            except UnavailableError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, WAIT_RETRY_MAX)

    # ---- workflows (submitter token); each method's text is its function's in leasehold._workflow_calls ----

    create_workflow = unary(workflows.create_workflow)
    get_workflow = unary(workflows.get_workflow)
    list_workflows = paged(workflows.list_workflows)
    cancel_workflow = unary(workflows.cancel_workflow)
    retry_workflow = unary(workflows.retry_workflow)

    async def watch_workflow(self, workflow_id: str, *, timeout: float | None = None) -> AsyncIterator[WorkflowUpdate]:
        """Iterates over the workflow's updates: first a snapshot, then each node's status change as it commits.

        The iterator ends after the change that makes the last unfinished node final (at once for a finished
        workflow). ``timeout`` bounds the whole stream (default: none).
        """
        request = workflows.watch_workflow_request(workflow_id)
        async for message in self._transport.stream("WatchWorkflow", request, timeout):
            yield WorkflowUpdate.from_json(message)

    async def wait_workflow(self, workflow_id: str, *, timeout: float | None = None) -> Workflow:
        """Waits until every node of the workflow is final and returns it (with its nodes).

        A stream the coordinator ends early (it shuts down streams on restart) is opened again.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = WAIT_RETRY_FIRST
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            try:
                async for _ in self.watch_workflow(workflow_id, timeout=left):
                    pass
                workflow = await self.get_workflow(workflow_id)
                if workflow.finished:
                    return workflow
            except UnavailableError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, WAIT_RETRY_MAX)

    # ---- workloads and flow control, schedules, accounts (admin token); settlement (billing token) ----

    put_workload = unary(admin.put_workload)
    list_workloads = unary(admin.list_workloads)
    put_key_limit = unary(admin.put_key_limit)
    list_workload_keys = unary(admin.list_workload_keys)
    pause = unary(admin.pause)
    resume = unary(admin.resume)
    put_schedule = unary(admin.put_schedule)
    get_schedule = unary(admin.get_schedule)
    list_schedules = unary(admin.list_schedules)
    delete_schedule = unary(admin.delete_schedule)
    pause_schedule = unary(admin.pause_schedule)
    resume_schedule = unary(admin.resume_schedule)
    put_account = unary(admin.put_account)
    get_account = unary(admin.get_account)
    list_accounts = unary(admin.list_accounts)
    get_account_usage = unary(admin.get_account_usage)
    list_settlements = paged(admin.list_settlements)
    settle_job = unary(admin.settle_job)
    list_adjustments = paged(admin.list_adjustments)
    settle_adjustment = unary(admin.settle_adjustment)
