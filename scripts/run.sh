#!/usr/bin/env bash
# The project's run command (README "run"): setup, the dev build (build-dev/: the demo's dev
# endpoints; `wrangler deploy` bundles the production build, build/), local D1 migrations, the mock model
# server (if mock/model-server.mjs exists), the example chat (examples/chat/: its producer Worker
# and rindle-streams in a second `wrangler dev`, on http://127.0.0.1:8790/), then `wrangler dev`
# on http://127.0.0.1:8787/ (the demo). PORT, MOCK_PORT, CHAT_PORT, INSPECTOR_PORT and
# CHAT_INSPECTOR_PORT override the ports. State
# lives in .wrangler/state and .wrangler/chat-state (delete them to reset).
#
# DB_MODEL_WRITE_MS=40 (and DB_MODEL_READ_MS, DB_MODEL_LANES, DB_MODEL_ROUND_TRIP_MS,
# DB_MODEL_MAX_QUEUED, DB_MODEL_MAX_WAIT_MS) puts the model of the database in front of the local
# one: one queue per database, that many ms a write, D1's own overload error past its queue
# (docs/LOAD.md, "The model in the dev build").
#
# BACKEND=postgres serves the API, the demo and the example chat on PostgreSQL instead of D1: it
# starts the project's throwaway cluster (scripts/pg.sh, in .wrangler/pg; stopped again on exit),
# applies migrations/postgres/, and serves copies of wrangler.toml and of the example chat's
# config with Hyperdrive bindings to it (scripts/dev-config.mjs). Both use the same database.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
PORT="${PORT:-8787}"
MOCK_PORT="${MOCK_PORT:-8788}"
CHAT_PORT="${CHAT_PORT:-8790}"
# Each `wrangler dev` gets its own inspector port: both default to 9229, and when the two start
# together one of them can lose the race for it and exit ("Address already in use").
INSPECTOR_PORT="${INSPECTOR_PORT:-9229}"
CHAT_INSPECTOR_PORT="${CHAT_INSPECTOR_PORT:-9230}"
CHAT_STATE=".wrangler/chat-state"
BACKEND="${BACKEND:-d1}"
case "$BACKEND" in d1 | postgres) ;; *) die "BACKEND=$BACKEND: must be d1 or postgres" ;; esac

"$SCRIPTS_DIR/setup.sh"
"$SCRIPTS_DIR/build.sh" --dev

step "d1: applying migrations/ to the local database"
out="$(CI=true wrangler d1 migrations apply DB --local 2>&1)" || { printf '%s\n' "$out" >&2; die "applying D1 migrations failed"; }
out="$(CI=true wrangler d1 migrations apply DB --local --persist-to "$CHAT_STATE" 2>&1)" || { printf '%s\n' "$out" >&2; die "applying D1 migrations (example chat) failed"; }

