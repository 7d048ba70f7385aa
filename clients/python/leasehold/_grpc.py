"""The gRPC transport (grpcio over HTTP/2; cleartext for http://, TLS for https://)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2
from google.rpc import error_details_pb2, status_pb2

from ._connect import base_of
from ._interrupt import Interrupt
from .errors import FieldViolation, LeaseholdError, error_for, invalid_request
from .queue.v1 import queue_pb2, queue_pb2_grpc

JsonObject = dict[str, Any]

# The client retries with its own jittered backoff; grpc's default reconnect
# backoff grows to two minutes, which would leave a worker idle long after a
# restarted coordinator is back. (Not grpc.min_reconnect_backoff_ms: grpc also
# takes it as the connect timeout, and at 100 ms a busy coordinator's SETTINGS
# frame arrived too late: "connection attempt timed out before receiving SETTINGS frame".)
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.keepalive_time_ms", 30_000),
]


# Requests of lease holders: flat scalars, a metrics Struct, CompleteTasks' list of CompleteTaskRequest, and
# the ClaimTasksRequest of a report's claim_next.
_LEASE_METHODS = frozenset({"ClaimTasks", "RenewLease", "ReportProgress", "CompleteTask", "CompleteTasks", "FailTask"})


def _build(cls: Any, d: JsonObject) -> Any:
    kwargs: dict[str, Any] = {}
    for key, value in d.items():
        if key == "metrics":
            st = struct_pb2.Struct()
            st.update(value)
            kwargs[key] = st
        elif key == "results":
            kwargs[key] = [_build(queue_pb2.CompleteTaskRequest, r) for r in value]
        elif key == "claim_next":
            kwargs[key] = queue_pb2.ClaimTasksRequest(**value)
        else:
            kwargs[key] = value
    return cls(**kwargs)


def _struct(st: Any) -> JsonObject:
    out: JsonObject = json_format.MessageToDict(st)
    return out


def _task_json(t: Any) -> JsonObject:
    d: JsonObject = {
        "id": t.id, "job_id": t.job_id, "chunk_index": t.chunk_index, "workload": t.workload,
        "input_uri": t.input_uri, "input_sha256": t.input_sha256, "status": t.status, "attempt": t.attempt,
        "max_attempts": t.max_attempts, "priority": t.priority, "lease_owner": t.lease_owner,
        "result_uri": t.result_uri, "result_sha256": t.result_sha256, "error_code": t.error_code,
        "error_message": t.error_message, "version": t.version, "traceparent": t.traceparent,
        "concurrency_key": t.concurrency_key,
    }
    if t.required_labels:
        d["required_labels"] = dict(t.required_labels)
    if t.HasField("parameters"):
        d["parameters"] = _struct(t.parameters)
    if t.HasField("metrics"):
        d["metrics"] = _struct(t.metrics)
    if t.HasField("lease_expires_at"):
        d["lease_expires_at"] = t.lease_expires_at.ToJsonString()
    if t.parents:
        # A stage after others: by reflection, as only tasks of jobs with parents carry them.
        d["parents"] = [json_format.MessageToDict(p, preserving_proto_field_name=True) for p in t.parents]
    return d


def _outcome_json(o: Any) -> JsonObject:
    d: JsonObject = {"task_id": o.task_id}
    if o.HasField("error"):
        d["error"] = {"code": o.error.code, "message": o.error.message}
    if o.HasField("task"):
        d["task"] = {"id": o.task.id, "status": o.task.status}
    return d


_PATH = re.compile(r'at "\w+\.?([^"]*)"')
_FIELD = re.compile(r'field named "([^"]+)"')
_PARSING = re.compile(r"Failed to parse (\w+) field")


def _path_of(text: str) -> str:
    """The field a protobuf ParseError names (``tasks[0].chunk_idx``), as far as its message tells."""
    at, named = _PATH.search(text), _FIELD.search(text)
    if at or named:
        return ".".join(p for p in (at.group(1) if at else "", named.group(1) if named else "") if p)
    return ".".join(_PARSING.findall(text))


def _details(raw: bytes) -> tuple[str | None, dict[str, Any]]:
    """The request id and the rest of a ``grpc-status-details-bin`` trailer (a google.rpc.Status).

    The rest as :func:`~leasehold.errors.error_for` keywords: field violations, reason, metadata.
    """
    status = status_pb2.Status.FromString(raw)
    request_id: str | None = None
    violations: list[FieldViolation] = []
    reason, metadata = "", {}
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            violations.extend(FieldViolation(v.field, v.description) for v in bad.field_violations)
        elif detail.Is(error_details_pb2.RequestInfo.DESCRIPTOR):
            info = error_details_pb2.RequestInfo()
            detail.Unpack(info)
            request_id = info.request_id or None
        elif detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            error_info = error_details_pb2.ErrorInfo()
            detail.Unpack(error_info)
            reason, metadata = error_info.reason, dict(error_info.metadata)
    return request_id, {"violations": violations, "reason": reason, "metadata": metadata}


def target_of(url: str) -> tuple[bool, str]:
    """``(https, "host:port")`` of a coordinator URL."""
    https, host, port, _ = base_of(url)
    return https, f"{host}:{port}"


def metadata_of(token: str | None) -> tuple[tuple[str, str], ...]:
    """Every call's metadata: the bearer token, when there is one."""
    return (("authorization", f"Bearer {token}"),) if token else ()


