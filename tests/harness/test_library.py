"""A candidate that calls a packaged kernel (jax's own Pallas ops) is named as such in its verdict, however it
reaches the module, and the setting that forbids library kernels rejects it before it runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from maxkernel.harness.verdict.library import library_kernels

ROOT = Path(__file__).resolve().parents[2]
MATMUL = "jax.experimental.pallas.ops.tpu.matmul.matmul"

LIBRARY_GEMM = '''import jax.numpy as jnp
from jax.experimental.pallas.ops.tpu import matmul as library


def workload(a, b):
    return library.matmul(a, b, block_shape=(128, 128), block_k=256, out_dtype=jnp.float32).astype(a.dtype)
'''


@pytest.mark.unit
@pytest.mark.parametrize("source,found", [
    ("from jax.experimental.pallas.ops.tpu import matmul as m\ny = m.matmul\n", [MATMUL]),
    ("from jax.experimental.pallas.ops.tpu.matmul import matmul\n", [MATMUL]),
    ("import jax.experimental.pallas.ops.tpu.matmul as mm\n", ["jax.experimental.pallas.ops.tpu.matmul"]),
    ("import jax\ny = jax.experimental.pallas.ops.tpu.matmul.matmul\n", [MATMUL]),  # no import line names it
    ("from jax.experimental import pallas as pl\no = pl.ops\nt = o.tpu\ny = t.matmul.matmul\n", [MATMUL]),  # aliased
    ("from jax.experimental.pallas import ops\ny = ops.tpu.flash_attention.flash_attention\n",
     ["jax.experimental.pallas.ops.tpu.flash_attention.flash_attention"]),
    ("from jax.experimental import pallas as pl\ndef k(r): r[...] = r[...] * pl.program_id(0)\n", []),
    ("def f(:\n", []),  # does not parse: the static check rejects it
])
def test_library_kernels_are_found_however_they_are_reached(source, found):
    assert library_kernels(source) == found


@pytest.mark.unit
@pytest.mark.parametrize("source", [
    "from jax.experimental import pallas as pl\ny = [pl][0].ops.tpu.matmul.matmul\n",
    "from jax.experimental import pallas as pl\ndef f():\n    return pl\ny = f().ops.tpu.matmul.matmul\n",
    "from jax.experimental import pallas as pl\no = (pl,)[0]\ny = o.ops\n",
])
def test_reaching_the_library_through_an_expression_is_still_named(source):
    (got,) = library_kernels(source)
    assert got.startswith("jax.experimental.pallas.ops (reached through an expression, line ")


@pytest.mark.unit
def test_no_shipped_kernel_is_taken_for_a_library_kernel():
    files = sorted(ROOT.glob("jaxbench/*/kernel.py")) + sorted(ROOT.glob("maxkernel/agents/replay/kernels/*.py"))
    assert len(files) > 5
    assert {f.name: library_kernels(f.read_text()) for f in files if library_kernels(f.read_text())} == {}


@pytest.mark.unit
def test_reports_say_when_a_correct_kernel_is_a_library_call():
    from maxkernel.report import _result

    assert _result({"correct": True, "uses_library_kernel": MATMUL}) == f"correct (calls library kernel {MATMUL})"
    assert _result({"correct": True, "uses_library_kernel": ""}) == "correct"


@pytest.mark.slow
def test_the_verdict_names_the_library_kernel_and_the_setting_forbids_it(evaluator, tmp_path, monkeypatch):
    kernel = tmp_path / "kernel.py"
    kernel.write_text(LIBRARY_GEMM)
    v = evaluator.evaluate("8p_GEMM", kernel, size="smoke")
    assert v.status == "correct", v.reason  # a legitimate answer: jax's own matmul is a Pallas kernel
    assert v.uses_library_kernel == MATMUL
    monkeypatch.setattr(evaluator, "settings", evaluator.settings.model_copy(update={"allow_library_kernels": False}))
    v = evaluator.evaluate("8p_GEMM", kernel, size="smoke")
    assert (v.status, v.stage) == ("rejected", "static") and MATMUL in v.reason
    assert v.uses_library_kernel == MATMUL
