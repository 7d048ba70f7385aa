"""A live coordinator for the tests: `node --import tsx src/main.ts` (or the build) on a real PostgreSQL.

The database is LEASEHOLD_TEST_DATABASE_URL when set (a migrated database, as `npm test` hands over),
else an embedded PostgreSQL that a first coordinator starts (and migrates) in a temporary directory.
Tokens are on: an admin token for the tests' own calls and a worker token with the prefix "pyw-".
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from leasehold import Client

REPO = Path(os.environ.get("LEASEHOLD_REPO_ROOT", Path(__file__).resolve().parents[3]))
NODE = os.environ.get("LEASEHOLD_NODE", "node")
# How node runs the coordinator: the TypeScript sources through tsx, unless the test command that
# started pytest says its build is fresh (test/support/entry.ts) and passes the built module.
COORDINATOR_ARGS: list[str] = os.environ.get("LEASEHOLD_COORDINATOR_ARGS", "--import tsx src/main.ts").split()
WORKER_APP = Path(__file__).with_name("worker_app.py")
WORKER_PREFIX = "pyw-"
START_TIMEOUT = 180.0  # a loaded 2-core machine has taken over a minute to start one

# Coordinator variables we set ourselves; a value inherited from the caller must not leak in.
_COORDINATOR_VARS = (
    "DATABASE_URL", "LISTEN_DATABASE_URL", "HOST", "PORT", "PG_POOL_MAX", "REQUEST_TIMEOUT_MS", "DEFAULT_LEASE_SECONDS",
    "DEFAULT_MAX_ATTEMPTS", "REAPER_INTERVAL_MS", "POLL_INTERVAL_MS", "SHUTDOWN_TIMEOUT_MS", "LOG_LEVEL",
    "EMBEDDED_PG_DIR", "EMBEDDED_PG_PORT", "PG_STATEMENT_TIMEOUT_MS", "PG_CONNECT_TIMEOUT_MS",
    "AUTH_TOKENS_FILE", "ALLOW_UNAUTHENTICATED", "TLS_CERT_FILE", "TLS_KEY_FILE",
    "OTEL_EXPORTER_OTLP_ENDPOINT", "RETENTION_DAYS",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Polls ``predicate`` until it returns something truthy; fails the test with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


class Coordinator:
    """One coordinator process; stop() and start() again on the same port (a restart)."""

    def __init__(self, env: dict[str, str], port: int, log_dir: Path, name: str) -> None:
        self.env = env
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in _COORDINATOR_VARS}
        env.update(self.env, PORT=str(self.port), HOST="127.0.0.1")
        self._log = open(self.log_path, "ab")  # noqa: SIM115  kept open for the process's life
        self.proc = subprocess.Popen([NODE, *COORDINATOR_ARGS], cwd=REPO, env=env,
                                     stdout=self._log, stderr=self._log)
        wait_for(lambda: self._listening(), START_TIMEOUT, f"the coordinator to listen ({self.log_path})", 0.1)

    def _listening(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"coordinator exited with {self.proc.returncode}:\n{self.log()}")
        return re.search(r"leasehold listening on http://", self.log()) is not None and self._accepts()

    def _accepts(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        self.proc = None


class Tokens:
    def __init__(self, directory: Path) -> None:
        self.admin = secrets.token_urlsafe(24)
        self.worker = secrets.token_urlsafe(24)
        self.file = directory / "tokens"
        lines = [
            f"{hashlib.sha256(self.admin.encode()).hexdigest()} admin",
            f"{hashlib.sha256(self.worker.encode()).hexdigest()} worker {WORKER_PREFIX}",
        ]
        self.file.write_text("\n".join(lines) + "\n")


class Env:
    """Everything the tests share: the database URL, tokens, the main coordinator, an admin client."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.tokens = Tokens(directory)
        self.coordinators: list[Coordinator] = []
        self._embedded: Coordinator | None = None
        url = os.environ.get("LEASEHOLD_TEST_DATABASE_URL")
        if not url:
            # The embedded coordinator owns PostgreSQL (initialised and migrated in a temporary directory);
            # every coordinator of the tests then uses it by URL, as in production mode.
            pg_dir = directory / "pg"
            pg_dir.mkdir()
            os.chmod(directory, 0o755)
            os.chmod(pg_dir, 0o777)
            pg_port = free_port()
            self._embedded = Coordinator({"EMBEDDED_PG_DIR": str(pg_dir / "data"), "EMBEDDED_PG_PORT": str(pg_port),
                                          "LOG_LEVEL": "warn"}, free_port(), directory, "embedded")
            self._embedded.start()
            url = f"postgres://postgres:leasehold@127.0.0.1:{pg_port}/leasehold"
        self.database_url = url
        self.main = self.coordinator("main")

    def coordinator(self, name: str, port: int | None = None, start: bool = True) -> Coordinator:
        c = Coordinator({
            "DATABASE_URL": self.database_url,
            "AUTH_TOKENS_FILE": str(self.tokens.file),
            "REAPER_INTERVAL_MS": "200",
            "POLL_INTERVAL_MS": "500",
            "SHUTDOWN_TIMEOUT_MS": "3000",
            # The 2-core machine is shared: under others' load a tiny statement has been seen to pass the
            # default 5 s statement timeout. These tests are about the client, so give the database room.
            "PG_STATEMENT_TIMEOUT_MS": "30000",
            "PG_CONNECT_TIMEOUT_MS": "10000",
            "REQUEST_TIMEOUT_MS": "30000",
            "LOG_LEVEL": "warn",
        }, port or free_port(), self.dir, name)
        self.coordinators.append(c)
        if start:
            c.start()
        return c

    def close(self) -> None:
        for c in self.coordinators:
            c.stop()
        if self._embedded is not None:
            self._embedded.stop()


