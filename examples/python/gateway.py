"""A FastAPI gateway on leasehold.aio: submits a job, streams its progress as Server-Sent Events, reads its results.

    pip install "./clients/python[aio]" fastapi uvicorn
    LEASEHOLD_URL=http://127.0.0.1:8080 uvicorn gateway:app --app-dir examples/python --port 8000

    POST /jobs {"workload": "scimesh", "chunks": 5}   201 {"job_id": "…", "status": "pending", "tasks": 5}
    GET  /jobs/{job_id}/events                         text/event-stream, one event per change, ending when the
                                                       job is final: snapshot, then progress, task and job events
    GET  /jobs/{job_id}/results                        the result manifests in chunk order

LEASEHOLD_TOKEN: a submitter token; LEASEHOLD_TRANSPORT: "json" (Connect JSON over aiohttp, the default) or "grpc".
"fail_chunk": K asks the example worker to fail chunk K. The coordinator's refusals keep their meaning: an unknown
workload or job is 404, a bad request 400 naming its fields; every error carries the coordinator's request id.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from leasehold import InvalidArgumentError, LeaseholdError, NotFoundError, TaskSpec
from leasehold.aio import AsyncClient
from pydantic import BaseModel, Field

# One client for the whole app: it serves every request's coroutine (a pool of connections, or one channel).
leasehold = AsyncClient(os.environ.get("LEASEHOLD_URL", "http://127.0.0.1:8080"), token=os.environ.get("LEASEHOLD_TOKEN"),
                        transport="grpc" if os.environ.get("LEASEHOLD_TRANSPORT") == "grpc" else "json")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Closes the client's connections when the server stops."""
    yield
    await leasehold.close()


app = FastAPI(title="Leasehold gateway", lifespan=lifespan)


class JobRequest(BaseModel):
    """What a caller asks for: ``chunks`` chunks of ``workload``."""

    workload: str = "scimesh"
    chunks: int = Field(default=4, ge=1, le=1000)
    fail_chunk: int | None = None


@app.exception_handler(LeaseholdError)
async def leasehold_error(request: Request, e: Exception) -> JSONResponse:
    """The coordinator's refusal as this API's: 404 unknown, 400 bad input (with its fields), 503 otherwise."""
    assert isinstance(e, LeaseholdError)
    status = 404 if isinstance(e, NotFoundError) else 400 if isinstance(e, InvalidArgumentError) else 503
    return JSONResponse({"error": e.code, "message": e.message, "request_id": e.request_id,
                         "fields": [v.field for v in e.violations]}, status_code=status)


@app.post("/jobs", status_code=201)
async def create_job(body: JobRequest) -> dict[str, Any]:
    """Submits the job: one task per chunk (the worker fails ``fail_chunk`` for good)."""
    tasks = [TaskSpec(i, f"s3://in/{i}", hashlib.sha256(str(i).encode()).hexdigest(),
                      {"fail": f"chunk {i} is corrupt"} if i == body.fail_chunk else None) for i in range(body.chunks)]
    created = await leasehold.create_job(body.workload, tasks=tasks, view="basic")  # the job alone: its tasks are not read
    return {"job_id": created.job.id, "status": created.job.status, "tasks": len(tasks)}


@app.get("/jobs/{job_id}/events")
async def job_events(job_id: str) -> StreamingResponse:
    """The job's changes as Server-Sent Events, from ``AsyncClient.watch``; the stream ends with the job."""
    updates = leasehold.watch(job_id)
    first = await anext(updates)  # an unknown job is refused here, before the stream's 200

    async def stream() -> AsyncIterator[str]:
        if first.snapshot is not None:
            snap = first.snapshot
            yield sse("snapshot", {"job_id": job_id, "status": snap.job.status, "total_tasks": snap.total_tasks,
                                   "completed": snap.task_counts.completed})
        async for update in updates:
            e = update.event
            if e is None:
                continue
            if e.kind == "task_progress":
                yield sse("progress", {"chunk_index": e.chunk_index, "progress": e.progress, "message": e.message})
            elif e.kind == "task_status":
                yield sse("task", {"chunk_index": e.chunk_index, "status": e.task_status, "attempt": e.attempt,
                                   "error_code": e.error_code})
            elif e.kind == "job_status":
                yield sse("job", {"status": e.job_status})

    return StreamingResponse(stream(), media_type="text/event-stream")


@app.get("/jobs/{job_id}/results")
async def job_results(job_id: str) -> list[dict[str, Any]]:
    """The result manifests of the job's completed chunks, in chunk order (every page)."""
    return [{"chunk_index": r.chunk_index, "uri": r.result_uri, "sha256": r.result_sha256}
            async for r in leasehold.results(job_id)]


def sse(event: str, data: dict[str, Any]) -> str:
    """One Server-Sent Event."""
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"
