"""The second size a verdict checks at: drawn per verdict, never the smoke size, within the interpreter's budget,
reduction lengths grown toward full, and every task of both suites offers one its own create_inputs accepts."""

import random

import jax
import pytest

from maxkernel.harness.verdict import checksize
from maxkernel.tasks import load_task

pytestmark = pytest.mark.unit


def _work(task, size):
    return checksize._work(task, size)


@pytest.mark.parametrize("name", ["8p_GEMM", "12p_RMSNorm", "1p_Flash_Attention", "41k_Gemm_Add_ReLU",
                                  "rw_causal_conv1d"])
def test_the_check_size_is_never_smoke_stays_in_budget_and_builds(name):
    task = load_task(name)
    smoke = checksize.dims_at(task, "smoke")
    small_flops, small_bytes = _work(task, "smoke")
    for seed in range(6):
        drawn = checksize.draw(task, "smoke", rng=random.Random(seed))
        assert drawn is not None and drawn["size"] == checksize.CHECK_SIZE
        dims = drawn["dims"]
        assert dims != smoke and all(dims[d] >= smoke[d] for d in smoke)
        with checksize.injected(task, drawn["size"], dims):
            flops, nbytes = _work(task, drawn["size"])
            jax.eval_shape(lambda: task.create_inputs(size=drawn["size"], seed=0))
        assert nbytes <= checksize.WORK_BUDGET * small_bytes
        assert not small_flops or flops <= checksize.WORK_BUDGET * small_flops
    assert checksize.CHECK_SIZE not in task.module.SIZES  # the parent's module is left as it was


def test_reduction_lengths_grow_first_and_values_keep_the_smoke_alignment():
    task = load_task("8p_GEMM")  # PARALLEL_DIMS = (M, N): K is the reduction
    drawn = checksize.draw(task, "smoke", rng=random.Random(0))
    assert drawn["dims"]["K"] == 4096  # 8x the smoke K: the whole budget (the full K, 8192, would be 16x)
    for d, v in drawn["dims"].items():
        assert v % checksize.dims_at(task, "smoke")[d] == 0


def test_draws_differ_from_verdict_to_verdict():
    task = load_task("1p_Flash_Attention")
    seen = {tuple(sorted(checksize.draw(task, "smoke")["dims"].items())) for _ in range(12)}
    assert len(seen) > 1


def test_a_config_size_gets_a_check_size_of_its_config():
    task = load_task("rw_causal_conv1d")
    drawn = checksize.draw(task, "smoke@decode", rng=random.Random(1))
    assert drawn["size"] == "__check__@decode"
    with checksize.injected(task, drawn["size"], drawn["dims"]):
        assert checksize.dims_at(task, drawn["size"]) == {**checksize.dims_at(task, "smoke@decode"), **drawn["dims"]}


def test_no_second_size_where_smoke_is_the_full_size():
    task = load_task("8p_GEMM")
    assert checksize.draw(task, "full") is None
