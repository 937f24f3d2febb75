#!/usr/bin/env bash
# The README's main command: the autonomous agent optimises 12p_RMSNorm at CPU size. It uses Gemini when
# credentials are configured (GOOGLE_API_KEY, or Vertex AI), otherwise the offline replay model, and says which.
# The returned kernel goes to ./maxkernel-demo/kernel.py (with verdict.json) unless --out DIR says where; the last
# line is its path, its held-out verdict and its TPU estimate against the XLA baseline. Extra arguments go to
# `maxkernel optimize` (e.g. --out DIR, --json).
set -euo pipefail
out="$PWD/maxkernel-demo"  # the caller's folder, not the repository's; a later --out in "$@" wins
cd "$(dirname "$0")/.."
probe_err="$(mktemp)"
doc="$(mktemp)"
trap 'rm -f "$probe_err" "$doc"' EXIT
# MAXKERNEL_MODEL wins; otherwise the configured model if its credentials are there (settings also read .env).
if ! probed="$(python3 -c '
from maxkernel.agents.models import ModelConfigError, check_credentials
from maxkernel.settings import get_settings
name = get_settings().model
try:
    check_credentials(name)
    print(name)
except ModelConfigError:
    print("replay")
' 2>"$probe_err")"; then
  echo "demo: cannot import maxkernel with $(command -v python3 || echo python3): $(grep -v '^ ' "$probe_err" | tail -n 1)" >&2
  echo "demo: run ./scripts/setup.sh (or python3 -m pip install -e '.[dev]') first" >&2
  exit 1
fi
model="${MAXKERNEL_MODEL:-$probed}"
if [ "$model" = replay ]; then
  # The recordings cover two iterations; more would replay the second one again.
  export MAXKERNEL_MAX_ITERATIONS="${MAXKERNEL_MAX_ITERATIONS:-2}"
  echo "demo: model replay - the offline replay model (recorded model turns; the tools, sandbox and verdicts are real)." >&2
  echo "demo: set GOOGLE_API_KEY (or GOOGLE_GENAI_USE_VERTEXAI=TRUE with GOOGLE_CLOUD_PROJECT/LOCATION) to use Gemini." >&2
else
  echo "demo: model $model" >&2
fi
as_json=0
for arg in "$@"; do [ "$arg" = --json ] && as_json=1; done
# The same interpreter as the probe; the document is read back so the text ends with the summary line.
rc=0
python3 -m maxkernel.cli optimize --task 12p_RMSNorm --model "$model" --out "$out" "$@" --json >"$doc" || rc=$?
if [ ! -s "$doc" ]; then
  exit "$rc"  # refused or failed before a result: the one-line error is on stderr
fi
if [ "$as_json" = 1 ]; then
  cat "$doc"
else
  python3 -c 'import json, sys
from maxkernel.optimize import render_text
print(render_text(json.load(open(sys.argv[1]))))' "$doc"
fi
exit "$rc"