MOCK_PID=""
CHAT_PID=""
PG_STARTED=""
cleanup() {
  [[ -n "$MOCK_PID" ]] && kill "$MOCK_PID" 2>/dev/null || true
  [[ -n "$CHAT_PID" ]] && kill -- "-$CHAT_PID" 2>/dev/null || true # its process group: wrangler, workerd
  [[ -n "$PG_STARTED" ]] && "$SCRIPTS_DIR/pg.sh" stop >/dev/null 2>&1 || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
if [[ -f mock/model-server.mjs ]]; then
  step "mock model server: http://127.0.0.1:$MOCK_PORT (log: test-artifacts/mock-model-server.log)"
  mkdir -p test-artifacts
  node mock/model-server.mjs --port "$MOCK_PORT" >test-artifacts/mock-model-server.log 2>&1 &
  MOCK_PID=$!
else
  step "mock model server: mock/model-server.mjs not present, skipping"
fi

# The model of the database: its variables, passed on to both `wrangler dev`s.
MODEL_VARS=()
for name in DB_MODEL_WRITE_MS DB_MODEL_READ_MS DB_MODEL_LANES DB_MODEL_ROUND_TRIP_MS DB_MODEL_MAX_QUEUED DB_MODEL_MAX_WAIT_MS; do
  [[ -n "${!name:-}" ]] && MODEL_VARS+=(--var "$name:${!name}")
done

# On Postgres: the cluster, before both `wrangler dev`s that reach it.
DEMO_CONFIG=()
if [[ -n "${DB_MODEL_WRITE_MS:-}" && "$BACKEND" != postgres ]]; then
  DEMO_CONFIG=(--config "$(node "$SCRIPTS_DIR/dev-config.mjs" .wrangler/model-rindle)" --persist-to .wrangler/state)
fi
CHAT_CONFIG=(-c examples/chat/wrangler.toml)
if [[ "$BACKEND" == postgres ]]; then
  step "postgres: the local cluster (scripts/pg.sh) and migrations/postgres/"
  PG_URL="$("$SCRIPTS_DIR/pg.sh" start)"
  PG_STARTED=1
  cat migrations/postgres/*.sql | "$(pg_bindir)/psql" -X -q -v ON_ERROR_STOP=1 -d "$PG_URL" >/dev/null || die "applying migrations/postgres/ failed"
  DEV_VARS=()
  [[ -f "$ROOT/.dev.vars" ]] && DEV_VARS=("$ROOT/.dev.vars")
  # The demo's Worker: a copy of wrangler.toml with the Hyperdrive binding; the example chat's:
  # a copy of its config with its own binding to the same database (examples/chat/store.js).
  DEMO_CONFIG=(--config "$(BACKEND=postgres PG_URL="$PG_URL" node "$SCRIPTS_DIR/dev-config.mjs" .wrangler/pg-rindle "${DEV_VARS[@]}")" --persist-to .wrangler/state)
  CHAT_CONFIG=(-c "$(PG_URL="$PG_URL" node "$SCRIPTS_DIR/dev-config.mjs" --chat .wrangler/pg-chat)")
fi

# The example chat: one `wrangler dev` with two configs, the example Worker first (it gets the
# port and forwards /streams/* to rindle-streams over its service binding), one database,
# its own state and dev registry (so it never binds to another dev process's rindle-streams).
# rindle-streams' config is a copy of wrangler.toml serving the dev build, with .dev.vars beside
# it (scripts/dev-config.mjs); on Postgres both configs are copies with the Hyperdrive binding.
step "example chat: http://127.0.0.1:$CHAT_PORT (log: test-artifacts/chat-example.log)"
mkdir -p test-artifacts
CHAT_RINDLE_CONFIG="$(BACKEND="$BACKEND" PG_URL="${PG_URL:-}" node "$SCRIPTS_DIR/dev-config.mjs" .wrangler/chat-rindle "$ROOT/.dev.vars")"
WRANGLER_REGISTRY_PATH="$ROOT/.wrangler/chat-registry" setsid wrangler dev \
  "${CHAT_CONFIG[@]}" -c "$CHAT_RINDLE_CONFIG" --ip 127.0.0.1 --port "$CHAT_PORT" --inspector-port "$CHAT_INSPECTOR_PORT" \
  --persist-to "$CHAT_STATE" --env-file "$ROOT/.dev.vars" --show-interactive-dev-session=false "${MODEL_VARS[@]}" \
  >test-artifacts/chat-example.log 2>&1 &
CHAT_PID=$!

if [[ "$BACKEND" == postgres ]]; then
  cat <<EOT

  PostgreSQL:    psql "$PG_URL"
                 (the message rows: SELECT id, status, seq, left(body, 40) FROM messages;)
EOT
fi

URL="http://127.0.0.1:$PORT"
# wrangler needs Node >= 22.12: where setup installed it (the machine's is older), the session
# below puts it first on the PATH, as lib.sh does for the scripts.
NODE_PATH_LINE=""
[[ "$(command -v node)" == "$NODE_TOOLS_DIR/dist/bin/node" ]] && NODE_PATH_LINE="
    export PATH=\"$NODE_TOOLS_DIR/dist/bin:\$PATH\"   # Node $NODE_VERSION, for npx wrangler"
SQL="INSERT INTO messages (id, chat_id, role) VALUES ('m1','c1','assistant')"
if [[ "$BACKEND" == postgres ]]; then INSERT_ROW="psql \"$PG_URL\" -c \"$SQL\""; else INSERT_ROW="npx wrangler d1 execute DB --local --command \"$SQL\""; fi
cat <<EOT

  Demo page:     $URL/
  Example chat:  http://127.0.0.1:$CHAT_PORT/   (AI SDK useChat + RindleChatTransport; examples/chat/)

  Try it from another terminal (in $ROOT):
$NODE_PATH_LINE
    T=\$(node scripts/mint-token.mjs m1 "read write cancel")
    $INSERT_ROW
    curl -X POST -H "authorization: Bearer \$T" $URL/streams/m1/open

    # a third terminal: watch the stream (a token in a URL may only read)
    R=\$(node scripts/mint-token.mjs m1 read)
    curl -N "$URL/streams/m1/events?token=\$R"

    curl -X POST -H "authorization: Bearer \$T" --data-binary 'Hello 👋' $URL/streams/m1/append
    curl -X POST -H "authorization: Bearer \$T" $URL/streams/m1/close
    curl -H "authorization: Bearer \$T" $URL/streams/m1/text

  (a stream id is used once: for another run insert a new row, e.g. m2, and mint a token for it)

EOT

step "wrangler dev on $URL (Ctrl-C to stop)"
# The dev build (its positional script: wrangler.toml's `main` is the production build).
# --assets public: the demo page and the vendorable JavaScript, in development only (wrangler.toml).
wrangler dev build-dev/worker/shim.mjs "${DEMO_CONFIG[@]}" "${MODEL_VARS[@]}" --ip 127.0.0.1 --port "$PORT" --inspector-port "$INSPECTOR_PORT" --assets public
