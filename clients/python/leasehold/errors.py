"""Exceptions of the leasehold client: one per coordinator error code, the same on both transports.

Example::

    try:
        client.create_job("render", tasks=[{"chunk_index": 0, "input_uri": "s3://in/0", "input_sha": "…"}])
    except InvalidArgumentError as e:
        print(e.code, e.request_id)             # invalid_argument, the coordinator's X-Request-Id (if it answered)
        for v in e.violations:                  # one per bad field
            print(v.field, v.description)       # tasks[0].input_sha: unknown field
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "AbortedError",
    "AlreadyExistsError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "FieldViolation",
    "InternalError",
    "InvalidArgumentError",
    "LeaseholdError",
    "NotFoundError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "UnauthenticatedError",
    "UnavailableError",
    "WorkerConfigError",
    "error_for",
    "invalid_request",
]


@dataclass(frozen=True)
class FieldViolation:
    """One bad field of a refused request: ``field`` is its path (``tasks[2].input_sha256``)."""

    field: str
    description: str


class LeaseholdError(Exception):
    """A call to the coordinator failed.

    Attributes:
        code: The Connect/gRPC code name in snake case (``"not_found"``, ``"aborted"``, ...).
        message: The coordinator's message.
        request_id: The coordinator's ``X-Request-Id`` of the call (matches its log line); ``None``
            when the call never got an answer (connection refused or reset), or was refused by the
            client before it was sent.
        http_status: The HTTP status for the JSON transport; ``None`` over gRPC.
        violations: Every bad field of an ``invalid_argument`` error (the coordinator's
            ``google.rpc.BadRequest`` details, or the client's own check of a request it would not
            send); empty for other errors.
        reason: The machine-readable cause of the coordinator's ``google.rpc.ErrorInfo`` detail
            (``"WORKLOAD_NOT_FOUND"``); ``""`` when it sent none.
        metadata: That detail's metadata (``{"workload": "rendr", "known_workloads": "render,thumbs"}``).
    """

    code = "unknown"

    def __init__(self, message: str, *, code: str | None = None, request_id: str | None = None,
                 http_status: int | None = None, violations: Iterable[FieldViolation] = (), reason: str = "",
                 metadata: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.request_id = request_id
        self.http_status = http_status
        self.violations: list[FieldViolation] = list(violations)
        self.reason = reason
        self.metadata: dict[str, str] = dict(metadata or {})

    def __str__(self) -> str:
        rid = f" (request id {self.request_id})" if self.request_id else ""
        return f"{self.code}: {self.message}{rid}"


class InvalidArgumentError(LeaseholdError):
    """The request broke a limit or named something malformed (HTTP 400)."""

    code = "invalid_argument"


class FailedPreconditionError(LeaseholdError):
    """The request does not fit the current state, e.g. retrying a job that is not failed (HTTP 400)."""

    code = "failed_precondition"


class UnauthenticatedError(LeaseholdError):
    """The bearer token is missing or unknown (HTTP 401)."""

    code = "unauthenticated"


class PermissionDeniedError(LeaseholdError):
    """The token's role may not make the call, or the worker_id is outside its prefix (HTTP 403)."""

    code = "permission_denied"


class NotFoundError(LeaseholdError):
    """No such job, task or workload (HTTP 404)."""

    code = "not_found"


class AbortedError(LeaseholdError):
    """The lease is stale, foreign or expired, or the task was cancelled or finished (HTTP 409)."""

    code = "aborted"


class AlreadyExistsError(LeaseholdError):
    """A different result manifest, or a different request under the same idempotency key (HTTP 409)."""

    code = "already_exists"


class UnavailableError(LeaseholdError):
    """The coordinator or its database cannot be reached (HTTP 503, or no connection at all)."""

    code = "unavailable"


class ResourceExhaustedError(UnavailableError):
    """A quota or limit is used up: an account's ``max_pending_tasks`` (the message names the numbers), HTTP 429.

    A kind of :class:`UnavailableError`, as it was before it had a class of its own: waiting may help.
    """

    code = "resource_exhausted"


class DeadlineExceededError(LeaseholdError):
    """The call's deadline passed (HTTP 504, or the client's own timeout)."""

    code = "deadline_exceeded"


class InternalError(LeaseholdError):
    """The coordinator failed unexpectedly (HTTP 500)."""

    code = "internal"


class WorkerConfigError(Exception):
    """A worker cannot start as configured (e.g. a worker_id outside its token's prefix)."""


_BY_CODE: dict[str, type[LeaseholdError]] = {
    cls.code: cls
    for cls in (
        InvalidArgumentError, FailedPreconditionError, UnauthenticatedError, PermissionDeniedError, NotFoundError,
        AbortedError, AlreadyExistsError, UnavailableError, ResourceExhaustedError, DeadlineExceededError,
        InternalError,
    )
}

# Codes without a class of their own map onto the nearest one, keeping their name in .code.
_ALIASES: dict[str, type[LeaseholdError]] = {
    "canceled": UnavailableError,
    "cancelled": UnavailableError,
    "out_of_range": InvalidArgumentError,
}


def error_for(code: str, message: str, *, request_id: str | None = None, http_status: int | None = None,
              violations: Iterable[FieldViolation] = (), reason: str = "",
              metadata: Mapping[str, str] | None = None) -> LeaseholdError:
    """The typed exception for a coordinator error code (snake case)."""
    cls = _BY_CODE.get(code) or _ALIASES.get(code) or LeaseholdError
    return cls(message, code=code, request_id=request_id, http_status=http_status, violations=violations,
               reason=reason, metadata=metadata)


def invalid_request(method: str, violations: list[FieldViolation]) -> InvalidArgumentError:
    """The error of a request the client refuses to send, as the coordinator would have refused it."""
    text = "; ".join(f"{v.field}: {v.description}" for v in violations)
    return InvalidArgumentError(f"{method}: {text}", violations=violations)
