"""The README's main command works for a user whose virtual environment lives under /tmp (the sandbox mounts a
fresh /tmp, so the interpreter's folders must be bound on their own)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def test_demo_runs_from_a_venv_under_tmp(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python3"
    (venv / "bin" / "maxkernel").write_text(f"#!{python}\nimport sys\nfrom maxkernel.cli import main\nsys.exit(main())\n")
    (venv / "bin" / "maxkernel").chmod(0o755)
    probe = subprocess.run([str(python), "-c", "import sys, maxkernel; print(sys.prefix)"], capture_output=True,
                           text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert probe.stdout.strip() == str(venv), probe.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAXKERNEL_", "GOOGLE_", "GEMINI_"))}
    env.update(PATH=f"{venv / 'bin'}:{env['PATH']}", PYTHONPATH=str(ROOT), MAXKERNEL_DATA_DIR=str(tmp_path / "data"),
               MAXKERNEL_CACHE_DIR=str(tmp_path / "cache"), MAXKERNEL_MAX_ITERATIONS="1", JAX_PLATFORMS="cpu")
    r = subprocess.run([str(ROOT / "scripts" / "demo.sh"), "--out", str(tmp_path / "out")], capture_output=True,
                       text=True, timeout=600, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("CORRECT"), r.stdout + r.stderr[-2000:]
    assert (tmp_path / "out" / "kernel.py").is_file()
