"""Running `python -m maxkernel.cli` in a child process with a clean environment (shared by the CLI tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The suite's own switches pass through: its private cache, and estimates off (they are tested on their own).
_KEEP = ("MAXKERNEL_CACHE_DIR", "MAXKERNEL_ESTIMATE")

_CREDENTIALS = ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT",
                "GOOGLE_APPLICATION_CREDENTIALS")


def agent_env(data_dir: Path) -> dict:
    """A child environment with no model credentials, private data and a one-iteration budget."""
    env = {k: v for k, v in os.environ.items()
           if k not in _CREDENTIALS and (not k.startswith("MAXKERNEL_") or k in _KEEP)}
    env.update(JAX_PLATFORMS="cpu", MAXKERNEL_DATA_DIR=str(data_dir), MAXKERNEL_MAX_ITERATIONS="1")
    return env


def mk(*args, env, cwd, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "maxkernel.cli", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)


def in_process(argv, data, tmp_path, monkeypatch, capsys):
    """`maxkernel ...` in this process (usage errors start nothing heavy) with the child environment's settings:
    no credentials, a private data folder, cwd in tmp_path so no developer .env is read."""
    from maxkernel.cli import main
    from maxkernel.settings import get_settings

    env = agent_env(data)
    for key in list(os.environ):
        if key not in env:
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    get_settings.cache_clear()
    try:
        code = main(argv)
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    out, err = capsys.readouterr()
    return code, out, err
