"""Aborting a call in flight from another thread: one object the worker holds, each transport arms.

Its own module so the transports (the JSON one and the gRPC one, loaded only when wanted) both
import it without importing each other.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Interrupt:
    """Lets another thread abort a call in flight (a parked long poll, when a worker begins to drain)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancel: Callable[[], None] | None = None
        self.cancelled = False

    def arm(self, cancel: Callable[[], None]) -> None:
        """Called by the transport with how to abort the call it is about to block on."""
        with self._lock:
            self._cancel = cancel
            fire = self.cancelled
        if fire:
            cancel()

    def disarm(self) -> None:
        """Called by the transport once the call returned."""
        with self._lock:
            self._cancel = None

    def cancel(self) -> None:
        """Aborts the armed call (and any later one armed on this object)."""
        with self._lock:
            self.cancelled = True
            cancel = self._cancel
        if cancel is not None:
            cancel()
