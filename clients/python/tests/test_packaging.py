"""The package as users get it: a wheel with the generated modules and py.typed; JSON without grpcio."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import Env

CLIENT = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_the_generated_modules_and_py_typed(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(tmp_path), str(CLIENT)], check=True, capture_output=True)
    [wheel] = tmp_path.glob("leasehold-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("leasehold/__init__.py", "leasehold/py.typed", "leasehold/queue/v1/queue_pb2.py",
                 "leasehold/queue/v1/queue_pb2.pyi", "leasehold/queue/v1/queue_pb2_grpc.py"):
        assert name in names
    assert not any(n.startswith("tests/") for n in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    requires = sorted(line.split(":", 1)[1].strip() for line in metadata.splitlines()
                      if line.startswith("Requires-Dist:") and "extra ==" not in line)
    assert requires == ["googleapis-common-protos>=1.63", "grpcio>=1.84.0", "protobuf<8,>=7.35.1"]


def test_the_json_transport_needs_neither_grpcio_nor_protobuf_nor_googleapis(env: Env) -> None:
    # Make both unimportable, then submit a job and read it back over Connect JSON.
    code = f"""
import sys
sys.modules["grpc"] = None
sys.modules["google.protobuf"] = None
sys.modules["google.rpc"] = None
import leasehold
c = leasehold.Client({env.main.url!r}, token={env.tokens.admin!r})
w = c.put_workload("nogrpc")
job = c.create_job("nogrpc", input_uri="s3://x", input_sha256="a" * 64).job
print(c.get_job(job.id).job.status)
try:
    leasehold.Client({env.main.url!r}, transport="grpc")
except ImportError:
    print("grpc needs grpcio")
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    assert out == ["pending", "grpc", "needs", "grpcio"]
