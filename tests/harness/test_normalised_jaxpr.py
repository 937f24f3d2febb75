"""The twin-trace check's text of a program (candidate_job.normalised_jaxpr): two traces of one honest program print
the same however jax's trace caches shared their inner jaxprs, and a program that changed still prints differently
(the hostile kernel that does so through the whole harness is tests/harness/kernels/hostile/retrace.py)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from maxkernel.harness.jobs.candidate_job import interpret_context, normalised_jaxpr

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.unit


def _twice(fn, *structs):
    """As the candidate job traces: for the chip (census, lowering), then under the TPU interpreter (to run)."""
    from maxkernel import chips

    with chips.trace_context(chips.get("v5e")):
        plain = jax.jit(fn).trace(*structs)
    with interpret_context("cpu"):
        return plain.jaxpr, jax.jit(fn).trace(*structs).jaxpr


def test_megablox_gmm_traced_twice_prints_the_same():
    """Met judging the 14p expert: jax's printer wrote gmm's inner cumsum inline in the first trace and hoisted it
    into a shared `let` in the second (the second trace's cache handed back one object for two uses), and the
    verdict rejected honest library code as 'traced to a different program the second time'."""
    import importlib.util

    from maxkernel.tasks import load_task

    task = load_task("14p_Ragged_Dot")
    spec = importlib.util.spec_from_file_location("_expert_14p", task.path / "expert.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    structs = jax.eval_shape(lambda: task.create_inputs(size="smoke"))
    first, second = _twice(lambda *a: module.workload(*a), *structs)
    assert normalised_jaxpr(first) == normalised_jaxpr(second)


def test_one_inner_jaxpr_used_twice_prints_as_two_separate_ones():
    inner = jax.jit(lambda v: jnp.cumsum(v) * 2)
    x = jax.ShapeDtypeStruct((8,), jnp.int32)
    shared = jax.make_jaxpr(lambda v: inner(v) + inner(v + 1))(x)  # one cached inner jaxpr object, used twice
    jax.clear_caches()
    apart = jax.make_jaxpr(lambda v: jax.jit(lambda u: jnp.cumsum(u) * 2)(v) + jax.jit(lambda u: jnp.cumsum(u) * 2)(
        v + 1))(x)  # two objects with the same program
    assert normalised_jaxpr(shared) == normalised_jaxpr(apart)


@pytest.mark.parametrize("other", [
    lambda v: jax.jit(lambda u: jnp.cumsum(u) * 3)(v) + 1,  # an inner program changed
    lambda v: jax.jit(lambda u: jnp.cumsum(u) * 2)(v) - 1,  # an outer op changed
    lambda v: jax.jit(lambda u: jnp.cumsum(u) * 2)(v * 1) + 1,  # an op added
])
def test_a_changed_program_prints_differently(other):
    x = jax.ShapeDtypeStruct((8,), jnp.int32)
    base = jax.make_jaxpr(lambda v: jax.jit(lambda u: jnp.cumsum(u) * 2)(v) + 1)(x)
    assert normalised_jaxpr(base) != normalised_jaxpr(jax.make_jaxpr(other)(x))


def test_the_interpreter_choice_is_blanked_and_nothing_else():
    from jax.experimental import pallas as pl

    def call(x, interpret):
        def body(x_ref, o_ref):
            o_ref[...] = x_ref[...] + 1

        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=interpret)(x)

    x = jax.ShapeDtypeStruct((8, 128), jnp.float32)
    texts = [normalised_jaxpr(jax.make_jaxpr(lambda v, i=i: call(v, i))(x)) for i in (False, True)]
    assert texts[0] == texts[1] and "interpret=*" in texts[0]


def test_the_census_counts_a_ragged_dot_as_the_contraction_it_is():
    """Met writing 10p: the census counted lax.ragged_dot as no work, so the MoE baseline's contraction FLOPs were its
    router alone, and an honest kernel that left the router matmul in XLA (as the baseline does) was rejected with
    "matmul FLOPs outside pallas_call come to 100% of the task's"."""
    from jax import lax

    from maxkernel.harness.verdict.integrity import census

    m, k, n, groups = 64, 32, 16, 4
    closed = jax.make_jaxpr(lambda a, b, g: lax.ragged_dot(a, b, g))(
        jnp.zeros((m, k), jnp.bfloat16), jnp.zeros((groups, k, n), jnp.bfloat16), jnp.full((groups,), 16, jnp.int32))
    counted = census(closed)
    assert counted.contraction_flops == 2 * m * n * k and counted.total_flops >= 2 * m * n * k
