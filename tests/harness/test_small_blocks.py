"""The small-blocks check: a kernel whose default blocks take one grid step on a carried axis at the checked sizes is
run again with the smaller blocks it declares, so a step-to-step bug that only full size would show is caught."""

from __future__ import annotations

import pytest

import jaxbench
from maxkernel.harness.verdict.evaluate import CandidateResult
from maxkernel.harness.verdict.small_blocks import candidates

FLASH = jaxbench.task_dir("1p_Flash_Attention") / "kernel.py"
GEMM_EPILOGUE = jaxbench.task_dir("41k_Gemm_Add_ReLU") / "kernel.py"
# Met writing the replay recordings: the running softmax sum left unrescaled is right whenever a row's keys fit one
# block, which at the smoke size and at every check size the budget allows they do with the default 512 x 512 blocks.
NO_RESCALE = ("l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=-1, keepdims=True)",
              "l_ref[...] = l_ref[...] + jnp.sum(p, axis=-1, keepdims=True)")


@pytest.mark.unit
def test_candidates_are_the_declared_values_smallest_first_never_the_configuration_judged():
    source = FLASH.read_text()
    assert candidates(source, None) == [{"block_q": 128, "block_k": 128}, {"block_q": 256, "block_k": 256},
                                        {"block_q": 1024, "block_k": 1024}]  # 512 x 512 is the defaults'
    assert candidates(source, {"block_q": 128, "block_k": 128})[0] == {"block_q": 256, "block_k": 256}
    odd = source.replace('"block_k": (128, 256, 512, 1024),', '"block_k": (256, 128),\n    "causal_mode": ("a", "b"),')
    assert candidates(odd, None)[:2] == [{"block_q": 128, "block_k": 128}, {"block_q": 256, "block_k": 256}]
    assert candidates(source.replace("TUNABLES", "NOT_TUNABLES"), None) == []
    assert candidates("def broken(:\n", None) == []


@pytest.mark.unit
def test_a_candidate_process_cannot_hand_the_judge_a_malformed_small_blocks_report():
    good = {"status": "ran", "backend": "cpu", "census": {}, "outputs": ["out_0.npz"], "timing": {"kernel_ms": []}}
    assert CandidateResult.model_validate({**good, "small_blocks": {"config": {"block_q": 128}, "steps": 4}})
    for bad in ({"config": "all"}, {"config": {"block_q": "x"}}, {"steps": "many"}, {"verdict": "correct"}):
        with pytest.raises(ValueError):
            CandidateResult.model_validate({**good, "small_blocks": bad})


@pytest.mark.integration
def test_a_running_sum_left_unrescaled_is_caught_with_the_smaller_blocks_it_declares(evaluator, tmp_path):
    kernel = tmp_path / "kernel.py"
    kernel.write_text(FLASH.read_text().replace(*NO_RESCALE))
    v = evaluator.evaluate("1p_Flash_Attention", kernel, size="smoke", reps=0, estimate=False)
    assert v.status == "incorrect" and "with its smallest declared tunables (block_k=128, block_q=128" in v.reason
    assert v.correctness.per_seed and all(c.ok for c in v.correctness.per_seed)  # the default blocks pass
    small = v.correctness.small_blocks
    assert small["ok"] is False and small["steps"] > small["default_steps"]
    assert v.hint_family == "multi_step_state" and "block_k=128, block_q=128" in v.hint

    shipped = evaluator.evaluate("1p_Flash_Attention", FLASH, size="smoke", reps=0, estimate=False)
    assert shipped.status == "correct" and shipped.correctness.small_blocks["ok"] is True


@pytest.mark.integration
def test_a_declared_configuration_the_checked_size_refuses_is_skipped_for_the_next(evaluator, tmp_path):
    # block_n=64 is not a multiple of 128: the kernel's own BlockSizes.fit refuses it while tracing, so the check
    # takes the next level up, and a kernel whose every level is refused is judged without it (and says why).
    kernel = tmp_path / "kernel.py"
    kernel.write_text(GEMM_EPILOGUE.read_text().replace('"block_n": (128, 256,', '"block_n": (64, 256,'))
    v = evaluator.evaluate("41k_Gemm_Add_ReLU", kernel, size="smoke", reps=0, estimate=False)
    assert v.status == "correct" and v.correctness.small_blocks["config"]["block_n"] == 256
    only = tmp_path / "only" / "kernel.py"
    only.parent.mkdir()
    only.write_text(GEMM_EPILOGUE.read_text().replace('"block_n": (128, 256, 512, 1024, 2048),', '"block_n": (64,),'))
    v = evaluator.evaluate("41k_Gemm_Add_ReLU", only, size="smoke", reps=0, estimate=False)
    assert v.status == "correct" and v.correctness.small_blocks.get("config") is None
    assert "block_n=64" in v.correctness.small_blocks["skipped"] and "multiple of 128" in v.correctness.small_blocks["skipped"]
