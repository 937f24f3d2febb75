"""A task with several named configs is judged on each: correct only when correct on every config, the speedup a
geomean, and a kernel that is right on one config and wrong on another is caught and the config named."""

from __future__ import annotations

import textwrap

import pytest

from maxkernel.harness.verdict.configs import combine, geomean
from maxkernel.harness.verdict.result import Correctness, Verdict
from maxkernel.tasks import load_task

BASELINE = '''
"""Row scale: y = x * s[None, :] in x's dtype, at a wide and a narrow config."""
import jax
import jax.numpy as jnp
from jaxbench._common import dims, draw, keys

CONFIG = {"name": "row_scale", "rows": 1024, "cols": 512}
CONFIGS = {"wide": {}, "narrow": {"cols": 128}}
SIZES = {"smoke": {"rows": 256, "cols": 256}}


def create_inputs(dtype=jnp.float32, *, size="full", seed=42):
    d = dims(CONFIG, SIZES, size, CONFIGS)
    kx, ks = keys(seed, 2)
    return draw(kx, (d["rows"], d["cols"]), dtype, seed), draw(ks, (d["cols"],), dtype, seed)


def workload(x, s):
    return x * s[None, :]


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size, CONFIGS)
    return d["rows"] * d["cols"]
'''

KERNEL = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def _body(x_ref, s_ref, o_ref):
    o_ref[...] = x_ref[...] * s_ref[...]{wrong}


