#!/usr/bin/env bash
# Regenerates the protobuf and gRPC modules of the leasehold package from the
# one proto contract. Usage: clients/python/generate.sh [PYTHON]
#   PYTHON: an interpreter with grpcio-tools (default: the repository's .venv,
#   which `npm test` builds from requirements-dev.txt, else python3).
# With --check it regenerates into a temporary directory and fails (exit 1)
# when the committed modules differ, for CI.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
python="${1:-}"
if [ -z "$python" ]; then
  if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python=python3; fi
fi
out="$(mktemp -d)"
src="$(mktemp -d)"
trap 'rm -rf "$out" "$src"' EXIT
# The proto's google.api.http options are the coordinator's REST routes, nothing a client needs;
# left in, the generated module would import google.api.annotations_pb2 and the package would
# need googleapis-common-protos besides grpcio and protobuf. Generate from a copy without them.
mkdir -p "$src/leasehold/queue/v1"
sed -E -e '/^import "google\/api\/annotations\.proto";$/d' -e '/^[[:space:]]*option \(google\.api\.http\) = \{.*\};$/d' \
  "$root/proto/leasehold/queue/v1/queue.proto" > "$src/leasehold/queue/v1/queue.proto"
if grep -qE '(option \(google\.api|import "google/api)' "$src/leasehold/queue/v1/queue.proto"; then
  echo "generate.sh: a google.api.http option spans several lines; keep each on one line" >&2
  exit 1
fi
"$python" -m grpc_tools.protoc -I "$src" \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  "$src/leasehold/queue/v1/queue.proto"
gen="$out/leasehold/queue/v1"
# The _grpc module imports its messages by the proto's import path; should a
# generator write it relative (`import queue_pb2 as ...`, as it does when run
# from inside the proto directory), the module would only import with v1/ on
# sys.path. Pin it to the package path so `import leasehold` is all it needs.
sed -i -E 's/^import queue_pb2 as /from leasehold.queue.v1 import queue_pb2 as /' "$gen/queue_pb2_grpc.py"
if ! grep -q '^from leasehold\.queue\.v1 import queue_pb2 as ' "$gen/queue_pb2_grpc.py"; then
  echo "generate.sh: queue_pb2_grpc.py does not import leasehold.queue.v1.queue_pb2" >&2
  exit 1
fi
target="$here/leasehold/queue/v1"
if [ "$check" = 1 ]; then
  status=0
  for f in queue_pb2.py queue_pb2.pyi queue_pb2_grpc.py; do
    if ! diff -u "$target/$f" "$gen/$f"; then status=1; fi
  done
  if [ "$status" != 0 ]; then
    echo "clients/python/leasehold/queue/v1 is stale: run clients/python/generate.sh and commit the result" >&2
  fi
  exit "$status"
fi
mkdir -p "$target"
cp "$gen/queue_pb2.py" "$gen/queue_pb2.pyi" "$gen/queue_pb2_grpc.py" "$target/"
echo "generated $target/{queue_pb2.py,queue_pb2.pyi,queue_pb2_grpc.py}"
