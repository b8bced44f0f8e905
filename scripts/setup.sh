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

# 5. Node.js >= MIN_NODE_VERSION (wrangler's requirement). A machine whose Node is older gets
#    NODE_VERSION from the npm registry, installed with the machine's own npm: the platform
#    binary package (bin/node and include/node) that the `node` package's install script would
#    fetch with a nested npm, installed directly. lib.sh puts its bin directory first on the PATH.
command -v npm >/dev/null 2>&1 || die "npm not found: install Node.js and npm (Debian: apt-get install nodejs npm)"
if [[ -x "$NODE_TOOLS_DIR/dist/bin/node" && "$("$NODE_TOOLS_DIR/dist/bin/node" --version 2>/dev/null)" == "v$NODE_VERSION" ]]; then
  step "node v$NODE_VERSION (npm registry, in ${NODE_TOOLS_DIR#"$ROOT"/})"
elif [[ ! -e "$NODE_TOOLS_DIR" ]] && command -v node >/dev/null 2>&1 && node_at_least node "$MIN_NODE_VERSION"; then
  step "node $(node --version) ok (>= $MIN_NODE_VERSION)"
else
  case "$(uname -m)" in
    x86_64) NODE_ARCH=x64 ;;
    aarch64 | arm64) NODE_ARCH=arm64 ;;
    *) die "no Node.js >= $MIN_NODE_VERSION here, and no npm registry build of it for $(uname -m): install one" ;;
  esac
  NODE_PACKAGE="node-$(uname -s | tr '[:upper:]' '[:lower:]')-$NODE_ARCH"
  step "node: $(node --version 2>/dev/null || echo none) is older than $MIN_NODE_VERSION; npm install $NODE_PACKAGE@$NODE_VERSION into ${NODE_TOOLS_DIR#"$ROOT"/} (~50 MB, once)"
  rm -rf "$NODE_TOOLS_DIR"
  mkdir -p "$NODE_TOOLS_DIR"
  # Its own prefix with an empty package.json: npm would otherwise climb to the project's.
  printf '{ "private": true, "description": "Node.js for rindle-streams (scripts/setup.sh)" }\n' >"$NODE_TOOLS_DIR/package.json"
  npm install --prefix "$NODE_TOOLS_DIR" --no-save --no-package-lock --no-audit --no-fund --loglevel=error \
    "$NODE_PACKAGE@$NODE_VERSION"
  ln -sfn "node_modules/$NODE_PACKAGE" "$NODE_TOOLS_DIR/dist"
  hash -r
  [[ "$("$NODE_TOOLS_DIR/dist/bin/node" --version)" == "v$NODE_VERSION" ]] || die "node from $NODE_PACKAGE@$NODE_VERSION does not run"
  [[ "$(command -v node)" == "$NODE_TOOLS_DIR/dist/bin/node" ]] || die "PATH: $(command -v node) comes before $NODE_TOOLS_DIR/dist/bin"
  use_tools_node_headers
  step "node v$NODE_VERSION installed"
fi

# 6. npm packages (wrangler, esbuild, test libraries), exactly as locked.
# A symlinked node_modules is an install shared with other checkouts (git worktrees): never
# `npm ci` over it (that empties it for everyone while it reinstalls, and a worktree's fresh
# package-lock.json mtime would trigger it on every run); install in the checkout it points to.
if [[ -L node_modules ]]; then
  [[ -f node_modules/.package-lock.json ]] || die "node_modules -> $(readlink node_modules) holds no install: run npm ci there"
  step "npm packages: shared install at $(readlink node_modules) (not reinstalled from here)"
elif [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json \
      || package.json -nt node_modules/.package-lock.json ]]; then
  step "npm ci (node_modules missing or older than package-lock.json; seconds)"
  npm ci --no-audit --no-fund --loglevel=error
  touch node_modules/.package-lock.json
else
  step "npm packages up to date"
fi

# 7. Local secrets for `wrangler dev`: the example's settings with a random STREAM_JWT_SECRET.
#    The example's own secret is public, and refused outside the dev build: with it, a plain
#    `npx wrangler dev` of the production build answered every request 500 misconfigured.
if [[ -f .dev.vars ]]; then
  step ".dev.vars present"
else
  step "creating .dev.vars from .dev.vars.example, with a random STREAM_JWT_SECRET"
  secret="$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
  sed "s/^STREAM_JWT_SECRET=.*/STREAM_JWT_SECRET=$secret/" .dev.vars.example > .dev.vars
  chmod 600 .dev.vars
fi
