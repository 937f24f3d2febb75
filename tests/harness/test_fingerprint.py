"""One program at every size: the fingerprint (integrity.fingerprint) that ties the priced program to the checked
one, the cross-check of the lowering handed to the judge against the candidate's trace, and what the verdict does
with an estimate (evaluate._with_estimate): withheld from a program that changes with the size, an impossible
estimated speedup rejected, a claimed roofline floor flagged."""

import contextlib
import random
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import jaxbench
from maxkernel import chips
from maxkernel.harness.verdict import checksize
from maxkernel.harness.jobs.candidate_job import load_kernel
from maxkernel.harness.estimate.estimator import Estimate, ProgramEstimate
from maxkernel.harness.verdict.evaluate import _signature_problem, _with_estimate
from maxkernel.harness.verdict.integrity import fingerprint, fingerprint_differs, lowering_disagrees, pallas_kernels
from maxkernel.harness.verdict.result import Verdict
from maxkernel.tasks import load_task

pytestmark = pytest.mark.unit

REPLAY = Path(__file__).parents[2] / "maxkernel" / "agents" / "replay" / "kernels"
V3 = Path(__file__).parent / "kernels" / "verdict_v3"
# Every shipped kernel: 18k, 22k, 34k and 39k padded their rows to the lane width only where they were narrower, so
# the XLA operations around the kernel differed between the check size and full size and no estimate stood.
HONEST = [(p.parent.name, p) for p in sorted(Path(jaxbench.__file__).parent.glob("*/kernel.py"))]
HONEST += [(p.name.split("_v")[0], p) for p in sorted(REPLAY.glob("[0-9]*.py"))]


def _prints(task_name, kernel, chip="v5e"):
    task, module = load_task(task_name), load_kernel(kernel)
    drawn = checksize.draw(task, "smoke", rng=random.Random(0))
    out = {}
    for label, size, ctx in (("smoke", "smoke", contextlib.nullcontext()), ("full", "full", contextlib.nullcontext()),
                             ("check", drawn["size"], checksize.injected(task, drawn["size"], drawn["dims"]))):
        with ctx:
            structs = jax.eval_shape(lambda: task.create_inputs(size=size, seed=0))
            with chips.trace_context(chips.get(chip)):
                out[label] = fingerprint(jax.jit(module.workload).trace(*structs).jaxpr)
    return out


@pytest.mark.parametrize("task,kernel", HONEST, ids=[str(k.name if k.parent == REPLAY else t) for t, k in HONEST])
def test_honest_kernels_print_one_program_at_every_size(task, kernel):
    """Their blocks clamp to small arrays and their literals follow the size (a mean's 1/N): the same program."""
    p = _prints(task, kernel)
    assert fingerprint_differs(p["check"], p["full"]) is None
    assert fingerprint_differs(p["smoke"], p["full"]) is None


# Expert baselines (installed library kernels): the table prices one only where the program priced at full size is
# the one its verdict checked at the drawn check size. 7p's is left out: jax's TPU interpreter cannot run it, so
# it is never priced.
EXPERTS = [(p.parent.name, p) for p in sorted(Path(jaxbench.__file__).parent.glob("*/expert.py"))
           if p.parent.name != "7p_Ragged_Paged_Attention"]


@pytest.mark.parametrize("task,expert", EXPERTS, ids=[t for t, _ in EXPERTS])
def test_an_expert_checked_at_the_check_size_is_the_program_priced_at_full_size(task, expert):
    """Met on the 1p and 2p experts with blocks that followed the size (512 where the sequence allowed): the library's
    kernel body changed with them and the table withheld their estimates; and on 6p, whose smoke size had 4 query
    heads per kv head where the full size has 8, a ratio jax's paged attention branches on."""
    p = _prints(task, expert)
    assert fingerprint_differs(p["check"], p["full"]) is None


def test_a_kernel_that_swaps_programs_with_the_size_prints_two():
    p = _prints("8p_GEMM", V3 / "shape_branch_small.py")
    assert fingerprint_differs(p["check"], p["full"]) is not None
    assert fingerprint_differs(p["smoke"], p["check"]) is None


