#!/usr/bin/env bash
# The official postgres image's conventions, reduced to what a test server needs: on first start
# (no PG_VERSION in PGDATA) initdb as POSTGRES_USER with POSTGRES_PASSWORD, password auth from
# any host (POSTGRES_HOST_AUTH_METHOD, scram-sha-256 by default), POSTGRES_DB created, then
# /docker-entrypoint-initdb.d/*.sql and *.sh run on a server that listens on no TCP port, so
# pg_isready over TCP answers only once the real server is up. Runs as the postgres OS user.
set -Eeuo pipefail

if [ "${1:0:1}" = '-' ]; then
  set -- postgres "$@"
fi

if [ "$1" = postgres ] && [ "$(id -u)" = 0 ]; then
  install -d -o postgres -g postgres -m 700 "$PGDATA"
  install -d -o postgres -g postgres -m 3777 /var/run/postgresql
  exec setpriv --reuid=postgres --regid=postgres --init-groups "${BASH_SOURCE[0]}" "$@"
fi

if [ "$1" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_USER:=postgres}"
  : "${POSTGRES_DB:=$POSTGRES_USER}"
  : "${POSTGRES_HOST_AUTH_METHOD:=scram-sha-256}"
  : "${POSTGRES_INITDB_ARGS:=}"
  if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$POSTGRES_HOST_AUTH_METHOD" != trust ]; then
    echo >&2 "error: POSTGRES_PASSWORD is not set (or set POSTGRES_HOST_AUTH_METHOD=trust)"
    exit 1
  fi
  # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of flags, as in the official image
  initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "${POSTGRES_PASSWORD:-}") \
    --auth-local=trust --auth-host="$POSTGRES_HOST_AUTH_METHOD" $POSTGRES_INITDB_ARGS
  printf '\nhost all all all %s\n' "$POSTGRES_HOST_AUTH_METHOD" >> "$PGDATA/pg_hba.conf"

  pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start
  psql=(psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --dbname postgres)
  if [ "$POSTGRES_DB" != postgres ]; then
    "${psql[@]}" --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
  fi
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sh) echo "running $f"; . "$f" ;;
      *.sql) echo "running $f"; "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
      *) ;;
    esac
  done
  pg_ctl -D "$PGDATA" -m fast -w stop
  echo "PostgreSQL init process complete; ready for start up."
fi

exec "$@"
