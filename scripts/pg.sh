#!/usr/bin/env bash
# A throwaway PostgreSQL cluster in the project's local state, for the Postgres backend's tests
# and local development (never Debian's system cluster, never a service).
#
#   scripts/pg.sh start   initdb on first use, start on a free 127.0.0.1 port, print the URL
#   scripts/pg.sh url     print the URL of the running cluster (fails when it is not running)
#   scripts/pg.sh stop    stop it (the data stays; `rm -rf` the directory to reset)
#   scripts/pg.sh status  say whether it runs, and where
#
# PG_DIR chooses the directory (default .wrangler/pg; scripts/test.sh uses target/pg). Starting
# an already running cluster only prints its URL. PostgreSQL refuses to run as root, so as root
# the cluster belongs to Debian's `postgres` user (docs/TOOLCHAIN.md, "Postgres").
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

PG_DIR="$(pg_state_dir)"
DATA="$PG_DIR/data"
PORT_FILE="$PG_DIR/port"
LOG="$PG_DIR/postgres.log"
BIN="$(pg_bindir)" || die "no PostgreSQL server binaries (initdb, pg_ctl): run scripts/setup.sh (it installs Debian's postgresql as root)"

# The user the server runs as: ourselves, or (as root) Debian's `postgres`, else `nobody`.
if [[ "$(id -u)" -eq 0 ]]; then
  PG_USER="$(getent passwd postgres >/dev/null && echo postgres || echo nobody)"
  as_pg() { runuser -u "$PG_USER" -- "$@"; }
else
  PG_USER="$(id -un)"
  as_pg() { "$@"; }
fi

running() { [[ -f "$DATA/PG_VERSION" ]] && as_pg "$BIN/pg_ctl" status -D "$DATA" >/dev/null 2>&1; }

url() { printf 'postgres://%s:%s@127.0.0.1:%s/%s\n' "$PG_ROLE" "$PG_PASSWORD" "$(cat "$PORT_FILE")" "$PG_DATABASE"; }

free_port() { node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }

init_cluster() {
  step "postgres: initdb in $DATA (once)" >&2 # stdout is the URL: `start` is captured
  mkdir -p "$PG_DIR"
  [[ "$(id -u)" -ne 0 ]] || chown "$PG_USER" "$PG_DIR"
  local pwfile="$PG_DIR/.pw"
  printf '%s\n' "$PG_PASSWORD" >"$pwfile"
  [[ "$(id -u)" -ne 0 ]] || chown "$PG_USER" "$pwfile"
  # UTF8 and the C collation: text is compared by code point, as SQLite does. Password auth
  # (scram) over TCP, as Hyperdrive and hosted Postgres require, so the client's SCRAM path runs.
  as_pg "$BIN/initdb" -D "$DATA" -U "$PG_ROLE" --pwfile="$pwfile" -E UTF8 --locale=C \
    --auth-host=scram-sha-256 --auth-local=peer >"$PG_DIR/initdb.log" 2>&1 \
    || { cat "$PG_DIR/initdb.log" >&2; die "initdb failed"; }
  rm -f "$pwfile"
  # A throwaway cluster: TCP on loopback only, no Unix socket, and no fsync (a crash of the
  # machine may lose it; a crash or kill of postgres loses nothing, commits still wait for the WAL
  # write). More connections than the default 100: the tests run in parallel.
  cat >>"$DATA/postgresql.conf" <<'EOF'

# scripts/pg.sh
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
fsync = off
full_page_writes = off
max_connections = 200
EOF
}

start() {
  if running; then
    url
    return
  fi
  [[ -f "$DATA/PG_VERSION" ]] || init_cluster
  local attempt port
  for attempt in 1 2 3; do
    # The last port first, so a restarted cluster keeps its URL (tests/e2e/pg-faults.test.mjs).
    if [[ "$attempt" -eq 1 && -s "$PORT_FILE" ]]; then port="$(cat "$PORT_FILE")"; else port="$(free_port)"; fi
    if as_pg "$BIN/pg_ctl" start -D "$DATA" -l "$LOG" -w -t 60 -o "-p $port" >/dev/null 2>&1; then
      printf '%s\n' "$port" >"$PORT_FILE"
      ensure_database "$port"
      url
      return
    fi
    warn "postgres did not start on port $port (attempt $attempt); its log: $LOG"
  done
  tail -n 20 "$LOG" >&2 || true
  die "postgres did not start"
}

# The app's database, created on the first start.
ensure_database() {
  local admin="postgres://$PG_ROLE:$PG_PASSWORD@127.0.0.1:$1/postgres"
  if [[ "$("$BIN/psql" "$admin" -XAtqc "SELECT 1 FROM pg_database WHERE datname = '$PG_DATABASE'")" != 1 ]]; then
    "$BIN/psql" "$admin" -Xqc "CREATE DATABASE \"$PG_DATABASE\"" >/dev/null
  fi
}

stop() {
  if running; then
    as_pg "$BIN/pg_ctl" stop -D "$DATA" -m fast -w >/dev/null
    step "postgres: stopped ($DATA)"
  fi
}

case "${1:-}" in
  start) start ;;
  url) running || die "postgres is not running in $PG_DIR: scripts/pg.sh start"; url ;;
  stop) stop ;;
  status)
    if running; then echo "running in $DATA: $(url)"; else echo "not running ($DATA)"; exit 1; fi
    ;;
  *) die "usage: scripts/pg.sh start|url|stop|status" ;;
esac
