#!/usr/bin/env bash
# The README's main command: the autonomous agent optimises 12p_RMSNorm at CPU size. It uses Gemini when
# credentials are configured (GOOGLE_API_KEY, or Vertex AI), otherwise the offline replay model, and says which.
# Extra arguments go to `maxkernel optimize` (e.g. --out DIR, --json).
set -euo pipefail
cd "$(dirname "$0")/.."
# MAXKERNEL_MODEL wins; otherwise the configured model if its credentials are there (settings also read .env).
model="${MAXKERNEL_MODEL:-$(python3 -c '
from maxkernel.agents.models import ModelConfigError, check_credentials
from maxkernel.settings import get_settings
name = get_settings().model
try:
    check_credentials(name)
    print(name)
except ModelConfigError:
    print("replay")
' 2>/dev/null)}"
if [ "$model" = replay ]; then
  # The recordings cover two iterations; more would replay the second one again.
  export MAXKERNEL_MAX_ITERATIONS="${MAXKERNEL_MAX_ITERATIONS:-2}"
  echo "demo: model replay - the offline replay model (recorded model turns; the tools, sandbox and verdicts are real)." >&2
  echo "demo: set GOOGLE_API_KEY (or GOOGLE_GENAI_USE_VERTEXAI=TRUE with GOOGLE_CLOUD_PROJECT/LOCATION) to use Gemini." >&2
else
  echo "demo: model $model" >&2
fi
exec maxkernel optimize --task 12p_RMSNorm --model "$model" "$@"
