#!/usr/bin/env bash
# Usage: scripts/pg-images/image.sh VERSION   (15 or 17)
#
# Makes sure a PostgreSQL VERSION image is in the local Docker engine and prints its name on
# stdout (what it did goes to stderr). In order:
#   1. the official postgres:VERSION, when the engine has it or can pull it (a registry answers);
#   2. leasehold/postgres:VERSION, already built (docker keeps images between runs);
#   3. leasehold/postgres:VERSION built here: the Dockerfile beside this script on a Debian base
#      made by debootstrap (scripts/images/debian-base.sh: leasehold/debian:SUITE, also kept;
#      bookworm for 15, trixie for 17: each release's own postgresql package).
# PG_IMAGE_SOURCE=official or debian forces one kind; DEBIAN_MIRROR picks the mirror.
# Needs a running Docker engine; building needs root and debootstrap. Starts no daemon.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
say() { printf 'pg-images: %s\n' "$*" >&2; }

version="${1:-}"
case "$version" in
  15) suite=bookworm ;;
  17) suite=trixie ;;
  *) say "unsupported PostgreSQL version '${version}' (supported: 15 from Debian bookworm, 17 from Debian trixie)"; exit 2 ;;
esac
source="${PG_IMAGE_SOURCE:-auto}"
official="postgres:${version}"
local_image="leasehold/postgres:${version}"

has_image() { docker image inspect "$1" >/dev/null 2>&1; }

if [ "$source" != debian ]; then
  if has_image "$official"; then
    say "PostgreSQL ${version}: the official image ${official} (present in the engine)"
    echo "$official"
    exit 0
  fi
  if pull_err=$(timeout 600 docker pull --quiet "$official" 2>&1 >/dev/null); then
    say "PostgreSQL ${version}: the official image ${official} (pulled)"
    echo "$official"
    exit 0
  fi
  if [ "$source" = official ]; then
    say "PostgreSQL ${version}: cannot pull ${official}: ${pull_err}"
    exit 1
  fi
  say "PostgreSQL ${version}: no registry serves ${official} (${pull_err##*: }); using a Debian-built image"
fi

if has_image "$local_image"; then
  say "PostgreSQL ${version}: ${local_image} (built earlier from Debian ${suite}; docker rmi it to rebuild)"
  echo "$local_image"
  exit 0
fi

# The Debian base (debootstrap, kept in the engine), shared with the deploy tests' images.
base="$("$here/../images/debian-base.sh" "$suite")"

say "building ${local_image}: Debian ${suite}'s postgresql-${version} on ${base}"
started=$SECONDS
log="$(mktemp "${TMPDIR:-/tmp}/leasehold-pg-image.XXXXXX")"
if ! docker build --build-arg "BASE=${base}" --build-arg "PG_MAJOR=${version}" -t "$local_image" "$here" > "$log" 2>&1; then
  tail -n 30 "$log" >&2
  rm -f "$log"
  say "docker build of ${local_image} failed"
  exit 1
fi
rm -f "$log"
say "built ${local_image} in $((SECONDS - started)) s"
echo "$local_image"
