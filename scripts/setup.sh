#!/usr/bin/env bash
# One-time set-up on a fresh machine: bubblewrap for the sandbox (where apt exists), then the package with its
# development extras (jax, libtpu for deviceless TPU compiles, google-adk, pytest). Safe to run again. One line per
# step on stderr, and one per package pip fetches, so a long install shows what it is doing.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
say() { echo "setup: $*" >&2; }
if command -v bwrap >/dev/null 2>&1; then
  say "[1/3] bubblewrap (the candidate sandbox): already installed"
elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  say "[1/3] bubblewrap (the candidate sandbox): installing with apt-get"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
else
  say "[1/3] bubblewrap not found and cannot be installed here; kernels will run in the degraded sandbox"
fi
# Debian's Chromium drives the `adk web` end-to-end test (headless, over the DevTools protocol).
if command -v chromium >/dev/null 2>&1; then
  say "[2/3] chromium (for the adk web test): already installed"
elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  say "[2/3] chromium (for the adk web test): installing with apt-get"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
    || say "chromium could not be installed; the adk web test will be skipped"
else
  say "[2/3] chromium not found and cannot be installed here; the adk web test will be skipped"
fi
say "[3/3] maxkernel with its dev extras (jax, libtpu, google-adk, pytest, ...): pip install -e '.[dev]'" \
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
say "done in $((SECONDS - started)) s ($fetched packages fetched; the rest were already installed)"
