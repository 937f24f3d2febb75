"""`adk eval` and AgentEvaluator run the shipped smoke eval set offline: replay model, real tools, real harness."""

import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
from _extras import need_module

from maxkernel.evals.evalsets import smoke_config_path, smoke_eval_set_path
from maxkernel.settings import get_settings

# The suite's own switches pass through: its private cache, and estimates off (they are tested on their own).
_KEEP = ("MAXKERNEL_CACHE_DIR", "MAXKERNEL_ESTIMATE")

ROOT = Path(__file__).resolve().parents[2]
AUTO = ROOT / "maxkernel" / "apps" / "auto"
_CREDENTIALS = ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT",
                "GOOGLE_APPLICATION_CREDENTIALS")

pytestmark = [pytest.mark.slow, pytest.mark.integration]


@pytest.fixture(autouse=True, scope="module")
def _eval_extras():
    for module in ("rouge_score", "pandas", "tabulate"):  # what google-adk[eval] adds that `adk eval` imports
        need_module(module, extra="eval")


def offline_env(data_dir: Path) -> dict:
    """No model credentials, no MAXKERNEL_* from the developer, the replay model and a one-iteration budget."""
    env = {k: v for k, v in os.environ.items()
           if k not in _CREDENTIALS and (not k.startswith("MAXKERNEL_") or k in _KEEP)}
    env.update(JAX_PLATFORMS="cpu", MAXKERNEL_MODEL="replay", MAXKERNEL_DATA_DIR=str(data_dir),
               MAXKERNEL_MAX_ITERATIONS="1")
    return env


# Two cases, judged at once in adk eval's threads: about two minutes alone, several times that beside CI's
# other workers; the subprocess's own limit is the real one.
@pytest.mark.timeout(960)
def test_adk_eval_cli_passes_the_smoke_set_offline(tmp_path):
    # adk eval keeps its results in <agent folder>/.adk/eval_history: it runs a copy of the app's folder, so
    # they land under tmp_path and not in the package.
    agent = tmp_path / "agents" / "auto"
    shutil.copytree(AUTO, agent, ignore=shutil.ignore_patterns("__pycache__", ".adk"))
    # cwd is a scratch folder so no developer .env can supply credentials or settings.
    r = subprocess.run([sys.executable, "-m", "google.adk.cli", "eval", str(agent), str(smoke_eval_set_path()),
                        "--config_file_path", str(smoke_config_path()), "--print_detailed_results"],
                       capture_output=True, text=True, env=offline_env(tmp_path / "data"), cwd=tmp_path, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "jaxbench_smoke:\n  Tests passed: 2\n  Tests failed: 0" in r.stdout, out[-4000:]
    # The agent's kernels were written where the settings said, and the metrics judged them.
    assert len(list((tmp_path / "data" / "workspaces").glob("*/best_kernel.py"))) == 2
    assert [p.name.endswith(".evalset_result.json") for p in (agent / ".adk" / "eval_history").iterdir()] == [True]


async def test_agent_evaluator_runs_an_eval_set_from_pytest(tmp_path, monkeypatch):
    """The pytest entry point on a one-case set built by the same code as the shipped one (the two-case smoke
    set already runs through `adk eval` above; running it twice would only double the time)."""
    import shutil

    from google.adk.evaluation.agent_evaluator import AgentEvaluator

    from maxkernel.evals.evalsets import build_eval_set, write_eval_set

    one = write_eval_set(build_eval_set(["12p_RMSNorm"], size="smoke", eval_set_id="jaxbench_one"),
                         tmp_path / "one" / "jaxbench_one.evalset.json")
    shutil.copy(smoke_config_path(), one.with_name("test_config.json"))  # AgentEvaluator reads it from beside the set

    for key in [k for k in os.environ if k.startswith("MAXKERNEL_") and k not in _KEEP] + list(_CREDENTIALS):
        monkeypatch.delenv(key, raising=False)
    for key, value in offline_env(tmp_path / "data").items():
        if key.startswith("MAXKERNEL_"):
            monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    try:
        from maxkernel.agents import build_app

        app = build_app("auto")
        # AgentEvaluator wants a module whose `agent` has `root_agent` (the CLI also takes `app`); the agents
        # package exports only `app`, so hand it one that has both.
        shim = types.ModuleType("maxkernel_eval_auto")
        shim.agent = types.SimpleNamespace(app=app, root_agent=app.root_agent)
        monkeypatch.setitem(sys.modules, "maxkernel_eval_auto", shim)
        # Raises AssertionError naming the metric when any case fails; the config beside the set is used.
        await AgentEvaluator.evaluate("maxkernel_eval_auto", str(one), num_runs=1, print_detailed_results=False)
        assert len(list((tmp_path / "data" / "workspaces").glob("*/best_kernel.py"))) == 1
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
