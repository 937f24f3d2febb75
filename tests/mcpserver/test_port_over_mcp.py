"""Porting's check served to any coding agent: check_port (the porter's own tool) given the original and its
specs as arguments proves a port in the sandbox; the original must sit inside the workspace root."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from google.adk.artifacts import InMemoryArtifactService

from _extras import need_module
from maxkernel.mcpserver.tools import ToolHost

pytestmark = [pytest.mark.slow, pytest.mark.integration]

HERE = Path(__file__).resolve()
SOFTMAX = HERE.parents[1] / "port" / "sources" / "triton_softmax.py"
PORT = HERE.parents[2] / "maxkernel" / "agents" / "replay" / "kernels" / "port_triton_softmax_v1.py"


def test_check_port_with_the_original_as_arguments(tmp_path):
    need_module("torch", extra="port")
    root = tmp_path / "root"
    root.mkdir()
    shutil.copy(SOFTMAX, root / "softmax.py")
    shutil.copy(PORT, root / "jax_port.py")
    (root / "wrong.py").write_text("import jax.numpy as jnp\n\n\ndef softmax(x):\n    return jnp.exp(x) / x.shape[-1]\n")
    (tmp_path / "outside.py").write_text(SOFTMAX.read_text())
    host = ToolHost(root, artifacts=InMemoryArtifactService())
    spec = {"source": "softmax.py", "args": ["f32[R=64,C=128]"]}
    ok = asyncio.run(host.call("check_port", spec))
    assert ok["equivalent"] is True and len(ok["seeds"]) == 3, ok.get("summary")
    bad = asyncio.run(host.call("check_port", {**spec, "path": "wrong.py"}))
    assert bad["equivalent"] is False and bad["mismatch"]["worst_index"], bad.get("summary")
    outside = asyncio.run(host.call("check_port", {**spec, "source": "../outside.py"}))
    assert outside["status"] == "error" and "leaves the workspace" in outside["message"]
    none = asyncio.run(host.call("check_port", {}))
    assert none["status"] == "error" and "give source and args" in none["hint"]
