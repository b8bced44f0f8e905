#!/usr/bin/env bash
# The project's run command (README "run"): setup, build, local D1 migrations, the mock model
# server (if mock/model-server.mjs exists), then `wrangler dev` on http://127.0.0.1:8787/.
# PORT and MOCK_PORT override the ports. State lives in .wrangler/state (delete it to reset).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"
PORT="${PORT:-8787}"
MOCK_PORT="${MOCK_PORT:-8788}"

"$SCRIPTS_DIR/setup.sh"
"$SCRIPTS_DIR/build.sh"

step "d1: applying migrations/ to the local database"
out="$(CI=true wrangler d1 migrations apply DB --local 2>&1)" || { printf '%s\n' "$out" >&2; die "applying D1 migrations failed"; }

MOCK_PID=""
cleanup() { [[ -n "$MOCK_PID" ]] && kill "$MOCK_PID" 2>/dev/null || true; }
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

URL="http://127.0.0.1:$PORT"
cat <<EOT

  Demo page:  $URL/

  Try it from another terminal (in $ROOT):

    T=\$(node scripts/mint-token.mjs m1 "read write cancel")
    npx wrangler d1 execute DB --local --command "INSERT INTO messages (id, chat_id, role) VALUES ('m1','c1','assistant')"
    curl -X POST -H "authorization: Bearer \$T" $URL/streams/m1/open

    # a third terminal: watch the stream (T=... as above)
    curl -N "$URL/streams/m1/events?token=\$T"

    curl -X POST -H "authorization: Bearer \$T" --data-binary 'Hello 👋' $URL/streams/m1/append
    curl -X POST -H "authorization: Bearer \$T" $URL/streams/m1/close
    curl -H "authorization: Bearer \$T" $URL/streams/m1/text

  (a stream id is used once: for another run insert a new row, e.g. m2, and mint a token for it)

EOT

step "wrangler dev on $URL (Ctrl-C to stop)"
wrangler dev --ip 127.0.0.1 --port "$PORT"
