"""The shipped reference kernels are judged `correct` by the full harness (sandbox, 3 seeds, integrity)."""

import pytest

import jaxbench
from maxkernel.tasks import load_task

WITH_KERNEL = [n for n in jaxbench.task_names() if load_task(n).reference_kernel is not None]
pytestmark = pytest.mark.integration


def test_the_five_required_reference_kernels_ship():
    assert {"8p_GEMM", "12p_RMSNorm", "1p_Flash_Attention", "41k_Gemm_Add_ReLU", "50k_Matmul_GELU_Softmax"} <= set(WITH_KERNEL)


# A verdict draws its check size with the task's full reduction length (K = 8192 for the GEMM tasks), which the
# interpreter runs in under a minute alone; beside two other workers on two cores one took 304 s (21k).
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", WITH_KERNEL)
def test_reference_kernel_is_correct(evaluator, name):
    v = evaluator.evaluate(name, load_task(name).reference_kernel)
    assert v.status == "correct", v.model_dump_json(indent=1)
    assert v.integrity["pallas_share"] >= 0.9 and v.integrity["outside_contraction_flops"] == 0
    assert v.correctness.max_rel_err <= v.correctness.tolerance
