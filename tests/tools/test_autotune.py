"""autotune on a real kernel: beats a poor default, prunes by compiler, never returns an incorrect config."""

from pathlib import Path

import pytest

from maxkernel.tools.autotune import _order, autotune, declared_tunables

KERNEL = Path(__file__).parent / "kernels_runtime" / "gemm_tunable.py"


def test_search_space_is_read_without_running_the_kernel():
    space, defaults = declared_tunables(KERNEL.read_text())
    assert space["bk"] == (128, 384, 512, 2048) and defaults == {"bm": 32, "bn": 128, "bk": 128}
    order = _order(space, defaults)
    assert order[0] == defaults and len(order) == 36 and len({tuple(sorted(c.items())) for c in order}) == 36


def test_no_tunables_is_a_clear_refusal(tmp_path):
    k = tmp_path / "k.py"
    k.write_text("def workload(a, b):\n    return a @ b\n")
    r = autotune("8p_GEMM", str(k))
    assert not r.ok and "TUNABLES" in r.summary


@pytest.mark.integration
@pytest.mark.slow
def test_finds_a_better_correct_config_and_skips_bad_ones():
    r = autotune("8p_GEMM", str(KERNEL), chip="v5e", max_configs=6)
    assert r.ok, r.summary
    assert r.best["config"] != r.default["config"]
    assert r.best["speedup_vs_default"] > 1.5
    outcomes = {t.outcome for t in r.tried}
    assert {"pruned", "incorrect", "best"} <= outcomes
    assert r.best["config"]["bk"] != 384  # the configuration that drops K's tail is never chosen
    assert all(t.outcome != "best" or "matches the reference" in t.reason for t in r.tried)
    again = autotune("8p_GEMM", str(KERNEL), chip="v5e", max_configs=6)  # cached: nothing re-run
    assert again.best["config"] == r.best["config"] and all(t.cached for t in again.tried)
