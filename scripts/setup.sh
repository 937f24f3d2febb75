#!/usr/bin/env bash
# One-time set-up on a fresh machine: bubblewrap for the sandbox (where apt exists), then the package with its
# development extras (jax, libtpu for deviceless TPU compiles, google-adk, pytest). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v bwrap >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "setup: installing bubblewrap (the candidate sandbox)" >&2
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "setup: bubblewrap not found and cannot be installed here; kernels will run in the degraded sandbox" >&2
  fi
fi
# Debian's Chromium drives the `adk web` end-to-end test (headless, over the DevTools protocol).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "setup: installing chromium (for the adk web test)" >&2
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null \
    || echo "setup: chromium could not be installed; the adk web test will be skipped" >&2
fi
python3 -m pip install -q --disable-pip-version-check -e ".[dev]"