def request_message(method: str, request: JsonObject) -> Any:
    """The request message of ``method`` from its proto JSON; one no message can hold raises ``InvalidArgumentError``."""
    cls = getattr(queue_pb2, f"{method}Request")
    try:
        if method in _LEASE_METHODS:
            return _build(cls, request)
        return json_format.ParseDict(request, cls())
    except (json_format.ParseError, TypeError, ValueError) as e:
        # A request no message can hold (a value of the wrong type): refused here as the coordinator
        # refuses it over JSON, so both transports raise the same error.
        raise invalid_request(method, [FieldViolation(_path_of(str(e)), str(e).split("\n")[0])]) from None


def response_json(message: Any) -> JsonObject:
    """An answer message as proto JSON (by hand on the worker's hot path, else ``json_format``)."""
    # The worker's hot path by hand: json_format walks descriptors by reflection, which made gRPC
    # cost the worker about twice the CPU per task of the JSON transport.
    name = message.DESCRIPTOR.name
    if name == "ClaimTasksResponse":
        return {"tasks": [_task_json(t) for t in message.tasks]}
    if name == "CompleteTasksResponse":
        return {"outcomes": [_outcome_json(o) for o in message.outcomes],
                "next_tasks": [_task_json(t) for t in message.next_tasks]}
    if name == "CompleteTaskResponse":
        return {"task": _task_json(message.task), "next_tasks": [_task_json(t) for t in message.next_tasks]}
    if name in ("RenewLeaseResponse", "ReportProgressResponse", "FailTaskResponse"):
        return {"task": _task_json(message.task)}
    out: JsonObject = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return out


def rpc_error(method: str, e: grpc.RpcError) -> LeaseholdError:
    """A failed call as the typed exception: its code, message, request id and rich details."""
    request_id = None
    details: dict[str, Any] = {}
    for md in (e.initial_metadata, e.trailing_metadata):
        try:
            for key, value in md() or ():
                if key == "x-request-id":
                    request_id = value
                elif key == "grpc-status-details-bin" and isinstance(value, bytes):
                    rid, details = _details(value)
                    request_id = request_id or rid
        except Exception:
            pass
    code = e.code()
    name = code.name.lower() if code is not None else "unknown"
    return error_for(name, f"{method}: {e.details()}", request_id=request_id, **details)


class GrpcTransport:
    """Calls through generated ``QueueServiceStub`` methods; messages converted from and to proto JSON."""

    def __init__(self, url: str, token: str | None) -> None:
        https, target = target_of(url)
        if https:
            self._channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(), options=CHANNEL_OPTIONS)
        else:
            self._channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        self._stub = queue_pb2_grpc.QueueServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._metadata = metadata_of(token)

    def call(self, method: str, request: JsonObject, timeout: float, interrupt: Interrupt | None = None) -> JsonObject:
        """A unary RPC."""
        fn = getattr(self._stub, method)
        try:
            if interrupt is None:
                response = fn(request_message(method, request), timeout=timeout, metadata=self._metadata)
            else:
                future = fn.future(request_message(method, request), timeout=timeout, metadata=self._metadata)
                interrupt.arm(future.cancel)
                try:
                    response = future.result()
                finally:
                    interrupt.disarm()
        except grpc.FutureCancelledError:
            raise error_for("cancelled", f"{method}: interrupted") from None
        except grpc.RpcError as e:
            raise rpc_error(method, e) from None
        return response_json(response)

    def stream(self, method: str, request: JsonObject, timeout: float | None) -> Iterator[JsonObject]:
        """A server-streaming RPC."""
        fn = getattr(self._stub, method)
        call = fn(request_message(method, request), timeout=timeout, metadata=self._metadata)
        try:
            for message in call:
                yield response_json(message)
        except grpc.RpcError as e:
            raise rpc_error(method, e) from None
        finally:
            call.cancel()

    def close(self) -> None:
        """Closes the channel."""
        self._channel.close()
