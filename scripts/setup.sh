#!/usr/bin/env bash
# Installs everything the build, the dev server and the tests need. Idempotent; a re-run
# that finds everything in place takes a second or two. See docs/TOOLCHAIN.md for why.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$ROOT"

# 1. Rust target (RUSTUP_AUTO_INSTALL may be off, so nothing is added implicitly).
if rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  step "rust: wasm32-unknown-unknown target present"
else
  step "rust: adding wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi

# 2. wasm-bindgen CLI, exactly the version of the wasm-bindgen crate (worker-build would
#    otherwise download it from GitHub).
WB_VERSION="$(wasm_bindgen_version)"
if [[ "$(wasm-bindgen --version 2>/dev/null || true)" == "wasm-bindgen $WB_VERSION" ]]; then
  step "wasm-bindgen-cli $WB_VERSION present"
else
  step "wasm-bindgen-cli: cargo install --locked wasm-bindgen-cli@$WB_VERSION (a few minutes, once)"
  cargo install --locked --force wasm-bindgen-cli --version "$WB_VERSION"
fi

# 3. worker-build.
if [[ "$(worker-build --version 2>/dev/null || true)" == "$WORKER_BUILD_VERSION" ]]; then
  step "worker-build $WORKER_BUILD_VERSION present"
else
  step "worker-build: cargo install --locked worker-build@$WORKER_BUILD_VERSION (a few minutes, once)"
  cargo install --locked --force worker-build --version "$WORKER_BUILD_VERSION"
fi

# 4. Debian packages the tests need, installed when missing and running as root (else a
#    warning: scripts/test.sh then fails at its gate for them).
#    apt_package PACKAGE WHY COMMAND...: PACKAGE is present when every COMMAND is found.
apt_package() {
  local package="$1" why="$2"
  shift 2
  local cmd missing=0
  for cmd in "$@"; do command -v "$cmd" >/dev/null 2>&1 || missing=1; done
  if [[ "$missing" -eq 0 ]]; then
    step "apt: $package present"
  elif [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    step "apt: installing $package ($why)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" >/dev/null
  else
    warn "$package missing and not root, so not installing: sudo apt-get install -y $package"
    warn "  (scripts/test.sh fails without it: $why)"
  fi
}
# Chromium, for browser tests (playwright-core drives /usr/bin/chromium; npm's own browser
# download cannot work here). Not binaryen: Debian's wasm-opt 108 is too old for wasm-bindgen
# 0.2.129 output; npm binaryen@132 (package.json) is used instead.
apt_package chromium "the browser tests, which never skip" chromium
# PostgreSQL's server, for the Postgres backend's tests (scripts/pg.sh runs a throwaway cluster
# of the project's own). Debian keeps initdb off the PATH, so presence is pg_bindir's. Debian's
# package would create and start a system cluster ("main") at install: a createcluster.d file
# turns that off first, so nothing runs as a service.
if PG_BIN="$(pg_bindir)"; then
  step "postgres: server binaries in $PG_BIN"
elif [[ "$(id -u)" -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
  step "apt: installing postgresql (the Postgres backend's tests; no system cluster is created)"
  mkdir -p /etc/postgresql-common/createcluster.d
  printf '# scripts/setup.sh (rindle-streams): its tests run their own cluster (scripts/pg.sh)\ncreate_main_cluster = false\n' \
    >/etc/postgresql-common/createcluster.d/rindle-no-main-cluster.conf
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  PG_BIN="$(pg_bindir)" || die "postgresql installed, but no initdb/pg_ctl found under /usr/lib/postgresql"
  step "postgres: server binaries in $PG_BIN"
else
  warn "postgresql missing and not root, so not installing: sudo apt-get install -y postgresql"
  warn "  (scripts/test.sh fails without it: the Postgres backend's tests never skip there)"
fi

# 5. Node.js.
command -v node >/dev/null 2>&1 || die "node not found: install Node.js >= $MIN_NODE_MAJOR (Debian: apt-get install nodejs npm)"
NODE_MAJOR="$(node -p 'process.versions.node.split(".")[0]')"
(( NODE_MAJOR >= MIN_NODE_MAJOR )) || die "Node.js $(node --version) is too old: need >= $MIN_NODE_MAJOR"
step "node $(node --version) ok (>= $MIN_NODE_MAJOR)"

# 6. npm packages (wrangler, esbuild, test libraries), exactly as locked.
# A symlinked node_modules is an install shared with other checkouts (git worktrees): never
# `npm ci` over it (that empties it for everyone while it reinstalls, and a worktree's fresh
# package-lock.json mtime would trigger it on every run); install in the checkout it points to.
if [[ -L node_modules ]]; then
  [[ -f node_modules/.package-lock.json ]] || die "node_modules -> $(readlink node_modules) holds no install: run npm ci there"
  step "npm packages: shared install at $(readlink node_modules) (not reinstalled from here)"
elif [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json \
      || package.json -nt node_modules/.package-lock.json ]]; then
  step "npm ci (node_modules missing or older than package-lock.json; ~1 min, compiles better-sqlite3)"
  npm ci --no-audit --no-fund --loglevel=error
  touch node_modules/.package-lock.json
else
  step "npm packages up to date"
fi

# 7. Local secrets for `wrangler dev`.
if [[ -f .dev.vars ]]; then
  step ".dev.vars present"
else
  step "creating .dev.vars from .dev.vars.example"
  cp .dev.vars.example .dev.vars
fi
