#!/bin/sh
# The image's entrypoint (under tini). The first argument picks what runs:
#   coordinator (the default)  the coordinator, as `npm start` runs it (the same node flags),
#                              on every address (HOST 0.0.0.0 unless set; without tokens it
#                              then wants ALLOW_UNAUTHENTICATED=true, see docs/authentication.md);
#   migrate up|down|status     the migrations against DATABASE_URL (bin/migrate.js);
#   leasehold …                the command line (bin/leasehold.js; `--url` names the coordinator);
#   anything else              run as given (`docker run -it IMAGE bash`).
# exec each time, so the process tini signals is node itself.
set -e
case "${1:-coordinator}" in
  coordinator)
    [ "$#" -gt 0 ] && shift
    # Set here, not in the image's ENV: migrate and the CLI read the same configuration, and a
    # HOST that is not loopback without tokens is refused there too.
    export HOST="${HOST:-0.0.0.0}"
    exec node --enable-source-maps --max-semi-space-size=8 --initial-old-space-size=48 /app/bin/start.js "$@"
    ;;
  migrate)
    shift
    exec node --enable-source-maps /app/bin/migrate.js "$@"
    ;;
  leasehold)
    shift
    exec node --enable-source-maps /app/bin/leasehold.js "$@"
    ;;
  *)
    exec "$@"
    ;;
esac