def test_the_lowering_must_hold_the_traced_kernels():
    traced = [{"name": "_k", "grid": [4, 1], "blocks": [[128, 256], [256]]}]
    assert lowering_disagrees(traced, [{"name": "k", "grid": [4], "blocks": [[128, 256], [1, 256]]}]) is None
    assert "holds 0" in lowering_disagrees([], [{"name": "k", "grid": [4], "blocks": []}])
    assert "not the program" in lowering_disagrees(traced, [{"name": "_k", "grid": [8], "blocks": []}])
    assert "blocks" in lowering_disagrees(traced, [{"name": "_k", "grid": [4], "blocks": [[64, 256], [256]]}])


def test_a_grid_extent_known_only_at_run_time_matches_its_lowering():
    """Met judging the 14p expert (megablox's gmm): its middle grid extent is the number of tiles the group sizes
    need, -1 in the trace and MLIR's dynamic size in the Mosaic lowering. Dynamic must match dynamic, and only it."""
    traced = [{"name": "gmm", "grid": [3, -1, 1], "blocks": []}]
    assert lowering_disagrees(traced, [{"name": "gmm", "grid": [3, -(2 ** 63), 1], "blocks": []}]) is None
    assert "not the program" in lowering_disagrees(traced, [{"name": "gmm", "grid": [3, 4, 1], "blocks": []}])


def test_the_lowering_must_take_the_tasks_inputs():
    meta = {"in_shapes": [[256, 512], [512, 384]], "out_shapes": [[256, 384]]}
    good = {"signature": {"inputs": [[256, 512, "bf16"], [512, 384, "bf16"]], "outputs": [[256, 384, "bf16"]]}}
    assert _signature_problem(good, meta) is None
    other = {"signature": {"inputs": [[128, 512, "bf16"], [512, 384, "bf16"]], "outputs": [[128, 384, "bf16"]]}}
    assert "not the task's" in _signature_problem(other, meta)


def _verdict(prints):
    return Verdict(task="8p_GEMM", kernel_file="k.py", size="smoke", status="correct", reason="matches", backend="cpu",
                   integrity={"fingerprints": prints})


def _estimate(speedup, priced, fraction=0.5, base_fraction=0.5):
    kern = ProgramEstimate(ok=True, program="kernel", chip="v5e", estimated_ms=1.0, fit={"fingerprints": priced},
                           fraction_of_roofline=fraction)
    base = ProgramEstimate(ok=True, program="baseline", chip="v5e", estimated_ms=speedup,
                           fraction_of_roofline=base_fraction)
    return Estimate(ok=True, summary="s", chip="v5e", size="full", estimated_ms=1.0, baseline_estimated_ms=speedup,
                    speedup_estimate=speedup, fraction_of_roofline=fraction, kernel=kern, baseline=base)


FP = {"kernels": ["a1"], "outside": "o"}


def test_an_estimate_of_the_checked_program_is_attached_and_ranks():
    v = _with_estimate(_verdict({"checked": FP, "check": FP}), _estimate(1.4, [FP]))
    assert v.estimate["ok"] and v.rank[0] == pytest.approx(1.4) and v.status == "correct"


def test_an_estimate_of_another_program_is_withheld_and_nothing_ranks():
    v = _with_estimate(_verdict({"checked": FP, "check": FP}), _estimate(5.4, [FP, {"kernels": ["b2"], "outside": "o"}]))
    assert not v.estimate["ok"] and "size_dependent_program" in v.flags and v.rank[0] is None
    v = _with_estimate(_verdict({"checked": FP, "check": FP}), _estimate(1.4, []))  # nothing to tie it to
    assert not v.estimate["ok"]


def test_an_impossible_estimated_speedup_is_rejected_like_a_measured_one():
    v = _with_estimate(_verdict({"checked": FP, "check": FP}), _estimate(14.0, [FP]))
    assert v.status == "rejected" and v.stage == "estimate" and "beyond what a kernel can honestly gain" in v.reason


