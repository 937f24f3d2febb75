"""The CLI's shared parts: sizes read without importing a task, completion, progress, JSON documents."""

from __future__ import annotations

import json

import pytest
from click.shell_completion import BashComplete

import jaxbench
from maxkernel.cli import cli, main
from maxkernel.cli._common import declared_sizes, preflight, track
from maxkernel.tasks import load_task

pytestmark = pytest.mark.unit


def test_declared_sizes_agree_with_the_imported_task_for_every_suite_task():
    for name in jaxbench.task_names():
        task = load_task(name)
        assert declared_sizes(task) == task.sizes, name


def test_declared_sizes_without_a_literal_falls_back_to_none(tmp_path):
    (tmp_path / "baseline.py").write_text("SIZES = dict(smoke={})\ndef create_inputs(): pass\ndef workload(): pass\n")
    assert declared_sizes(load_task(tmp_path)) is None
    (tmp_path / "baseline.py").write_text("def create_inputs(): pass\ndef workload(): pass\n")
    assert declared_sizes(load_task(tmp_path)) == ["full"]


def test_preflight_returns_the_checked_target(tmp_path):
    kernel = tmp_path / "k.py"
    kernel.write_text("def workload(*a): pass\n")
    t = preflight("8p_GEMM", str(kernel), "smoke", "V5E")
    assert (t.task.name, t.kernel, t.size, t.chip) == ("8p_GEMM", kernel, "smoke", "v5e")
    assert preflight("8p_GEMM", str(kernel), "full", "native").chip == "native"


def test_a_config_of_a_task_is_a_size_the_commands_take(tmp_path):
    """rw_fp8_matmul's decode config runs at full@decode: compile and estimate reached only its first config
    (prefill), and --size refused the other's name."""
    from maxkernel.cli._common import UsageError

    kernel = tmp_path / "k.py"
    kernel.write_text("def workload(*a): pass\n")
    assert preflight("rw_fp8_matmul", str(kernel), "full@decode", "v5e").size == "full@decode"
    with pytest.raises(UsageError, match="has no size 'full@nope' .*full@decode"):
        preflight("rw_fp8_matmul", str(kernel), "full@nope", "v5e")
    with pytest.raises(UsageError, match="has no size 'big' .*smoke@decode"):
        preflight("rw_fp8_matmul", str(kernel), "big", "v5e")


def _complete(args, incomplete):
    return [c.value for c in BashComplete(cli, {}, "maxkernel", "_MAXKERNEL_COMPLETE").get_completions(args, incomplete)]


def test_completion_offers_commands_tasks_and_chips(capsys):
    assert {"evaluate", "compile", "search", "bench"} <= set(_complete([], ""))
    assert _complete(["compile", "--task"], "8p_") == ["8p_GEMM"]
    assert _complete(["compile", "--task", "8p_GEMM", "--chip"], "v5") == ["v5e", "v5p"]
    assert main(["completion", "bash"]) == 0
    assert "_MAXKERNEL_COMPLETE=bash_complete" in capsys.readouterr().out


def test_track_prints_numbered_lines_off_a_terminal(capsys):
    assert list(track(["a", "b"], 2, lambda x: f"task {x}")) == ["a", "b"]
    out, err = capsys.readouterr()
    assert out == "" and err == "[1/2] task a\n[2/2] task b\n"


def test_bench_list_json_is_the_contract(capsys):
    assert main(["bench", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 50 and {"name", "tier", "source", "fits_chips"} <= set(rows[0])
    assert sum(r["tier"] == "p" for r in rows) == 17 and {r["tier"] for r in rows} == {"p", "k"}
    # Each task names the TPU chips its full size fits; without FITS_CHIPS, all of tasks.FULL_SIZE_CHIPS.
    assert all(r["fits_chips"] and set(r["fits_chips"]) <= {"v4", "v5e", "v5p", "v6e", "7x"} for r in rows)
    assert next(r for r in rows if r["name"] == "1p_Flash_Attention")["fits_chips"] == ["v4", "v5e", "v5p", "v6e"]


def test_set_runs_a_private_copy_with_the_default_changed_and_refuses_unknown_names(tmp_path):
    from maxkernel.cli._common import UsageError, with_tunables

    kernel = tmp_path / "k.py"
    text = "TUNABLES = {'block_m': (8, 16)}\n\ndef workload(x, *, block_m=16, name='a'):\n    return x  # block_m=16\n"
    kernel.write_text(text)
    t = with_tunables(preflight("8p_GEMM", str(kernel), "smoke"), ("block_m=8", "name=b c"))
    assert t.tunables == {"block_m": 8, "name": "b c"} and t.source == kernel and t.kernel != kernel
    assert t.kernel.read_text() == text.replace("block_m=16,", "block_m=8,").replace("name='a'", "name='b c'")
    assert kernel.read_text() == text  # the user's file is never edited
    for bad, said in (("block_n=8", "no keyword default for block_n"), ("block_m", "NAME=VALUE"),
                      ("=3", "NAME=VALUE")):
        with pytest.raises(UsageError, match=said):
            with_tunables(preflight("8p_GEMM", str(kernel), "smoke"), (bad,))



def test_estimate_help_names_its_limits_with_their_defaults():
    """A profile that timed out sent a user to MAXKERNEL_ESTIMATE_TIMEOUT_S, which no --help named."""
    from click.testing import CliRunner

    from maxkernel.settings import Settings

    text = " ".join(CliRunner().invoke(cli, ["estimate", "--help"]).output.split())
    for name, field in (("TIMEOUT_S", "estimate_timeout_s"), ("MAX_GFLOP", "estimate_max_gflop"),
                        ("MAX_MB", "estimate_max_mb")):
        assert f"MAXKERNEL_ESTIMATE_{name} (" in text
        assert f"{Settings.model_fields[field].default:g}" in text.split(f"MAXKERNEL_ESTIMATE_{name} (")[1][:20]


def test_evaluate_prints_a_verdict_with_a_config_lacking_a_speedup(monkeypatch, tmp_path):
    """rw_rglru_scan: prefill correct, decode rejected; the combined verdict has timings but no speedup (a geomean
    over a missing one), and `evaluate` died printing it (NoneType.__format__) with nothing on stdout."""
    from click.testing import CliRunner

    from maxkernel.harness.verdict import evaluate as ev
    from maxkernel.harness.verdict.result import Correctness, Timing, Verdict

    kernel = tmp_path / "k.py"
    kernel.write_text("def workload(*a): pass\n")
    verdict = Verdict(task="rw_rglru_scan", kernel_file=str(kernel), size="smoke", status="rejected", reason="r",
                      correctness=Correctness(max_rel_err=0.003, tolerance=None, seeds=[4]),
                      kernel=Timing.of([1.0]), baseline=Timing.of([2.0]), speedup=None,
                      configs={"prefill": {"size": "smoke", "status": "correct", "reason": "", "speedup": 2.0},
                               "decode": {"size": "smoke@decode", "status": "rejected", "reason": "too fast"}})
    monkeypatch.setattr(ev, "evaluate", lambda *a, **k: verdict)
    got = CliRunner().invoke(cli, ["evaluate", "--task", "rw_rglru_scan", "--kernel", str(kernel)])
    assert got.exit_code == 1 and "internal error" not in got.output, got.output
    assert "config decode (smoke@decode): rejected: too fast" in got.output and "baseline 2.000 ms" in got.output
