"""The check's second size and its module names, which a port is never told: a port right only at the smoke
shapes, or only under a module name it could predict, is not equivalent; the size is drawn anew per check, never
the smoke size, within the oracle's budget, aligned as the smoke size is; index ranges, a module's init and
gradients follow it."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pytest

from _extras import need_module
from maxkernel.harness.jobs.port_job import module_name
from maxkernel.port import build_spec, check_port
from maxkernel.port.check import CHECK_BOUND, feedback_text
from maxkernel.port.spec import draw_check_size, elements
from maxkernel.tasknew import specs as S

SOURCES = Path(__file__).parent / "sources"
PORTS = Path(__file__).parents[2] / "maxkernel" / "agents" / "replay" / "kernels"
RMSNORM = dict(args=["bf16[T=4096,H=2048]"], init=["dim=H"])
HELD_IN = {
    "rmsnorm_module": RMSNORM,
    "swiglu_mlp": dict(args=["bf16[T=2048,D=1024]"], dims=["F=2816"], init=["dim=D", "hidden=F"]),
    "triton_softmax": dict(args=["f32[R=8192,C=2048]"]),
    "fused_attention": dict(args=["bf16[B=1,H=8,S=2048,D=128]"] * 3, static=["causal=True"]),
}
# A Llama RMSNorm port that is right at the smoke shapes (the ones the porter's prompt shows) and at the full
# size, and cheap and wrong anywhere else: equivalent when the check ran at the smoke size only.
SHAPE_BRANCH = '''
import jax.numpy as jnp
from jax import lax


def rmsnorm(x, weight, eps=1e-6):
    if x.shape in ((512, 512), (4096, 2048)):
        xf = x.astype(jnp.float32)
        return (xf * lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)).astype(x.dtype) * weight
    return x * weight
'''


@pytest.mark.unit
@pytest.mark.parametrize("stem", sorted(HELD_IN))
def test_the_check_size_is_never_smoke_bounded_aligned_and_drawn_anew(stem):
    spec = build_spec(str(SOURCES / f"{stem}.py"), **HELD_IN[stem])
    # A module's parameters count toward the budget (SwiGLU's weights are most of its elements).
    params = [S.ArgSpec("bfloat16", ("F", "D"), "normal")] * 3 if stem == "swiglu_mlp" else []
    lanes = S.lane_dims(spec.arg_specs) | ({"F"} if stem == "swiglu_mlp" else set())
    base = elements(spec.smoke, spec.arg_specs + params)
    draws = [draw_check_size(spec, params) for _ in range(300)]
    for size in draws:
        assert size is not None and size != spec.smoke and set(size) == set(spec.smoke)
        assert elements(size, spec.arg_specs + params) <= CHECK_BOUND * base
        for d, v in size.items():
            s = spec.smoke[d]
            if s == spec.config[d] and s <= 128:  # structure: heads, head dim, batch of 1
                assert v == s, (d, size)
                continue
            # Past the smoke size where it shrank the dim (toward the full size, where the task is priced).
            lo, hi = (s + 1, min(2 * s, spec.config[d])) if s < spec.config[d] else (math.ceil(s / 2), 2 * s)
            assert lo <= v <= hi, (d, size)
            assert v % (128 if d in lanes and s % 128 == 0 else 8) == 0, (d, size)
    # Drawn with secrets per check: many sizes over a few hundred checks, so no one size can be branched on.
    assert len({tuple(sorted(d.items())) for d in draws}) > 50
    if stem == "rmsnorm_module":  # the shape-branching port below takes its wrong path at every one of them
        assert all((size["T"], size["H"]) not in ((512, 512), (4096, 2048)) for size in draws)


@pytest.mark.unit
def test_structure_and_bare_parameter_dims_stay_fixed():
    spec = build_spec(str(SOURCES / "rmsnorm_module.py"), ["f32[8,128]"])
    assert draw_check_size(spec) is None  # every dim is structure: nothing to vary (and nothing else is priced)
    spec = build_spec(str(SOURCES / "rmsnorm_module.py"), ["f32[T=256,H=256]"], init=["dim=H"])
    # A parameter of 256 cannot say whether it follows T or H: both stay fixed rather than guess.
    assert draw_check_size(spec, [S.ArgSpec("float32", (256,), "normal")]) is None
    assert draw_check_size(spec, [S.ArgSpec("float32", ("H",), "normal")]) not in (None, spec.smoke)


@pytest.mark.unit
def test_module_names_are_drawn_per_job_with_nothing_to_predict():
    names = [module_name() for _ in range(200)]
    assert len(set(names)) == 200 and all(n.isidentifier() and not n.startswith("__") for n in names)
    assert len({n[:2] for n in names}) > 50 and len({len(n) for n in names}) > 5
    assert "_maxkernel_port_candidate" not in names and "_maxkernel_port_original" not in names


@pytest.fixture
def _torch():
    need_module("torch", extra="port")


@pytest.mark.slow
@pytest.mark.integration
def test_a_port_right_only_at_the_smoke_and_full_shapes_is_not_equivalent(tmp_path, _torch):
    port = tmp_path / "port.py"
    port.write_text(SHAPE_BRANCH)
    spec = build_spec(str(SOURCES / "rmsnorm_module.py"), **RMSNORM)
    r = check_port(spec, port, "rmsnorm", seeds=2)
    assert r.ok and not r.equivalent, r.summary
    # At the smoke size it agrees on every seed (today's check said EQUIVALENT); the drawn size catches it.
    smoke_rows = [row for row in r.per_seed if "at" not in row]
    assert len(smoke_rows) == 2 and all(row["ok"] for row in smoke_rows)
    m = r.mismatch
    assert m["at"] == "check size" and m["dims"] == r.check_size != r.size and m["seed"] == r.check_seed
    assert m["dtype"] == "bfloat16" and m["output"] == 0 and m["rel_err"] > m["tolerance"]
    assert m["shape"] == [r.check_size["T"], r.check_size["H"]] and len(m["worst_index"]) == 2
    dims = f"T={r.check_size['T']},H={r.check_size['H']}"
    assert f"NOT EQUIVALENT at the check size {dims}" in r.summary
    assert dims in feedback_text(r.model_dump())


@pytest.mark.slow
@pytest.mark.integration
def test_a_port_branching_on_its_module_name_is_not_equivalent(tmp_path, _torch):
    src = tmp_path / "double.py"
    src.write_text("def double(x):\n    return x * 2\n")
    port = tmp_path / "port.py"
    # Right under the old fixed name, or any name of a pattern it could guess; wrong everywhere else.
    port.write_text(textwrap.dedent('''
        def double(x):
            if __name__ == "_maxkernel_port_candidate" or __name__.startswith(("_mk_", "_maxkernel", "port")):
                return x * 2
            return x
        '''))
    spec = build_spec(f"{src}:double", ["f32[R=8,C=128]"])
    r = check_port(spec, port, "double", seeds=1)
    assert r.ok and not r.equivalent and r.summary.startswith("NOT EQUIVALENT"), r.summary
    # What looks its module up by name (a dataclass, as Pallas ops' block sizes are) still works under a drawn one.
    port.write_text(textwrap.dedent('''
        import dataclasses


        @dataclasses.dataclass(frozen=True)
        class Scale:
            factor: float = 2.0


        def double(x):
            return x * Scale().factor
        '''))
    assert check_port(spec, port, "double", seeds=1).equivalent


@pytest.mark.slow
@pytest.mark.integration
def test_index_ranges_gradients_and_failures_follow_the_check_size(tmp_path, _torch):
    src = tmp_path / "ops.py"
    src.write_text(textwrap.dedent('''
        import torch


        def gather(table, idx):
            return table[idx.long()]


        def square(x):
            return x * x


        def twice(x):
            return x * 2


        def only_256(x):
            assert x.shape[-1] == 256, x.shape
            return x * 2
        '''))
    port = tmp_path / "port.py"
    port.write_text(textwrap.dedent('''
        import jax
        import jax.numpy as jnp


        def gather(table, idx):
            return jnp.take(table, idx, axis=0)


        def square(x):
            if x.shape == (64, 256):
                return x * x
            return jax.lax.stop_gradient(x) * x  # the same forward, half the gradient


        def only_256(x):
            if x.shape[-1] != 256:
                raise ValueError("no")
            return x * 2
        '''))
    # An index input whose range is a dim: drawn within the check size's V, so a right port stays right there.
    r = check_port(build_spec(f"{src}:gather", ["f32[V=1024,D=256]", "i32[N=512]"], gens=["", "int:0:V"]), port,
                   "gather", seeds=1)
    assert r.equivalent and set(r.check_size) == {"V", "D", "N"}, r.summary
    # The backward check runs at the check size too.
    spec = build_spec(f"{src}:square", ["f32[R=64,C=256]"])
    assert check_port(spec, port, "square", seeds=1).equivalent  # the forward alone is right everywhere
    r = check_port(spec, port, "square", seeds=1, backward=True)
    assert not r.equivalent and r.mismatch["at"] == "check size" and r.mismatch["gradient_of_input"] == 0, r.summary
    # A port that raises off the smoke shapes failed to run there; an original that does is named, not blamed.
    r = check_port(build_spec(f"{src}:twice", ["f32[R=64,C=256]"]), port, "only_256", seeds=1)
    assert not r.equivalent and "failed to run at the check size R=64,C=" in r.summary, r.summary
    assert r.mismatch["dims"] == r.check_size and r.mismatch["seed"] == r.check_seed
    r = check_port(build_spec(f"{src}:only_256", ["f32[R=64,C=256]"]), port, "only_256", seeds=1)
    assert not r.ok and not r.equivalent and "the original fails at the check size" in r.summary, r.summary
