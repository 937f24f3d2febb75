"""Bring your own workload: a function outside the repo becomes a validated task folder in one command; the
verdict holds on it (a Pallas kernel built from the reference is correct, a wrong one incorrect); degenerate
functions are refused with the reason and nothing is written."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import pytest

from maxkernel.tasknew import SpecError, build_task
from maxkernel.tasks import load_task

USER_OPS = '''
import jax
import jax.numpy as jnp


def gated_rms(x, gate, w, eps=1e-6):
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, -1, keepdims=True) + eps) * w.astype(jnp.float32)
    return (y * jax.nn.silu(gate.astype(jnp.float32))).astype(x.dtype)


def constant(x):
    return jnp.zeros_like(x) + 1.0


def ignores_inputs(x):
    return jnp.arange(x.size, dtype=jnp.float32).reshape(x.shape) / x.size


def gather_rows(table, idx):
    return jnp.take(table, idx, axis=0) * 2


def bf16_only(x):
    assert x.dtype == jnp.bfloat16, "bf16 inputs only"
    return x * 2


def scale_only_first(x, y):
    return x * 2, jnp.zeros_like(y)
'''

# The task's own reference (the user's source, pasted in) run inside a Pallas kernel body, block by block.
KERNEL = USER_OPS + '''
from jax.experimental import pallas as pl


def _body(x_ref, g_ref, w_ref, o_ref):
    o_ref[...] = {call}


@jax.jit
def workload(x, gate, w):
    t, h = x.shape
    rows = 64
    return pl.pallas_call(
        _body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(t // rows,),
        in_specs=[pl.BlockSpec((rows, h), lambda i: (i, 0)), pl.BlockSpec((rows, h), lambda i: (i, 0)),
                  pl.BlockSpec((1, h), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((rows, h), lambda i: (i, 0)),
    )(x, gate, w.reshape(1, h))
'''


@pytest.fixture(scope="module")
def ops(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("user") / "my_ops.py"
    path.write_text(USER_OPS)
    return path


@pytest.fixture(scope="module")
def gated(ops, tmp_path_factory):
    out = tmp_path_factory.mktemp("tasks") / "gated_rms"
    report = build_task(f"{ops}:gated_rms", ["bf16[T=8192,H=4096]", "bf16[8192,4096]", "f32[4096]"], out,
                        static=["eps=1e-5"])
    assert report.ok, report.reason
    return out, report


def test_a_function_outside_the_repo_becomes_a_task_folder(gated):
    out, report = gated
    assert sorted(p.name for p in out.iterdir()) == ["baseline.py", "function.py", "validation.json"]
    task = load_task(out)
    assert task.source == "folder" and task.config == {"T": 8192, "H": 4096}
    # derived as 512 x 512; a busy CPU may have halved it further, keeping the 128 alignment
    assert report.smoke["T"] in (512, 256, 128) and report.smoke["H"] in (512, 256, 128)
    assert task.sizes == ["full", "smoke"] and task.configs == []
    x, gate, w = task.create_inputs(size="smoke", seed=3)
    assert (x.shape, str(x.dtype), w.shape, str(w.dtype)) == (
        (report.smoke["T"], report.smoke["H"]), "bfloat16", (report.smoke["H"],), "float32")
    assert report.flops["full"] and report.flops["full"] > 8192 * 4096  # XLA's count, per element several FLOPs
    assert task.flops("full") == report.flops["full"] and report.bytes_accessed["full"] >= 2 * 2 * 8192 * 4096
    assert task.tolerance("bfloat16") == report.tolerance["bfloat16"] >= 0.02
    assert [c["name"] for c in report.checks] == ["traces at full size", "smoke size runs in seconds",
                                                  "FLOPs and bytes", "tolerance calibrated", "output non-degenerate"]
    assert json.loads((out / "validation.json").read_text())["ok"] is True
    # different seeds give different inputs; the static argument is bound
    assert not (task.create_inputs(size="smoke", seed=1)[0] == x).all()
    assert task.module.STATIC == {"eps": 1e-5}


@pytest.mark.parametrize("fn,says", [("constant", "a constant"), ("ignores_inputs", "another seed's output"),
                                     ("scale_only_first", "output 1")])
def test_a_degenerate_function_is_refused_with_the_reason_and_nothing_written(ops, tmp_path, fn, says):
    args = ["f32[1024,1024]"] if fn != "scale_only_first" else ["f32[1024,1024]", "f32[256,1024]"]
    report = build_task(f"{ops}:{fn}", args, tmp_path / "t")
    assert not report.ok and "degenerate" in report.reason and says in report.reason, report.reason
    assert not (tmp_path / "t").exists() and [p.name for p in tmp_path.iterdir()] == []


def test_named_configs_are_written_sized_and_checked_each(ops, tmp_path):
    report = build_task(f"{ops}:gated_rms", ["bf16[T=4096,H=1024]", "bf16[4096,1024]", "f32[1024]"], tmp_path / "c",
                        configs=["prefill", "decode:T=8", "long:T=32768"])
    assert report.ok, report.reason
    task = load_task(tmp_path / "c")
    assert task.configs == ["prefill", "decode", "long"] and report.configs["decode"] == {"T": 8}
    assert task.create_inputs(size="smoke@decode", seed=0)[0].shape[0] == 8  # decode's one step stays small
    assert task.create_inputs(size="smoke@long", seed=0)[0].shape[0] == 512  # long shrinks like the default
    assert jax.eval_shape(lambda: task.create_inputs(size="full@long", seed=0))[0].shape == (32768, 1024)
    assert task.flops("full@decode") < task.flops("full") < task.flops("full@long")
    names = [c["name"] for c in report.checks]
    assert "smoke size runs in seconds [decode]" in names and "traces at full size [long]" in names
    with pytest.raises(SpecError, match="name it alone"):
        build_task(f"{ops}:gated_rms", ["f32[T=8]"] * 3, tmp_path / "d", configs=["prefill:T=1"])
    with pytest.raises(SpecError, match="not a dim"):
        build_task(f"{ops}:gated_rms", ["f32[8]"] * 3, tmp_path / "d", configs=["a", "b:Q=1"])


def test_a_function_that_fails_on_the_f32_reference_inputs_is_refused_not_a_crash(ops, tmp_path):
    report = build_task(f"{ops}:bf16_only", ["bf16[1024,1024]"], tmp_path / "b")
    assert not report.ok and "failed while being validated: AssertionError: bf16 inputs only" in report.reason
    assert not (tmp_path / "b").exists()


def test_index_inputs_take_their_range_from_a_dim(ops, tmp_path):
    report = build_task(f"{ops}:gather_rows", ["bf16[V=32000,D=1024]", "i32[N=4096]"], tmp_path / "g",
                        gens=["normal", "int:0:V"])
    assert report.ok, report.reason
    task = load_task(tmp_path / "g")
    table, idx = task.create_inputs(size="smoke", seed=0)
    assert str(idx.dtype) == "int32" and int(idx.min()) >= 0 and int(idx.max()) < table.shape[0] == report.smoke["V"]
    _, idx_full = task.create_inputs(size="smoke", seed=1)
    assert not (idx_full == idx).all()


@pytest.mark.parametrize("args,kw,says", [
    (["f32[8]"], {"static": ["eps=1"]}, "takes 3 array arguments .* but 1 --arg was given"),
    (["f32[8]"] * 5, {}, "5 --arg were given"),
    (["f32[8]"] * 3, {"gens": ["int:0:4"]}, "does not fit float32"),
])
def test_bad_specs_are_usage_errors(ops, tmp_path, args, kw, says):
    with pytest.raises(SpecError, match=says):
        build_task(f"{ops}:gated_rms", args, tmp_path / "t", **kw)


def test_an_existing_folder_is_kept_unless_forced(ops, tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "mine.txt").write_text("keep")
    with pytest.raises(SpecError, match="--force"):
        build_task(f"{ops}:gather_rows", ["bf16[1024,256]", "i32[128]"], tmp_path / "t", gens=["normal", "int:0:1024"])
    assert (tmp_path / "t" / "mine.txt").read_text() == "keep"
    with pytest.raises(SpecError, match="not a task folder"):  # --force never deletes a folder that is not a task
        build_task(f"{ops}:gather_rows", ["bf16[1024,256]", "i32[128]"], tmp_path / "t", gens=["normal", "int:0:1024"],
                   force=True)
    assert (tmp_path / "t" / "mine.txt").read_text() == "keep"


@pytest.mark.slow
@pytest.mark.integration
def test_the_verdict_holds_on_the_new_task(gated, tmp_path, evaluator):
    out, _ = gated
    right = tmp_path / "right.py"
    right.write_text(KERNEL.replace("{call}", "gated_rms(x_ref[...], g_ref[...], w_ref[...], eps=1e-5)"))
    wrong = tmp_path / "wrong.py"  # the eps the task binds is 1e-5; 0.5 shifts every row
    wrong.write_text(KERNEL.replace("{call}", "gated_rms(x_ref[...], g_ref[...], w_ref[...], eps=0.5)"))
    good = evaluator.evaluate(str(out), right, size="smoke", estimate=False)
    assert good.status == "correct", (good.reason, good.detail)
    bad = evaluator.evaluate(str(out), wrong, size="smoke", estimate=False)
    assert bad.status == "incorrect", (bad.reason, bad.detail)


@pytest.mark.slow
@pytest.mark.integration
def test_the_cli_writes_the_task_and_refuses_with_exit_2(ops, tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "maxkernel.cli", "task", "new", *args], capture_output=True,
                              text=True, timeout=300, cwd=tmp_path)

    ok = run("--from", f"{ops}:gated_rms", "--arg", "bf16[T=2048,H=1024]", "--arg", "bf16[2048,1024]",
             "--arg", "f32[1024]", "--out", str(tmp_path / "g"), "--json")
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["ok"] and doc["path"] == str((tmp_path / "g").resolve()) and "tracing" in ok.stderr
    refused = run("--from", f"{ops}:constant", "--arg", "f32[512,512]", "--out", str(tmp_path / "c"))
    assert refused.returncode == 2 and refused.stdout.startswith("REFUSED: output 0") and not (tmp_path / "c").exists()
    usage = run("--from", f"{ops}:nope", "--arg", "f32[8]", "--out", str(tmp_path / "n"))
    assert usage.returncode == 2 and usage.stderr.strip().splitlines()[-1].startswith("maxkernel: error: --from")
