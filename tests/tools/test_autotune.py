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
@pytest.mark.timeout(900)  # six verdict-v3 judgements: ~110 s alone, over 300 s beside two other workers in CI
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


@pytest.mark.integration
@pytest.mark.slow
def test_off_a_tpu_the_estimate_ranks_and_the_harness_gates(tmp_path, monkeypatch):
    """Off a TPU the tuner ranks by the estimated TPU time (interpreter time would rank 128-square tiles like any
    other), prunes what does not compile at full size, and answers with the best estimate that is correct."""
    from maxkernel.settings import get_settings

    source = (Path(__file__).parents[2] / "jaxbench" / "8p_GEMM" / "kernel.py").read_text()
    # At v5e's default 16 MiB scoped VMEM (the shipped kernel asks for a limit sized to its tiles), so that
    # 1024 x 1024 x 1024 is a configuration the compiler refuses.
    asked = ",\n                                             vmem_limit_bytes=_vmem_limit(bs, a.dtype, out_dtype))"
    assert source.count(asked) == 1
    source = source.replace(asked, ")")
    start, end = source.index("TUNABLES = {"), source.index("}\n", source.index("TUNABLES = {")) + 2
    space = 'TUNABLES = {"block_m": (128, 512, 1024), "block_n": (128, 1024), "block_k": (1024,)}\n'
    kernel = tmp_path / "gemm.py"
    kernel.write_text(source[:start] + space + source[end:])
    monkeypatch.setenv("MAXKERNEL_ESTIMATE", "true")
    get_settings.cache_clear()
    try:
        r = autotune("8p_GEMM", str(kernel), chip="v5e", max_configs=2)
    finally:
        monkeypatch.delenv("MAXKERNEL_ESTIMATE")
        get_settings.cache_clear()
    assert r.ok, r.summary
    assert "estimated" in r.timing_label and "not measured" in r.timing_label
    estimated = {json_key(t.config): t.estimated_ms for t in r.tried if t.estimated_ms is not None}
    assert r.best["config"] == {"block_m": 512, "block_n": 1024, "block_k": 1024}
    assert r.best["estimated_ms"] == min(estimated.values())
    assert estimated[json_key({"block_m": 128, "block_n": 128, "block_k": 1024})] > 3 * r.best["estimated_ms"]
    # 1024 x 1024 x 1024 overflows v5e's scoped VMEM at full size: pruned by the compiler, never estimated or run
    big = next(t for t in r.tried if t.config == {"block_m": 1024, "block_n": 1024, "block_k": 1024})
    assert big.outcome == "pruned" and big.estimated_ms is None
    assert sum(t.outcome == "best" for t in r.tried) == 1


def json_key(cfg: dict) -> str:
    import json

    return json.dumps(cfg, sort_keys=True)
