"""A task's named configs reach the estimator: full@decode is profiled at the decode config's dims, and a shrunk
size keeps the config's other parameters. rw_causal_conv1d's and rw_rglru_scan's decode estimates were their
prefill programs' (0.68 ms against a 0.0135 ms floor: the plan shrank CONFIG's dims, not the config's)."""

import pytest

from maxkernel.harness.estimate.facts import task_dims, task_params
from maxkernel.harness.jobs import estimate_job as ej
from maxkernel.tasks import load_task

pytestmark = pytest.mark.unit


def test_a_configs_dims_are_its_own():
    fp8 = load_task("rw_fp8_matmul")
    assert task_dims(fp8, "full")["M"] == 4096 and task_dims(fp8, "full@decode")["M"] == 16
    assert task_dims(fp8, "smoke@decode")["M"] == 16 and task_dims(fp8, "smoke")["M"] == 256
    assert task_params(load_task("rw_moe_tgmm"), "full@wo")["projection"] == "wo"


def test_a_shrunk_size_of_a_config_keeps_the_configs_parameters():
    """rw_moe_tgmm's wo config differs from wi only by a string (its projection): shrunk, it must stay wo."""
    tgmm = load_task("rw_moe_tgmm")
    dims = {**task_dims(tgmm, "full@wo"), "seq_len": 512}
    lhs, grad, sizes = ej._structs_at(tgmm, dims, "full@wo")
    assert lhs.shape == (512 * 8, 768) and grad.shape == (512 * 8, 2048) and sizes.shape == (128,)
    assert ej._flops_at(tgmm, dims, "full@wo") == 2 * 512 * 8 * 2048 * 768
    fp8 = load_task("rw_fp8_matmul")
    x, _, w, _ = ej._structs_at(fp8, {**task_dims(fp8, "full@decode"), "N": 9216}, "full@decode")
    assert x.shape == (16, 7168) and w.shape == (7168, 9216)