@pytest.fixture(scope="session")
def env() -> Iterator[Env]:
    with tempfile.TemporaryDirectory(prefix="leasehold-pytest-") as d:
        e = Env(Path(d))
        try:
            yield e
        finally:
            e.close()


@pytest.fixture(params=["json", "grpc"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def admin(env: Env, transport: str) -> Iterator[Client]:
    with Client(env.main.url, token=env.tokens.admin, transport=transport, timeout=40) as c:
        yield c


_workload_seq = 0


@pytest.fixture
def workload(admin: Client, request: pytest.FixtureRequest, transport: str) -> Callable[..., str]:
    """Registers a fresh workload for the test; returns its name."""

    def make(**settings: Any) -> str:
        global _workload_seq
        _workload_seq += 1
        base = re.sub(r"[^a-z0-9]+", "_", request.node.originalname.lower()).strip("_")[:40]
        name = f"w{_workload_seq}_{base}_{transport}"
        admin.put_workload(name, **settings)
        return name

    return make


class WorkerProc:
    """A worker process running tests/worker_app.py; its stdout is one JSON event per line."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, str(WORKER_APP), *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env={**os.environ, **env, "PYTHONUNBUFFERED": "1"})
        self.events: list[dict[str, Any]] = []
        self.stderr_lines: list[str] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read_out, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            text = line.decode(errors="replace").strip()
            if text:
                with self._lock:
                    self.events.append(json.loads(text))

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._lock:
                self.stderr_lines.append(line.decode(errors="replace").rstrip())

    @property
    def stderr(self) -> str:
        with self._lock:
            return "\n".join(self.stderr_lines)

    def of(self, event: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if e["event"] == event]

    def wait_event(self, event: str, count: int = 1, timeout: float = 30.0) -> list[dict[str, Any]]:
        def ready() -> list[dict[str, Any]] | None:
            found = self.of(event)
            if len(found) >= count:
                return found
            if self.proc.poll() is not None:
                time.sleep(0.2)  # let the readers catch the last lines
                found = self.of(event)
                if len(found) >= count:
                    return found
                raise AssertionError(f"worker exited ({self.proc.returncode}) before {count} {event!r}:\n{self.stderr}")
            return None

        return wait_for(ready, timeout, f"{count} {event!r} event(s); stderr:\n{self.stderr}")  # type: ignore[no-any-return]

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float = 60.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker still running after {timeout:g} s:\n{self.stderr}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def spawn(env: Env, transport: str) -> Iterator[Callable[..., WorkerProc]]:
    """Starts worker processes (stopped with SIGKILL at the end of the test if still running)."""
    procs: list[WorkerProc] = []

    def start(workload: str, worker_id: str, *, url: str | None = None, token: str | None = None,
              **options: Any) -> WorkerProc:
        config = {"url": url or env.main.url, "token": env.tokens.worker if token is None else token,
                  "transport": transport, "workloads": [workload], "worker_id": worker_id,
                  "admin_token": env.tokens.admin, **options}
        p = WorkerProc([json.dumps(config)], {})
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()