def workload(x, s):
    rows, cols = x.shape
    return pl.pallas_call(
        _body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(rows // 128,),
        in_specs=[pl.BlockSpec((128, cols), lambda i: (i, 0)), pl.BlockSpec((1, cols), lambda i: (0, 0))],
        out_specs=pl.BlockSpec((128, cols), lambda i: (i, 0)),
    )(x, s.reshape(1, cols))
'''


@pytest.fixture()
def task_dir(tmp_path):
    folder = tmp_path / "row_scale"
    folder.mkdir()
    (folder / "baseline.py").write_text(BASELINE)
    return folder


@pytest.mark.unit
def test_configs_become_sizes_and_dims_follow_them(task_dir):
    task = load_task(task_dir)
    assert task.configs == ["wide", "narrow"]
    assert task.sizes == ["full", "smoke", "full@narrow", "smoke@narrow"]
    assert task.config_sizes("smoke") == {"wide": "smoke", "narrow": "smoke@narrow"}
    assert task.config_sizes("smoke@narrow") == {}
    shapes = {s: task.create_inputs(size=s, seed=0)[0].shape for s in ("smoke", "smoke@narrow")}
    assert shapes == {"smoke": (256, 256), "smoke@narrow": (256, 128)}
    assert task.flops("full@narrow") == 1024 * 128


def _verdict(status: str, speedup: float | None, err: float, est: float | None = None, flags=()) -> Verdict:
    return Verdict(task="t", kernel_file="k.py", size="smoke", status=status, reason=f"{status} here",
                   correctness=Correctness(max_rel_err=err), speedup=speedup, flags=list(flags),
                   estimate={"ok": True, "speedup_estimate": est, "chip": "v5e"} if est else None)


@pytest.mark.unit
def test_combining_takes_the_geomean_the_worst_error_and_the_first_failure():
    both = combine("smoke", {"a": ("smoke", _verdict("correct", 2.0, 1e-4, 4.0)),
                             "b": ("smoke@b", _verdict("correct", 0.5, 3e-4, 1.0))})
    assert both.status == "correct" and both.speedup == pytest.approx(1.0)
    assert both.correctness.max_rel_err == 3e-4 and both.estimate["speedup_estimate"] == pytest.approx(2.0)
    assert set(both.configs) == {"a", "b"} and both.configs["b"]["size"] == "smoke@b"
    one_bad = combine("smoke", {"a": ("smoke", _verdict("correct", 2.0, 1e-4)),
                                "b": ("smoke@b", _verdict("incorrect", None, 0.5))})
    assert one_bad.status == "incorrect" and one_bad.reason.startswith("[config b]") and one_bad.speedup is None
    assert geomean([2.0, 8.0]) == pytest.approx(4.0) and geomean([1.0, None]) is None
    flagged = combine("smoke", {"a": ("smoke", _verdict("correct", 2.0, 1e-4, flags=["cpu_timing"])),
                                "b": ("smoke@b", _verdict("correct", 2.0, 1e-4, flags=["cpu_timing", "noisy"]))})
    assert flagged.flags == ["cpu_timing", "noisy"]  # a flag one config raised is not lost


@pytest.mark.unit
def test_the_combined_correctness_is_the_worst_configs_whole():
    """Every figure of the combined correctness comes from one config, the one nearest its bounds: its error, its
    Frobenius error, its tolerances and its per-seed rows, never the first config's beside another's error."""
    from maxkernel.harness.verdict.result import SeedCheck

    def verdict(err, tol, fro, fro_tol, seed):
        row = SeedCheck(seed=seed, ok=True, max_rel_err=err, fro_err=fro)
        return Verdict(task="t", kernel_file="k.py", size="smoke", status="correct", reason="ok",
                       correctness=Correctness(max_rel_err=err, tolerance=tol, max_fro_err=fro, fro_tolerance=fro_tol,
                                               seeds=[seed], per_seed=[row]))

    # b has the larger max error, but a comes nearer its (tighter) Frobenius bound: a is the worst.
    a, b = verdict(1e-3, 2e-2, 9e-4, 1e-3, 11), verdict(5e-3, 2e-2, 1e-4, 1e-3, 22)
    both = combine("smoke", {"prefill": ("smoke", a), "decode": ("smoke@decode", b)})
    assert both.correctness == a.correctness
    flipped = combine("smoke", {"prefill": ("smoke", b), "decode": ("smoke@decode", a)})
    assert flipped.correctness == a.correctness  # not the first config's
    assert both.configs["decode"]["max_fro_err"] == 1e-4 and both.configs["prefill"]["fro_tolerance"] == 1e-3


@pytest.mark.slow
@pytest.mark.integration
def test_a_kernel_wrong_on_one_config_is_caught_and_the_config_named(task_dir, tmp_path, evaluator):
    right = tmp_path / "right.py"
    right.write_text(KERNEL.replace("{wrong}", ""))
    wrong = tmp_path / "wrong.py"  # right on the wide config, off on the narrow one
    wrong.write_text(KERNEL.replace("{wrong}", " * (1.5 if x_ref.shape[1] == 128 else 1.0)"))
    good = evaluator.evaluate(str(task_dir), right, size="smoke", estimate=False)
    assert good.status == "correct", good.reason
    assert [(n, c["size"], c["status"]) for n, c in good.configs.items()] == [
        ("wide", "smoke", "correct"), ("narrow", "smoke@narrow", "correct")]
    bad = evaluator.evaluate(str(task_dir), wrong, size="smoke", estimate=False)
    assert bad.status == "incorrect" and bad.reason.startswith("[config narrow]"), bad.reason
    assert bad.configs["wide"]["status"] == "correct" and bad.configs["narrow"]["status"] == "incorrect"


@pytest.mark.unit
def test_an_estimate_at_a_config_is_tied_to_that_configs_checked_program():
    """rw_causal_conv1d's decode kernel is another program than its prefill one: the combined verdict carried the
    first config's fingerprints only, so every decode estimate read as "not the program checked". Each config's
    fingerprints travel with the combined verdict, and a size naming a config is compared with its own."""
    from maxkernel.harness.verdict.integrity import checked_prints, priced_differs

    prefill, decode = {"kernels": ["p"], "outside": "o"}, {"kernels": ["d"], "outside": "o"}
    a = _verdict("correct", 2.0, 1e-4).model_copy(update={"integrity": {"fingerprints": {"check": prefill}}})
    b = _verdict("correct", 1.0, 1e-4).model_copy(update={"integrity": {"fingerprints": {"check": decode}}})
    both = combine("smoke", {"prefill": ("smoke", a), "decode": ("smoke@decode", b)})
    assert priced_differs(checked_prints(both.integrity, "full@decode"), [decode]) is None
    assert priced_differs(checked_prints(both.integrity, "full"), [prefill]) is None
    assert priced_differs(checked_prints(both.integrity, "full@decode"), [prefill])  # still refused across configs
    assert priced_differs(checked_prints(both.integrity, "full"), [decode])