def test_a_claimed_floor_where_xla_is_far_from_it_is_flagged():
    v = _with_estimate(_verdict({"checked": FP, "check": FP}), _estimate(3.0, [FP], fraction=1.0, base_fraction=0.3))
    assert "claims_roofline_floor" in v.flags and v.status == "correct"
    v = _with_estimate(_verdict({"checked": FP, "check": FP}), _estimate(1.1, [FP], fraction=1.0, base_fraction=0.9))
    assert "claims_roofline_floor" not in v.flags


def test_the_autotuner_holds_a_gated_config_to_the_same_tie():
    from maxkernel.tools.autotune import _priced_is_not_checked

    v = _verdict({"checked": FP, "check": FP})
    same = ProgramEstimate(ok=True, program="kernel", chip="v5e", estimated_ms=1.0, fit={"fingerprints": [FP]})
    other = ProgramEstimate(ok=True, program="kernel", chip="v5e", estimated_ms=1.0,
                            fit={"fingerprints": [{"kernels": ["b2"], "outside": "o"}]})
    assert _priced_is_not_checked(v, same, "full") is None
    assert "not the one checked" in _priced_is_not_checked(v, other, "full")


def test_a_body_that_unrolls_a_python_loop_over_a_size_is_named_so():
    """What the 27k kernel's first draft did: a Python loop over column pieces, whose count follows the block and so
    the size. The refusal says which kernel and which part changed, and what to do instead."""
    from jax.experimental import pallas as pl

    def run(x):
        def body(x_ref, o_ref):
            for j in range(x.shape[1] // 128):  # unrolled: more operations at a larger size
                o_ref[:, j * 128:(j + 1) * 128] = x_ref[:, j * 128:(j + 1) * 128] * 2.0
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    small = fingerprint(jax.jit(run).trace(jax.ShapeDtypeStruct((8, 256), jnp.float32)).jaxpr)
    big = fingerprint(jax.jit(run).trace(jax.ShapeDtypeStruct((8, 1024), jnp.float32)).jaxpr)
    why = fingerprint_differs(small, big)
    assert "kernel 1 of 1 changed with the size: its body (" in why and "fori_loop" in why, why
    assert "index maps" not in why and "semantics" not in why, why


def test_where_the_printer_wraps_a_line_is_not_the_program():
    """An honest program printed at two sizes: the wider shape pushes an equation past the printer's width and it is
    wrapped, which once made 32k's kernel 'another program' at full size."""
    from maxkernel.harness.verdict.integrity import _unwrapped

    short = "    bn:bf16[#,#] = convert_element_type[new_dtype=bfloat16 weak_type=False] bm\n"
    wrapped = "    bn:bf16[#,#] = convert_element_type[\n      new_dtype=bfloat16\n      weak_type=False\n    ] bm\n"
    assert short != wrapped and _unwrapped(short) == _unwrapped(wrapped)
    assert _unwrapped(short) != _unwrapped(short.replace("bfloat16", "float32"))
    # and an old fingerprint (a cached estimate's, without the unwrapped hashes) is still compared as printed
    assert fingerprint_differs({"kernels": ["a"], "outside": "o"}, {"kernels": ["a"], "kernels_unwrapped": ["x"],
                                                                  "outside": "o"}) is None
    assert fingerprint_differs({"kernels": ["a"], "kernels_unwrapped": ["u"], "outside": "o"},
                               {"kernels": ["b"], "kernels_unwrapped": ["u"], "outside": "o"}) is None


def test_an_inner_jaxpr_shared_at_one_size_is_the_same_program():
    """Met on the 6p kernel: jax's printer hoisted the body's `_where` into a shared `let` at one size and wrote it
    inline at another (two uses were one cached object, or two), and the honest kernel read as size-dependent. The
    fingerprint's text writes inner jaxprs out in place; a body that does change is still caught."""
    def run(x, *, twice):
        def body(x_ref, o_ref):
            v = x_ref[...]
            v = jnp.where(v > 0, v, 0.0)
            if twice:
                v = jnp.where(v > 1, v, 1.0)
            o_ref[...] = v

        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    from jax.experimental import pallas as pl

    def prints(w, twice):
        jax.clear_caches()
        return fingerprint(jax.jit(lambda x: run(x, twice=twice)).trace(jax.ShapeDtypeStruct((8, w), jnp.float32)).jaxpr)

    assert fingerprint_differs(prints(128, False), prints(256, False)) is None
    assert fingerprint_differs(prints(128, True), prints(256, True)) is None
    assert "changed with the size" in fingerprint_differs(prints(128, False), prints(256, True))
    from maxkernel.harness.verdict.integrity import program_text

    shared = jax.jit(lambda v: jnp.where(v > 0, v, 0.0))
    one = jax.make_jaxpr(lambda v: shared(v) + shared(v + 1))(jnp.zeros(4))  # one inner object used twice
    two = jax.make_jaxpr(lambda v: jax.jit(lambda u: jnp.where(u > 0, u, 0.0))(v)
                         + jax.jit(lambda u: jnp.where(u > 0, u, 0.0))(v + 1))(jnp.zeros(4))
    assert program_text(one) == program_text(two)


def test_a_slice_that_spans_its_dim_at_one_size_is_the_same_program():
    """What 46k's kernel does: one image row of width W stored into a 128-lane scratch, `s[:, 0:W]`. At W=18 the
    printer shows the bound (`s[:,:18]`); at W=128 the slice spans the dim and shows none (`s[:,:]`), and the
    honest program was refused as size-dependent. A store that does change with the size is still caught."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def run(x, *, split):
        w = x.shape[1]

        def body(x_ref, o_ref, s_ref):
            s_ref[...] = jnp.zeros_like(s_ref)
            s_ref[:, 0:w] = x_ref[...]
            if split and w < 128:  # a choice made from the size: another program at the smaller one
                s_ref[:, 0:w] = x_ref[...] * 2.0
            o_ref[...] = s_ref[:, 0:w]
        return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)])(x)

    def prints(w, split=False):
        return fingerprint(jax.jit(lambda x: run(x, split=split)).trace(
            jax.ShapeDtypeStruct((8, w), jnp.float32)).jaxpr)

    narrow, wide = prints(18), prints(128)
    assert fingerprint_differs(narrow, wide) is None
    assert "changed with the size" in fingerprint_differs(prints(18, split=True), prints(128, split=True))
    # a fingerprint without the key (a cached estimate's) is compared by the keys it has
    old = {k: v for k, v in wide.items() if k != "kernels_spanned"}
    assert fingerprint_differs(wide, old) is None


@pytest.mark.parametrize("task", ["32k_Gemm_Sigmoid_LogSumExp"])
def test_a_shipped_kernel_whose_lines_wrap_with_the_size_prints_one_program(task):
    p = _prints(task, jaxbench.task_dir(task) / "kernel.py")
    assert fingerprint_differs(p["smoke"], p["full"]) is None and fingerprint_differs(p["check"], p["full"]) is None


def test_an_estimated_speedup_past_ten_stands_only_where_xla_is_that_far_above_the_floor():
    """rw_rglru_scan: XLA runs the recurrence as a 4096-step loop priced 40x above the roofline floor, and the kernel
    near the floor was estimated 39x: that is honest. The bound is what running at the floor would gain, so a
    speedup that needs the kernel below the floor is refused, as is one past ten where XLA is near it."""
    def at(speedup, floor_ms):
        return _estimate(speedup, [FP]).model_copy(update={"roofline_ms": floor_ms})

    near_floor = _with_estimate(_verdict({"checked": FP, "check": FP}), at(39.0, 0.9))  # XLA 39 ms, floor 0.9 ms
    assert near_floor.status == "correct" and near_floor.rank[0] == pytest.approx(39.0), near_floor.reason
    below_floor = _with_estimate(_verdict({"checked": FP, "check": FP}), at(39.0, 2.0))  # would need 0.5x the floor
    assert below_floor.status == "rejected" and "limit is 20.5x" in below_floor.reason, below_floor.reason
    xla_near_floor = _with_estimate(_verdict({"checked": FP, "check": FP}), at(14.0, 7.0))
    assert xla_near_floor.status == "rejected" and "limit is 10x" in xla_near_floor.reason
