#!/usr/bin/env bash
# The Python client's static checks, for CI (npm test runs the same through
# test/clients/python-client.test.ts, plus the pytest suite):
#   generated modules fresh, mypy --strict, ruff, and a wheel that builds.
# Uses the repository's .venv, creating it the way `npm test` does (pinned
# requirements-dev.txt + this package, editable) when missing or stale.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
python="$(node --import tsx --input-type=module -e \
  'const { ensurePythonEnv } = await import("./test/support/python-env.ts"); process.stdout.write(ensurePythonEnv());')"

echo "==> clients/python: generated modules match the proto"
"$here/generate.sh" --check "$python"
cd "$here"
echo "==> clients/python: mypy --strict"
"$python" -m mypy
echo "==> clients/python: ruff check"
"$python" -m ruff check --no-cache .
echo "==> clients/python: wheel"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"$python" -m pip wheel --quiet --no-deps --no-build-isolation --disable-pip-version-check -w "$out" .
ls "$out"
