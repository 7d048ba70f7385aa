#!/usr/bin/env bash
# Usage: scripts/images/image.sh node|haproxy|prometheus
#
# Makes sure an image of KIND is in the local Docker engine and prints its name on stdout (what it
# did goes to stderr), for the deploy tests (test/deploy/live/) and for building the coordinator's
# image (deploy/container/Dockerfile) where no registry answers. In order:
#   1. the official image (node:20-slim, haproxy:2.8, prom/prometheus:v2.53.0), when the engine
#      has it or can pull it;
#   2. leasehold/KIND:TAG built earlier (docker keeps images between runs);
#   3. leasehold/KIND:TAG built here, on the Debian base of scripts/images/debian-base.sh
#      (bookworm, made by debootstrap), with the Dockerfile in scripts/images/KIND/:
#      - node: this machine's own Node (the `node` on PATH) and its npm copied in where the
#        official image keeps them (/usr/local/bin, /usr/local/lib/node_modules); Debian's nodejs
#        is older than the coordinator's engines field allows. Tagged with the Node version.
#      - haproxy, prometheus: Debian's packages, run the way the official images run them.
# IMAGE_SOURCE=official or debian forces one kind; DEBIAN_MIRROR picks the mirror.
# Needs a running Docker engine; building needs root and debootstrap. Starts no daemon.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
say() { printf 'images: %s\n' "$*" >&2; }

kind="${1:-}"
suite=bookworm
case "$kind" in
  node)
    official="node:20-slim"
    node_bin="$(readlink -f "$(command -v node)")"
    node_version="$("$node_bin" -p process.versions.node)"
    local_image="leasehold/node:${node_version}-${suite}-slim"
    ;;
  haproxy)
    official="haproxy:2.8"
    local_image="leasehold/haproxy:${suite}"
    ;;
  prometheus)
    official="prom/prometheus:v2.53.0"
    local_image="leasehold/prometheus:${suite}"
    ;;
  *) say "usage: image.sh node|haproxy|prometheus"; exit 2 ;;
esac
source="${IMAGE_SOURCE:-auto}"

has_image() { docker image inspect "$1" >/dev/null 2>&1; }

if [ "$source" != debian ]; then
  if has_image "$official"; then
    say "${kind}: the official image ${official} (present in the engine)"
    echo "$official"
    exit 0
  fi
  if pull_err=$(timeout 600 docker pull --quiet "$official" 2>&1 >/dev/null); then
    say "${kind}: the official image ${official} (pulled)"
    echo "$official"
    exit 0
  fi
  if [ "$source" = official ]; then
    say "${kind}: cannot pull ${official}: ${pull_err}"
    exit 1
  fi
  say "${kind}: no registry serves ${official} (${pull_err##*: }); using a Debian-built image"
fi

if has_image "$local_image"; then
  say "${kind}: ${local_image} (built earlier on Debian ${suite}; docker rmi it to rebuild)"
  echo "$local_image"
  exit 0
fi

base="$("$here/debian-base.sh" "$suite")"
context="$(mktemp -d "${TMPDIR:-/tmp}/leasehold-image-${kind}.XXXXXX")"
trap 'rm -rf "$context"' EXIT
cp "$here/$kind/Dockerfile" "$context/"
if [ "$kind" = node ]; then
  case "$node_version" in
    2[0-9].*) ;;
    *) say "node: this machine runs Node ${node_version}; the coordinator wants 20.19 or later"; exit 1 ;;
  esac
  npm_cli="$(readlink -f "$(command -v npm)")"
  npm_dir="$(cd "$(dirname "$npm_cli")/.." && pwd)"
  [ -f "$npm_dir/package.json" ] || { say "node: cannot find npm's folder (from ${npm_cli})"; exit 1; }
  cp "$node_bin" "$context/node"
  cp -a "$npm_dir" "$context/npm"
fi

say "building ${local_image} on ${base}"
started=$SECONDS
log="$context.log"
if ! docker build --build-arg "BASE=${base}" -t "$local_image" "$context" > "$log" 2>&1; then
  tail -n 30 "$log" >&2
  rm -f "$log"
  say "docker build of ${local_image} failed"
  exit 1
fi
rm -f "$log"
say "built ${local_image} in $((SECONDS - started)) s"
echo "$local_image"
