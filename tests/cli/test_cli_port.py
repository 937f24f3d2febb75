"""`maxkernel port` as a user runs it: with the replay model a held-in source becomes a JAX reference the harness
proves equivalent and a task folder the harness judges; a wrong --jax port exits 1 with where it differs; bad input
and a missing torch are one-line usage errors (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _extras import need_module
from maxkernel.cli import main

SOURCES = Path(__file__).parents[1] / "port" / "sources"
KERNELS = Path(__file__).parents[2] / "maxkernel" / "agents" / "replay" / "kernels"

HELD_IN = {
    "rmsnorm_module": ["--arg", "bf16[T=4096,H=2048]", "--init", "dim=H"],
    "swiglu_mlp": ["--arg", "bf16[T=2048,D=1024]", "--dim", "F=2816", "--init", "dim=D", "--init", "hidden=F"],
    "triton_softmax": ["--arg", "f32[R=8192,C=2048]"],
    "fused_attention": ["--arg", "bf16[B=1,H=8,S=2048,D=128]"] * 3 + ["--static", "causal=True"],
}


COPY_KERNEL = """
import jax
from jax.experimental import pallas as pl


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def workload(x, *rest):
    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
"""


def _run(tmp_path: Path, *args, timeout=900):
    env = dict(os.environ, JAX_PLATFORMS="cpu", MAXKERNEL_DATA_DIR=str(tmp_path / "data"), MAXKERNEL_MAX_ITERATIONS="1")
    return subprocess.run([sys.executable, "-m", "maxkernel.cli", "port", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path, env=env)


@pytest.mark.unit
def test_without_torch_it_says_how_to_install_and_exits_2(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)  # what an environment without the [port] extra sees
    code = main(["port", "--from", str(SOURCES / "rmsnorm_module.py"), "--arg", "bf16[64,128]"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "pip install 'maxkernel[port]'" in err[0] and err[0].startswith("maxkernel: error:")


@pytest.mark.unit
@pytest.mark.parametrize("args, words", [
    (["--from", "missing.py", "--arg", "f32[8]"], "no Python file"),
    (["--from", "SRC:attention", "--arg", "bf16[1,2,64,x]"], "dim x is never given a size"),
    (["--from", "SRC:attention", "--arg", "f32[8]", "--jax", "nofile.py:attention"], "no file nofile.py"),
    (["--from", "SRC:attention", "--arg", "f32[8]", "--optimize"], "--optimize needs --out"),
])
def test_bad_input_is_one_line_and_exit_2(args, words, capsys):
    need_module("torch", extra="port")
    args = [a.replace("SRC", str(SOURCES / "fused_attention.py")) for a in args]
    code = main(["port", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and words in err[-1], err


# One source through the whole command: the Triton one (its interpreter runs the original). The rmsnorm module's
# two porter rounds and its task's verdicts are tests/test_porting.py's (with --optimize); every source's
# equivalence is tests/port/test_check.py's, and benchmarks/port_held_in.py runs this command on all four.
@pytest.mark.slow
@pytest.mark.integration
def test_replay_port_of_a_held_in_source_is_proven_and_becomes_a_task(tmp_path):
    need_module("torch", extra="port")
    stem = "triton_softmax"
    out = tmp_path / f"port_{stem}"
    r = _run(tmp_path, "--from", str(SOURCES / f"{stem}.py"), *HELD_IN[stem], "--model", "replay", "--out", str(out),
             "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["equivalent"] and doc["agent"] and len(doc["port"]["seeds"]) == 3, doc["summary"]
    assert doc["task"]["ok"] and (out / "baseline.py").is_file() and (out / "port" / "jax_port.py").is_file()
    record = json.loads((out / "port" / "equivalence.json").read_text())
    assert record["report"]["equivalent"] and record["spec"]["name"] == doc["name"]
    # The harness loads and judges the ported task: a Pallas kernel written for it is correct (so the task's
    # reference is the operator), and one that copies its first input through is judged (incorrect, or rejected
    # for doing none of the task's FLOPs), never an error about the task.
    from maxkernel.harness.verdict.evaluate import evaluate

    good = evaluate(str(out), Path(__file__).parents[1] / "port" / "kernels" / f"{stem}_pallas.py", size="smoke",
                    estimate=False)
    assert good.status == "correct", good.reason
    copy = tmp_path / "copy.py"
    copy.write_text(COPY_KERNEL)
    v = evaluate(str(out), copy, size="smoke", estimate=False)
    assert v.status in ("incorrect", "rejected"), (v.status, v.reason)
    assert v.status == "rejected" or v.correctness.max_rel_err > v.correctness.tolerance, v.reason


@pytest.mark.slow
@pytest.mark.integration
def test_a_checked_port_that_is_wrong_exits_1_with_the_location(tmp_path):
    need_module("torch", extra="port")
    r = _run(tmp_path, "--from", str(SOURCES / "rmsnorm_module.py"), *HELD_IN["rmsnorm_module"], "--jax",
             f"{KERNELS / 'port_rmsnorm_module_v1.py'}:rmsnorm", "--seeds", "2", "--out", str(tmp_path / "t"), "--json")
    assert r.returncode == 1, r.stderr[-2000:]
    doc = json.loads(r.stdout)
    assert not doc["equivalent"] and doc["task"] is None and not (tmp_path / "t").exists()
    assert doc["port"]["mismatch"]["worst_index"] and doc["port"]["mismatch"]["seed"] in doc["port"]["seeds"]


@pytest.mark.unit
def test_force_over_a_folder_that_is_not_a_task_is_refused_before_any_work(tmp_path, capsys):
    need_module("torch", extra="port")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    code = main(["port", "--from", str(SOURCES / "fused_attention.py"), "--arg", "f32[8]", "--out",
                 str(tmp_path / "notes"), "--force"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "not a task folder" in err[-1] and "describing" not in "\n".join(err)
    assert (tmp_path / "notes" / "keep.txt").read_text() == "mine"


@pytest.mark.slow
@pytest.mark.integration
def test_backward_through_the_cli(tmp_path):
    """`port --backward`: an autograd.Function whose own backward is wrong exits 1 naming the input whose gradient
    differs; the right one exits 0 with the gradients checked (the forward alone passes both)."""
    need_module("torch", extra="port")
    port = tmp_path / "port.py"
    port.write_text("def square(x):\n    return x * x\n")
    for factor, code in (("2", 0), ("3", 1)):
        src = tmp_path / f"sq{factor}.py"
        src.write_text("import torch\n\n\nclass Square(torch.autograd.Function):\n    @staticmethod\n"
                       "    def forward(ctx, x):\n        ctx.save_for_backward(x)\n        return x * x\n\n"
                       "    @staticmethod\n    def backward(ctx, g):\n        (x,) = ctx.saved_tensors\n"
                       f"        return {factor} * x * g\n")
        r = _run(tmp_path, "--from", f"{src}:Square", "--arg", "f32[8,128]", "--jax", f"{port}:square", "--seeds", "1",
                 "--backward", "--json")
        assert r.returncode == code, r.stderr[-2000:]
        doc = json.loads(r.stdout)
        assert doc["port"]["backward"] is True and doc["equivalent"] is (code == 0)
        if code:
            assert doc["port"]["mismatch"]["gradient_of_input"] == 0 and "gradient of input 0" in doc["summary"]
