"""The submitter: create, watch, list, cancel and retry jobs, read their results, and find out why they failed."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

from . import _admin_calls as admin
from . import _calls as calls
from . import _workflow_calls as workflows
from ._calls import Paged, Unary
from ._transport import Transport, TransportName, make_transport
from .errors import UnavailableError
from .models import Job, WatchUpdate
from .workflows import Workflow, WorkflowUpdate

__all__ = ["Client"]

JsonObject = dict[str, Any]
P = ParamSpec("P")
T = TypeVar("T")


def unary(build: Callable[P, Unary[T]]) -> Callable[Concatenate[Client, P], T]:
    """The :class:`Client` method of a call of ``_calls``: its signature and docstring, run and read."""

    @functools.wraps(build)
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        call = build(*args, **kwargs)
        return call.parse(self._call(call.method, call.request))

    return method


def paged(build: Callable[P, Paged[T]]) -> Callable[Concatenate[Client, P], Iterator[T]]:
    """The :class:`Client` method of a paged listing: an iterator over the items of every page, in order."""

    @functools.wraps(build)
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        listing = build(*args, **kwargs)
        token = ""
        while True:
            items, token = listing.read(self._call(listing.method, listing.page(token)))
            yield from items
            if not token:
                return

    return method


class Client:
    """A submitter's connection to a coordinator.

    Example::

        with Client("http://127.0.0.1:8080", token=os.environ.get("LEASEHOLD_TOKEN")) as client:
            created = client.create_job("scimesh", tasks=[TaskSpec(0, "s3://in/0", sha)], idempotency_key="mesh-42")
            job = client.wait(created.job.id)
            if job.status == "failed":
                for detail in client.list_tasks(job.id, status="failed"):
                    print(detail.task.chunk_index, detail.task.error_code, detail.task.error_message)
            for manifest in client.results(created.job.id):
                print(manifest.chunk_index, manifest.result_uri)

    Every method raises a :class:`~leasehold.errors.LeaseholdError` subclass (``NotFoundError``,
    ``AlreadyExistsError``, ...) carrying ``code``, ``request_id`` and, for bad input, ``violations``, alike
    on both transports. Answers are typed data classes (:mod:`leasehold.models`); the numbers inside
    ``parameters`` and ``metrics`` read the same on both transports: integral ones within ±2**53 as
    ``int``, others as ``float`` (:func:`~leasehold.models.plain_json`).

    Args:
        url: ``http://host:port`` (or ``https://``) of the coordinator.
        token: Bearer token (a submitter or admin token) when the coordinator requires one.
        transport: ``"json"`` (Connect JSON, standard library only) or ``"grpc"`` (needs grpcio).
        timeout: Seconds each call may take.
    """

    def __init__(self, url: str, *, token: str | None = None, transport: TransportName = "json",
                 timeout: float = 10.0) -> None:
        self._transport: Transport = make_transport(url, token, transport)
        self._timeout = timeout

    def __enter__(self) -> Client:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connections."""
        self._transport.close()

    def _call(self, method: str, request: JsonObject) -> JsonObject:
        return self._transport.call(method, request, self._timeout)

    # ---- jobs and tasks (submitter token); each method's text is its function's in _calls ----

    create_job = unary(calls.create_job)
    get_job = unary(calls.get_job)
    get_task = unary(calls.get_task)
    list_tasks = paged(calls.list_tasks)
    results = paged(calls.results)
    cancel = unary(calls.cancel)
    retry = unary(calls.retry)
    list_jobs = paged(calls.list_jobs)

    def watch(self, job_id: str, *, timeout: float | None = None) -> Iterator[WatchUpdate]:
        """Iterates over the job's updates: first a snapshot, then every event as it commits.

        The iterator ends after the event that makes the job final (at once for a finished job).
        ``timeout`` bounds the whole stream (default: none).
        """
        for message in self._transport.stream("WatchJob", calls.watch_request(job_id), timeout):
            yield WatchUpdate.from_json(message)

    def wait(self, job_id: str, *, timeout: float | None = None) -> Job:
        """Blocks until the job is final (completed, failed or cancelled) and returns it.

        A stream the coordinator ends early (it shuts down streams on restart) is opened again.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = WAIT_RETRY_FIRST
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            try:
                for _ in self.watch(job_id, timeout=left):
                    pass
                job = self.get_job(job_id).job
                if job.finished:
                    return job
            except UnavailableError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, WAIT_RETRY_MAX)

    # ---- workflows (submitter token): jobs created together, each a named node, with the edges between them ----

    create_workflow = unary(workflows.create_workflow)
    get_workflow = unary(workflows.get_workflow)
    list_workflows = paged(workflows.list_workflows)
    cancel_workflow = unary(workflows.cancel_workflow)
    retry_workflow = unary(workflows.retry_workflow)

    def watch_workflow(self, workflow_id: str, *, timeout: float | None = None) -> Iterator[WorkflowUpdate]:
        """Iterates over the workflow's updates: first a snapshot, then each node's status change as it commits.

        The iterator ends after the change that makes the last unfinished node final (at once for a finished
        workflow). ``timeout`` bounds the whole stream (default: none).
        """
        request = workflows.watch_workflow_request(workflow_id)
        for message in self._transport.stream("WatchWorkflow", request, timeout):
            yield WorkflowUpdate.from_json(message)

    def wait_workflow(self, workflow_id: str, *, timeout: float | None = None) -> Workflow:
        """Blocks until every node of the workflow is final and returns it (with its nodes).

        A stream the coordinator ends early (it shuts down streams on restart) is opened again.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = WAIT_RETRY_FIRST
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            try:
                for _ in self.watch_workflow(workflow_id, timeout=left):
                    pass
                workflow = self.get_workflow(workflow_id)
                if workflow.finished:
                    return workflow
            except UnavailableError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                time.sleep(delay)
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


# How wait() opens a stream the coordinator ended early again: after 0.1 s, doubling to 2 s.
WAIT_RETRY_FIRST = 0.1
WAIT_RETRY_MAX = 2.0
