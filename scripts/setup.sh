#!/usr/bin/env bash
# One-time set-up on a fresh machine: bubblewrap for the sandbox (where apt exists), then the package with its
# development extras (jax, libtpu for deviceless TPU compiles, google-adk, pytest), then the coding-agent clients the
# integration tests drive (Gemini CLI, Claude Code; optional, from npm). Safe to run again. One line per step on
# stderr, and one per package pip fetches, so a long install shows what it is doing.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
say() { echo "setup: $*" >&2; }
if command -v bwrap >/dev/null 2>&1; then
  say "[1/4] bubblewrap (the candidate sandbox): already installed"
elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  say "[1/4] bubblewrap (the candidate sandbox): installing with apt-get"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
else
  say "[1/4] bubblewrap not found and cannot be installed here; kernels will run in the degraded sandbox"
fi
# Debian's Chromium drives the `adk web` end-to-end test (headless, over the DevTools protocol).
if command -v chromium >/dev/null 2>&1; then
  say "[2/4] chromium (for the adk web test): already installed"
elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  say "[2/4] chromium (for the adk web test): installing with apt-get"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
    || say "chromium could not be installed; the adk web test will be skipped"
else
  say "[2/4] chromium not found and cannot be installed here; the adk web test will be skipped"
fi
say "[3/4] maxkernel with its dev extras (jax, libtpu, google-adk, pytest, ...): pip install -e '.[dev]'" \
    "(a few minutes on a fresh machine)"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
# pip's own log is kept whole for a failure; only the packages it fetches are shown as it goes.
if ! python3 -m pip install --disable-pip-version-check --progress-bar off -e ".[dev]" 2>&1 | tee "$log" \
    | awk '/^Collecting /{print "setup:   fetching " $2; fflush()}' >&2; then
  say "pip install failed; its last lines:"
  tail -n 25 "$log" >&2
  exit 1
fi
fetched=$(grep -c '^Collecting ' "$log" || true)
# The real clients for tests/mcpserver/test_real_clients.py, pinned, in a cache folder of their own (nothing is
# installed globally). Optional: without npm, or if the install fails, setup goes on and those tests skip (and fail
# where CI is set). MAXKERNEL_SETUP_CLIENTS=0 skips this step.
npm_prefix="${MAXKERNEL_NPM_PREFIX:-$HOME/.cache/maxkernel/npm}"
clients=("@google/gemini-cli@0.61.0" "@anthropic-ai/claude-code@2.1.332")
installed_version() {
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["version"])' \
    "$npm_prefix/node_modules/$1/package.json" 2>/dev/null || true
}
if [ "${MAXKERNEL_SETUP_CLIENTS:-1}" = 0 ]; then
  say "[4/4] coding-agent clients for the integration tests: skipped (MAXKERNEL_SETUP_CLIENTS=0)"
elif ! command -v npm >/dev/null 2>&1; then
  say "[4/4] npm not found: Gemini CLI and Claude Code are not installed; their tests will be skipped (CI fails them)"
elif [ "$(installed_version @google/gemini-cli)" = 0.61.0 ] && \
     [ "$(installed_version @anthropic-ai/claude-code)" = 2.1.332 ]; then
  say "[4/4] Gemini CLI 0.61.0 and Claude Code 2.1.332 (for the integration tests): already in $npm_prefix"
else
  say "[4/4] Gemini CLI and Claude Code (for the integration tests): npm install --prefix $npm_prefix ${clients[*]}"
  if ! npm install --prefix "$npm_prefix" --no-audit --no-fund --loglevel=error "${clients[@]}" >"$log" 2>&1; then
    say "npm install failed (the clients' tests will be skipped, and fail in CI); its last lines:"
    tail -n 10 "$log" >&2
  fi
fi
say "done in $((SECONDS - started)) s ($fetched packages fetched; the rest were already installed)"
