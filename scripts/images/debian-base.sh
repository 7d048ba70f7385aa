#!/usr/bin/env bash
# Usage: scripts/images/debian-base.sh SUITE   (bookworm, trixie, …)
#
# Makes sure leasehold/debian:SUITE is in the local Docker engine and prints its name on stdout
# (what it did goes to stderr): a minimal Debian made by debootstrap (--variant=minbase) from the
# Debian mirror of /etc/apt/sources.list* (DEBIAN_MIRROR overrides it) and `docker import`ed, for
# machines that reach a Debian mirror but no container registry. The base of the PostgreSQL
# images of the version matrix (scripts/pg-images/) and of the Node, HAProxy and Prometheus
# images the deploy tests build where no registry answers (scripts/images/image.sh). Kept in the
# engine once built (docker rmi it to rebuild). Needs a running engine; building needs root and
# debootstrap. Starts no daemon.
set -euo pipefail
say() { printf 'debian-base: %s\n' "$*" >&2; }

suite="${1:-}"
[[ "$suite" =~ ^[a-z]+$ ]] || { say "usage: debian-base.sh SUITE (bookworm, trixie, …)"; exit 2; }
base="leasehold/debian:${suite}"

if docker image inspect "$base" >/dev/null 2>&1; then
  echo "$base"
  exit 0
fi

# The first Debian archive of the apt sources (one-line .list and deb822 .sources), not -security.
debian_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) { if ($(i+1) !~ /-security$/ && $i ~ /debian\/?$/) print $i; break } }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    awk 'BEGIN { RS = ""; FS = "\n" }
      { uris = ""; suites = ""
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^URIs:/) uris = substr($i, 6)
          if ($i ~ /^Suites:/) suites = substr($i, 8)
        }
        if (uris ~ /debian\/?( |$)/ && suites !~ /-security/) { split(uris, u, " "); print u[1] } }' "$f"
  done
}
mirror="${DEBIAN_MIRROR:-$(debian_mirror | head -n 1)}"
mirror="${mirror:-http://deb.debian.org/debian}"
mirror="${mirror%/}"

command -v debootstrap >/dev/null || { say "debootstrap is not installed (apt-get install debootstrap)"; exit 1; }
[ "$(id -u)" = 0 ] || { say "building ${base} with debootstrap needs root"; exit 1; }
say "building ${base}: debootstrap --variant=minbase ${suite} from ${mirror}"
root="$(mktemp -d "${TMPDIR:-/tmp}/leasehold-debootstrap-${suite}.XXXXXX")"
trap 'rm -rf "$root" "$root.log"' EXIT
started=$SECONDS
if ! debootstrap --variant=minbase "$suite" "$root" "$mirror" > "$root.log" 2>&1; then
  tail -n 20 "$root.log" >&2
  say "debootstrap of ${suite} from ${mirror} failed (does the mirror serve ${suite}? set DEBIAN_MIRROR)"
  exit 1
fi
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import -c 'CMD ["bash"]' - "$base" >/dev/null
say "built ${base} in $((SECONDS - started)) s"
echo "$base"
