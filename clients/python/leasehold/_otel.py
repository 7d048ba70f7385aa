"""OpenTelemetry, when installed: continue a task's traceparent in its handler, and send the current one with jobs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

_otel: Any = None  # the imported modules, False when OpenTelemetry is not installed


def _load() -> Any:
    global _otel
    if _otel is None:
        try:
            from opentelemetry import context, trace
            from opentelemetry.propagate import extract, inject

            _otel = (context, trace, extract, inject)
        except ImportError:
            _otel = False
    return _otel


@contextlib.contextmanager
def handler_span(traceparent: str, name: str, attributes: dict[str, Any]) -> Iterator[None]:
    """Runs the block in a span whose parent is ``traceparent`` (a no-op without OpenTelemetry)."""
    otel = _load()
    if not otel or not traceparent:
        yield
        return
    context, trace, extract, _ = otel
    token = context.attach(extract({"traceparent": traceparent}))
    try:
        with trace.get_tracer("leasehold").start_as_current_span(name, attributes=attributes):
            yield
    finally:
        context.detach(token)


def current_traceparent() -> str | None:
    """The traceparent of the current span, if OpenTelemetry is installed and a span is active."""
    otel = _load()
    if not otel:
        return None
    carrier: dict[str, str] = {}
    otel[3](carrier)
    return carrier.get("traceparent")
