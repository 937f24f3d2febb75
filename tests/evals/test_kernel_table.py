"""`bench kernels`: the shipped kernels' table. A correct kernel and a deliberately wrong one (a task folder in
tmp): the wrong one is shown as not correct and never counted; a kernel whose profile runs out of time is a
could-not-estimate row with its reason, left out of the geomean and tried again on the next run; a finished record
is kept until its kernel changes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RMS = ROOT / "jaxbench" / "12p_RMSNorm"


@pytest.fixture
def settings(monkeypatch, tmp_path):
    from maxkernel.settings import get_settings

    monkeypatch.setenv("MAXKERNEL_CACHE_DIR", str(tmp_path / "cache"))  # estimates made here, not the suite's
    get_settings.cache_clear()
    yield get_settings
    get_settings.cache_clear()


def _wrong_task(tmp_path: Path) -> Path:
    folder = tmp_path / "rms_wrong"
    shutil.copytree(RMS, folder)
    kernel = folder / "kernel.py"
    kernel.write_text(kernel.read_text().replace("(x * lax.rsqrt(", "(2.0 * x * lax.rsqrt(", 1))
    assert kernel.read_text() != (RMS / "kernel.py").read_text()
    return folder


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(1500)
def test_the_table_judges_counts_only_correct_kernels_and_resumes(tmp_path, settings, monkeypatch):
    import maxkernel.harness.verdict.evaluate as evaluate_mod
    from maxkernel.kernel_table import run_table, table_tasks

    out = tmp_path / "table"
    wrong = _wrong_task(tmp_path)
    tasks = table_tasks("jaxbench", ["12p_RMSNorm", str(wrong)])
    judged: list[str] = []
    real_evaluate = evaluate_mod.evaluate

    def counting(task, kernel, **kw):
        judged.append(Path(task).name)
        return real_evaluate(task, kernel, **kw)

    monkeypatch.setattr(evaluate_mod, "evaluate", counting)

    # Run 1: every profile out of time at once, so the correct kernel is a could-not-estimate row.
    monkeypatch.setenv("MAXKERNEL_ESTIMATE_TIMEOUT_S", "0.5")
    settings.cache_clear()
    doc = run_table(tasks, ["v5e"], out)
    rows = {r["task"]: r for r in doc["rows"]}
    good, bad = rows["12p_RMSNorm"], rows["rms_wrong"]
    assert good["correct"] and good["status"] == "correct"
    cell = good["chips"]["v5e"]
    assert cell["compiled"] and cell["speedup"] is None and "did not finish" in cell["error"] and cell["retry"]
    assert not bad["correct"] and bad["status"] == "incorrect" and bad["chips"] == {}
    assert "not compiled or estimated" in bad["note"]
    f = doc["summary"]["by_chip"]["v5e"]["all"]
    assert f["tasks"] == 2 and f["correct"] == 1 and f["fast_0"] == 0.5 and f["fast_1"] == 0.0
    assert f["geomean_speedup"] is None and "did not finish" in f["not_estimated"]["12p_RMSNorm"]
    assert sorted(judged) == ["12p_RMSNorm", "rms_wrong"]

    # Run 2: the could-not-estimate row is tried again (now with time to profile); the wrong one is kept.
    monkeypatch.delenv("MAXKERNEL_ESTIMATE_TIMEOUT_S")
    settings.cache_clear()
    judged.clear()
    doc = run_table(tasks, ["v5e"], out)
    assert judged == ["12p_RMSNorm"]
    rows = {r["task"]: r for r in doc["rows"]}
    cell = rows["12p_RMSNorm"]["chips"]["v5e"]
    assert cell["speedup"] and cell["kernel_ms"] and cell["baseline_ms"] and not cell["retry"], cell
    assert cell["speedup"] == pytest.approx(cell["baseline_ms"] / cell["kernel_ms"])
    assert rows["rms_wrong"].get("resumed") and not rows["rms_wrong"]["correct"]
    f = doc["summary"]["by_chip"]["v5e"]["all"]
    assert f["estimated"] == 1 and f["geomean_speedup"] == pytest.approx(cell["speedup"])  # the wrong one not in it
    assert f["fast_1"] == (0.5 if cell["speedup"] > 1 else 0.0)

    # Run 3: nothing changed, nothing redone; then the wrong kernel changes and only it is judged again.
    judged.clear()
    run_table(tasks, ["v5e"], out)
    assert judged == []
    (wrong / "kernel.py").write_text((wrong / "kernel.py").read_text() + "\n# edited\n")
    doc = run_table(tasks, ["v5e"], out)
    assert judged == ["rms_wrong"]

    # The files: one JSON document, a Markdown table, a plot; `report` renders the same figures.
    saved = json.loads((out / "kernels.json").read_text())
    assert saved["summary"] == doc["summary"] and (out / "kernels.png").stat().st_size > 0
    md = (out / "kernels.md").read_text()
    assert "| 12p_RMSNorm | CORRECT |" in md and "| rms_wrong | INCORRECT |" in md and "fast_p by estimate" in md
    from maxkernel.kernel_table import render_table

    assert render_table(out)["summary"] == doc["summary"]


@pytest.mark.unit
def test_the_command_refuses_a_task_without_a_kernel_and_a_chip_that_is_not_a_tpu(capsys, tmp_path):
    from maxkernel.cli import main

    bare = tmp_path / "rms_bare"  # a task folder that ships no kernel (every suite task may ship one)
    shutil.copytree(RMS, bare)
    (bare / "kernel.py").unlink()
    assert main(["bench", "kernels", "--task", str(bare)]) == 2
    assert "ships no kernel.py" in capsys.readouterr().err
    assert main(["bench", "kernels", "--task", "8p_GEMM", "--chip", "h100"]) == 2
    assert "TPU" in capsys.readouterr().err


@pytest.mark.unit
def test_the_summary_counts_correct_estimated_kernels_per_chip():
    from maxkernel.kernel_table import summarize_table

    rows = [{"task": "a", "suite": "jaxbench", "correct": True, "chips": {"v5e": {"speedup": 2.5}, "v6e": {"speedup": 0.5}}},
            {"task": "b", "suite": "jaxbench", "correct": True, "chips": {"v5e": {"speedup": 1.2},
                                                                         "v6e": {"speedup": None, "error": "libtpu aborted"}}},
            {"task": "c", "suite": "jaxbench", "correct": False, "chips": {}}]
    s = summarize_table(rows, ["v5e", "v6e"])
    v5e, v6e = s["by_chip"]["v5e"]["all"], s["by_chip"]["v6e"]["all"]
    assert v5e["fast_0"] == pytest.approx(2 / 3) and v5e["fast_1"] == pytest.approx(2 / 3)
    assert v5e["fast_2"] == pytest.approx(1 / 3) and v5e["geomean_speedup"] == pytest.approx((2.5 * 1.2) ** 0.5)
    assert v6e["fast_1"] == 0 and v6e["geomean_speedup"] == pytest.approx(0.5) and v6e["slower_than_xla"] == ["a"]
    assert v6e["not_estimated"] == {"b": "libtpu aborted"}


@pytest.mark.unit
def test_a_harness_failure_on_one_task_costs_its_row_not_the_table(tmp_path, monkeypatch):
    """A sloppy kernel or a broken reference may make the harness raise: that task's row says so and is tried
    again on the next run; the other tasks' rows and the table's files are still written."""
    import maxkernel.kernel_table as kt

    tasks = kt.table_tasks("jaxbench", ["12p_RMSNorm", "8p_GEMM"])
    calls = []

    def row(task, chips, key, progress):
        calls.append(task.name)
        if task.name == "12p_RMSNorm":
            raise RuntimeError("reference for 12p_RMSNorm (smoke) failed: crashed")
        return {"task": task.name, "suite": task.suite, "tier": task.tier, "kernel": "k", "key": key, "label": kt.LABEL,
                "status": "incorrect", "correct": False, "reason": "wrong", "chips": {}}

    monkeypatch.setattr(kt, "_row", row)
    monkeypatch.setattr(kt, "_plot", lambda *a: None)
    doc = kt.run_table(tasks, ["v5e"], tmp_path)
    rows = {r["task"]: r for r in doc["rows"]}
    assert rows["12p_RMSNorm"]["status"] == "error" and "crashed" in rows["12p_RMSNorm"]["reason"]
    assert rows["8p_GEMM"]["status"] == "incorrect" and (tmp_path / "kernels.md").is_file()
    calls.clear()
    kt.run_table(tasks, ["v5e"], tmp_path)
    assert calls == ["12p_RMSNorm"]  # the failed row is tried again; the finished one is kept


@pytest.mark.unit
def test_a_run_over_some_tasks_keeps_the_other_recorded_rows_in_the_table(tmp_path, monkeypatch):
    """Met writing the library: `bench kernels --task 8p_GEMM --out benchmarks/results/kernels` rewrote the
    committed 35-row table as a 1-row one (the records stayed, the table and fast_p did not). The folder's table is
    every task recorded in it for the chips; a record made for other chips is not."""
    import maxkernel.kernel_table as kt

    def row(task, chips, key, progress):
        return {"task": task.name, "suite": task.suite, "tier": task.tier, "kernel": "k", "key": key, "label": kt.LABEL,
                "status": "correct", "correct": True, "reason": "ok",
                "chips": {c: {"speedup": 1.5 if task.name == "12p_RMSNorm" else 0.5} for c in chips}}

    monkeypatch.setattr(kt, "_row", row)
    monkeypatch.setattr(kt, "_plot", lambda *a: None)
    kt.run_table(kt.table_tasks("jaxbench", ["12p_RMSNorm", "8p_GEMM"]), ["v5e"], tmp_path)
    kt.run_table(kt.table_tasks("jaxbench", ["1p_Flash_Attention"]), ["v6e"], tmp_path)  # another chip: not in it
    (tmp_path / "records" / "8p_GEMM.json").unlink()
    (tmp_path / "records" / "half.json").write_text('{"task": "half", "chi')  # a record cut short: skipped
    lines: list[str] = []
    doc = kt.run_table(kt.table_tasks("jaxbench", ["8p_GEMM"]), ["v5e"], tmp_path, progress=lines.append)
    assert [r["task"] for r in doc["rows"]] == ["12p_RMSNorm", "8p_GEMM"]
    assert doc["summary"]["by_chip"]["v5e"]["all"]["geomean_speedup"] == pytest.approx((1.5 * 0.5) ** 0.5)
    md = (tmp_path / "kernels.md").read_text()
    assert "| 12p_RMSNorm | CORRECT |" in md and "1p_Flash_Attention" not in md
    assert any("1 kept from earlier records" in line for line in lines)
    assert kt.render_table(tmp_path)["summary"] == doc["summary"]


@pytest.mark.unit
def test_an_under_priced_program_is_named_in_its_rows_notes():
    from maxkernel.kernel_table import _markdown, summarize_table

    def row(task, limits):
        return {"task": task, "suite": "jaxbench", "correct": True, "status": "correct",
                "chips": {"v6e": {"speedup": 0.9, "configs": {"full": {"limits": limits}}}}}

    rows = [row("b", ["baseline: under-priced: its static profile (0.5 ms) is below the task's FLOP floor"]),
            row("k", ["under-priced: its static profile is below the task's FLOP floor"]),
            row("h", ["baseline: ops inside while loops priced once per trip"])]
    md = _markdown(rows, summarize_table(rows, ["v6e"]), ["v6e"]).splitlines()
    line = {r["task"]: next(x for x in md if x.startswith(f"| {r['task']} |")) for r in rows}
    assert "v6e: XLA baseline under-priced" in line["b"] and "v6e: kernel under-priced" not in line["b"]
    assert "v6e: kernel under-priced" in line["k"] and "under-priced" not in line["h"]


@pytest.mark.unit
def test_a_baseline_scaled_from_its_largest_size_is_named_in_its_rows_notes():
    """9p's XLA baseline on v6e: shrunk by its tokens it streamed all its weights at every profiled size, its cycles
    did not grow with the work, and it was scaled from the largest size to 127 ms against a 12.6 ms floor."""
    from maxkernel.kernel_table import _markdown, summarize_table

    limits = ["baseline: cycles do not grow linearly with the work over the profiled sizes: scaled in proportion "
              "from the largest"]
    rows = [{"task": "9p", "suite": "jaxbench", "status": "correct", "correct": True,
             "chips": {"v6e": {"speedup": 8.5, "configs": {"full": {"limits": limits}}}}}]
    md = _markdown(rows, summarize_table(rows, ["v6e"]), ["v6e"])
    assert "v6e: XLA baseline scaled in proportion from its largest profiled size, not fitted" in md
    rows[0]["chips"]["v6e"]["configs"]["full"]["limits"] = []
    assert "scaled in proportion" not in _markdown(rows, summarize_table(rows, ["v6e"]), ["v6e"])


@pytest.mark.unit
def test_a_speedup_priced_by_scaling_or_at_the_kernels_floor_is_not_counted_in_fast_p():
    """9p's v6e 8.5x stood on a baseline scaled from one size (127 ms against a 12.6 ms floor) and counted in the
    summary's fast_2: a speedup that rough is listed apart, the task counted as not fast. A kernel priced at its
    floor (its profile missed work) is not counted either; a baseline priced at its floor only understates the
    kernel's speedup, and counts."""
    from maxkernel.kernel_table import _markdown, summarize_table

    scaled = ["baseline: cycles do not grow linearly with the work over the profiled sizes: scaled in proportion "
              "from the largest"]

    def row(task, speedup, limits):
        return {"task": task, "suite": "jaxbench", "status": "correct", "correct": True,
                "chips": {"v6e": {"speedup": speedup, "configs": {"full": {"limits": limits}}}}}

    rows = [row("9p", 8.5, scaled), row("fair", 1.5, []),
            row("floored_kernel", 3.0, ["under-priced: its static profile is below the task's FLOP floor"]),
            row("floored_base", 1.2, ["baseline: under-priced: its static profile is below the task's FLOP floor"])]
    f = summarize_table(rows, ["v6e"])["by_chip"]["v6e"]["all"]
    assert set(f["rough"]) == {"9p", "floored_kernel"} and "XLA baseline scaled" in f["rough"]["9p"]
    assert f["fast_2"] == 0 and f["fast_1"] == pytest.approx(2 / 4)
    assert f["estimated"] == 2 and f["geomean_speedup"] == pytest.approx((1.5 * 1.2) ** 0.5)
    assert "9p" not in f["not_estimated"]
    assert "too rough to rank" in _markdown(rows, summarize_table(rows, ["v6e"]), ["v6e"])

    # Against the expert too: 11p's kernel, whose work the profile cannot see, priced at its floor beside an expert
    # at its own: their ratio of two floors is left out and listed.
    expert = {"correct": True, "status": "correct", "library": "megablox.gmm"}
    floored = {"task": "11p", "suite": "jaxbench", "status": "correct", "correct": True, "expert": expert,
               "chips": {"v6e": {"speedup_vs_expert": 1.0, "configs": {"full": {"limits": [
                   "under-priced: its static profile is below the task's FLOP floor"]}}}}}
    vs = summarize_table([floored, {**floored, "task": "fair", "chips": {"v6e": {"speedup_vs_expert": 1.2}}}],
                         ["v6e"])["by_chip"]["v6e"]["all"]["vs_expert"]
    assert set(vs["rough"]) == {"11p"} and vs["estimated"] == 1 and vs["geomean_speedup"] == pytest.approx(1.2)


@pytest.mark.unit
def test_a_degenerate_row_is_listed_and_counted_in_no_figure():
    from maxkernel.kernel_table import _markdown, summarize_table

    rows = [{"task": "a", "suite": "jaxbench", "correct": True, "status": "correct",
             "chips": {"v5e": {"speedup": 1.5}}},
            {"task": "d", "suite": "jaxbench", "correct": True, "status": "correct", "degenerate": "a matvec",
             "chips": {"v5e": {"speedup": 40.0}}}]
    s = summarize_table(rows, ["v5e"])
    f = s["by_chip"]["v5e"]["all"]
    assert (f["tasks"], f["estimated"], f["geomean_speedup"]) == (1, 1, pytest.approx(1.5))
    assert s["degenerate"] == {"d": "a matvec"}
    md = _markdown(rows, s, ["v5e"])
    assert "degenerate task, left out of fast_p: a matvec" in md and "Left out of fast_p as degenerate" in md
    only = summarize_table(rows[1:], ["v5e"])  # nothing left to count: figures are empty, not a crash
    assert only["by_chip"]["v5e"]["all"]["fast_1"] is None and "| — |" in _markdown(rows[1:], only, ["v5e"])


@pytest.mark.unit
@pytest.mark.parametrize("name", ["21k_Gemm_Divide_Sum_Scaling", "23k_Matmul_Sum_Max_AvgPool_LogSumExp_LogSumExp"])
def test_the_tasks_marked_degenerate_do_collapse_to_a_matvec(name):
    """The mark is a claim about the task's math: check it on the task's own inputs (two seeds), so a redefinition
    that makes the work needed again must also drop the mark."""
    import jax.numpy as jnp
    import numpy as np

    from maxkernel.tasks import load_task

    task = load_task(name)
    assert task.degenerate
    for seed in (0, 1):
        inputs = task.module.create_inputs(size="smoke", seed=seed)
        x, w = (a.astype(jnp.float32) for a in inputs[:2])
        matvec = x @ jnp.sum(w, axis=0)[:, None] + (jnp.sum(inputs[2].astype(jnp.float32)) if len(inputs) > 2 else 0)
        scale = task.module.CONFIG.get("scaling_factor", 1.0) / task.module.CONFIG.get("divisor", 1.0)
        ref = np.asarray(task.module.workload(*inputs), np.float32)
        np.testing.assert_allclose(ref, np.asarray(matvec * scale), rtol=2e-2, atol=2e-2 * float(np.abs(ref).max()))
    assert load_task("36k_Matmul_Sigmoid_Sum").degenerate == ""  # a nonlinearity before the sum: real work


@pytest.mark.unit
def test_49k_is_marked_degenerate_because_its_pool_folds_into_the_weights():
    """avgpool(x @ w.T + b) = x @ pool(w).T + pool(b): the stated GEMM has 16 times fewer columns. Checked on the
    task's own inputs, so a redefinition that makes the full GEMM needed again must also drop the mark."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from maxkernel.tasks import load_task

    task = load_task("49k_Matmul_AvgPool_GELU_Scale_Max")
    assert "16 times fewer" in task.degenerate
    cfg = task.module.CONFIG
    pool = cfg["pool_kernel_size"]
    for seed in (0, 1):
        x, w, b = task.module.create_inputs(size="smoke", seed=seed)
        w_pooled = jnp.mean(w.astype(jnp.float32).reshape(-1, pool, w.shape[1]), axis=1)
        b_pooled = jnp.mean(b.astype(jnp.float32).reshape(-1, pool), axis=1)
        z = x.astype(jnp.float32) @ w_pooled.T + b_pooled
        folded = jnp.max(jax.nn.gelu(z, approximate=False) * cfg["scale_factor"], axis=1)
        ref = np.asarray(task.module.workload(x, w, b), np.float32)
        np.testing.assert_allclose(ref, np.asarray(folded), rtol=2e-2, atol=2e-2)


@pytest.mark.unit
def test_a_baseline_whose_profile_ran_out_of_time_is_tried_again(monkeypatch):
    """Met on a loaded machine (43k): the kernel priced, XLA's baseline profile did not finish. That says nothing of
    either program, so the row is tried again on the next run instead of being kept without a speedup."""
    from types import SimpleNamespace

    import maxkernel.harness.estimate.estimator as estimate_mod
    from maxkernel.kernel_table import _chip_cell
    from maxkernel.tasks import load_task

    base = SimpleNamespace(ok=False, error="the profiling process died; retried: the profile did not finish within "
                                           "900 s", stage="profile")
    est = SimpleNamespace(ok=True, error=None, summary="", stage=None, fit={"fingerprints": []}, speedup_estimate=None,
                          baseline=base, estimated_ms=1.0, baseline_estimated_ms=None, bound="compute",
                          fraction_of_roofline=0.9, roofline_ms=0.9, own_floor_ms=0.9, data_dependent=False, limits=[])
    monkeypatch.setattr(estimate_mod, "estimate", lambda *a, **k: est)
    verdict = SimpleNamespace(integrity={"fingerprints": {}})
    compiled = {("v5e", "full"): SimpleNamespace(ok=True, vmem_bytes=1, vmem_limit_bytes=2, stage="ok", summary="")}
    task = load_task("12p_RMSNorm")
    cell = _chip_cell(task, task.path / "kernel.py", verdict, "v5e", ["full"], compiled)
    assert cell["speedup"] is None and "did not finish" in cell["error"] and cell["retry"], cell
    base.error = "libtpu aborted: unsupported op"  # a failure of the program itself is kept
    assert not _chip_cell(task, task.path / "kernel.py", verdict, "v5e", ["full"], compiled)["retry"]


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(900)
def test_the_table_on_ray_makes_the_local_backends_records(tmp_path, settings, monkeypatch):
    """Each row a Ray task on a real local cluster: the same records as the local backend (a correct kernel whose
    profile ran out of time, a wrong one never compiled), each saying which process made it; then resumed."""
    import os

    from _extras import need_module

    from maxkernel.kernel_table import run_table, table_tasks

    need_module("ray", extra="ray")
    monkeypatch.setenv("MAXKERNEL_ESTIMATE_TIMEOUT_S", "0.5")  # every profile out of time: rows without figures
    settings.cache_clear()
    tasks = table_tasks("jaxbench", ["12p_RMSNorm", str(_wrong_task(tmp_path))])
    local = run_table(tasks, ["v5e"], tmp_path / "local")
    lines = []
    ray = run_table(tasks, ["v5e"], tmp_path / "ray", progress=lines.append, backend="ray", concurrency=2)
    run_fields = {"seeds", "wall_s", "ran_on", "max_rel_err", "reason"}
    for ours, theirs in zip(ray["rows"], local["rows"]):
        assert ours["task"] == theirs["task"] and set(ours) == set(theirs)
        assert {k: v for k, v in ours.items() if k not in run_fields} == \
            {k: v for k, v in theirs.items() if k not in run_fields}, ours["task"]
        assert ours["ran_on"]["backend"] == "ray" and ours["ran_on"]["pid"] != os.getpid()
        assert theirs["ran_on"] == {**theirs["ran_on"], "backend": "local", "pid": os.getpid()}
    assert [r["status"] for r in ray["rows"]] == ["correct", "incorrect"]
    assert any(line.endswith("rms_wrong (as a Ray task)") for line in lines)
    assert ray["summary"] == local["summary"]
    again = run_table(tasks[1:], ["v5e"], tmp_path / "ray", backend="ray")  # 12p, out of time, would be retried
    kept = {r["task"]: r for r in again["rows"]}  # 12p stays in the folder's table from its earlier record
    assert kept["rms_wrong"]["resumed"] and kept["rms_wrong"]["ran_on"] == ray["rows"][1]["ran_on"]
    assert set(kept) == {"12p_RMSNorm", "rms_wrong"}


@pytest.mark.unit
def test_the_kernel_is_ranked_against_the_expert_beside_xla():
    """Issue 34: a task with an expert baseline gets the kernel's estimated speedup over it per chip, fast_p against
    the experts over the tasks that have one, and a wrong expert is listed with its verdict and ranks nothing."""
    from maxkernel.kernel_table import _markdown, expert_line, summarize_table

    expert = {"correct": True, "status": "correct", "library": "jax.experimental.pallas.ops.tpu.flash_attention"}
    rows = [{"task": "a", "suite": "jaxbench", "status": "correct", "correct": True, "expert": expert,
             "chips": {"v5e": {"speedup": 2.0, "expert_ms": 3.0, "kernel_ms": 2.0, "speedup_vs_expert": 1.5}}},
            {"task": "b", "suite": "jaxbench", "status": "correct", "correct": True,
             "expert": {"correct": False, "status": "incorrect", "reason": "exceeds tolerance", "library": "x.y"},
             "chips": {"v5e": {"speedup": 1.1}}},
            {"task": "c", "suite": "jaxbench", "status": "correct", "correct": True, "chips": {"v5e": {"speedup": 0.9}}}]
    s = summarize_table(rows, ["v5e"])
    vs = s["by_chip"]["v5e"]["all"]["vs_expert"]
    assert vs["tasks"] == 2 and vs["experts_correct"] == 1 and vs["estimated"] == 1
    assert vs["fast_0"] == 1.0 and vs["fast_1"] == 0.5 and vs["fast_1.5"] == 0 and vs["geomean_speedup"] == 1.5
    assert vs["experts_not_correct"] == {"b": "incorrect: exceeds tolerance"}
    assert s["by_chip"]["v5e"]["all"]["fast_1"] == pytest.approx(2 / 3)  # vs XLA: unchanged by the experts
    md = _markdown(rows, s, ["v5e"])
    assert "v5e expert ms | v5e vs expert" in md and "| 3 | 1.50x |" in md
    assert "judged incorrect: exceeds tolerance" in md and "fast_p by estimate against the expert" in md
    assert "2 tasks with an expert (1 judged correct)" in expert_line("v5e", vs)
    plain = [{k: v for k, v in r.items() if k != "expert"} for r in rows]  # no expert anywhere: no expert columns
    assert "expert" not in _markdown(plain, summarize_table(plain, ["v5e"]), ["v5e"])
    assert expert_line("v5e", summarize_table(plain, ["v5e"])["by_chip"]["v5e"]["all"]["vs_expert"]) is None


@pytest.mark.unit
def test_the_experts_estimate_is_tied_to_its_verdict_and_divides_the_kernels(monkeypatch):
    from types import SimpleNamespace

    import maxkernel.harness.estimate.estimator as estimate_mod
    from maxkernel.kernel_table import _expert_cell
    from maxkernel.tasks import load_task

    est = SimpleNamespace(ok=True, error=None, summary="", stage=None, fit={"fingerprints": []}, estimated_ms=6.0,
                          bound="compute", fraction_of_roofline=0.5, limits=[])
    monkeypatch.setattr(estimate_mod, "estimate", lambda *a, **k: est)
    monkeypatch.setattr("maxkernel.harness.verdict.integrity.priced_differs", lambda *a: None)
    task = load_task("1p_Flash_Attention")
    compiled = {("v5e", "full"): SimpleNamespace(ok=True, stage="ok", summary="")}
    mine = {"configs": {"full": {"ok": True, "kernel_ms": 2.0}}}
    verdict = SimpleNamespace(integrity={"fingerprints": {}})
    cell = _expert_cell(task, task.path / "expert.py", verdict, "v5e", ["full"], compiled, mine)
    assert cell["ms"] == 6.0 and cell["speedup_vs_expert"] == pytest.approx(3.0) and not cell["retry"]
    # XLA's baseline not priced (14p on v6e: its profile ran out of time): the kernel and the expert still compare
    mine_alone = {"configs": {"full": {"ok": False, "kernel_ms": 2.0, "not_the_checked_program": None}}}
    cell = _expert_cell(task, task.path / "expert.py", verdict, "v5e", ["full"], compiled, mine_alone)
    assert cell["speedup_vs_expert"] == pytest.approx(3.0)
    from maxkernel.kernel_table import vs_expert

    assert vs_expert({"expert_ms": 6.0, "configs": {"full": {"kernel_ms": 2.0}}}) == pytest.approx(3.0)
    assert vs_expert({"expert_ms": 6.0, "configs": {"full": {"kernel_ms": 2.0, "not_the_checked_program": "x"}}}) is None
    monkeypatch.setattr("maxkernel.harness.verdict.integrity.priced_differs", lambda *a: "its kernels differ")
    cell = _expert_cell(task, task.path / "expert.py", verdict, "v5e", ["full"], compiled, mine)
    assert cell["speedup_vs_expert"] is None and "not the one checked" in cell["error"]
    compiled[("v5e", "full")] = SimpleNamespace(ok=False, stage="compile", summary="VMEM exceeded")
    cell = _expert_cell(task, task.path / "expert.py", verdict, "v5e", ["full"], compiled, mine)
    assert cell["speedup_vs_expert"] is None and "does not compile" in cell["error"]


@pytest.mark.unit
def test_each_config_of_the_tasks_with_several_is_summarized_apart():
    """Issue 35: decode reported apart from prefill. A task's row holds the geomean of its configs, which hides a
    config XLA handles worse; per config name, fast_p and the geomean of that config's own speedups."""
    from maxkernel.kernel_table import _markdown, summarize_table

    def cell(prefill, decode, decode_limits=()):
        return {"v5e": {"speedup": None, "configs": {
            "full": {"ok": True, "speedup": prefill, "limits": []},
            "full@decode": {"ok": decode is not None, "speedup": decode, "limits": list(decode_limits)}}}}

    scaled = ["cycles do not grow linearly with the work over the profiled sizes: scaled in proportion"]
    rows = [{"task": "rw_w8a8_int8_matmul", "suite": "realworld", "status": "correct", "correct": True,
             "chips": cell(1.2, 2.0)},
            {"task": "rw_fp8_matmul", "suite": "realworld", "status": "correct", "correct": True,
             "chips": cell(0.9, 3.0, scaled)},
            {"task": "rw_causal_conv1d", "suite": "realworld", "status": "incorrect", "correct": False, "chips": {}},
            {"task": "12p_RMSNorm", "suite": "jaxbench", "status": "correct", "correct": True,
             "chips": {"v5e": {"speedup": 1.1, "configs": {"full": {"ok": True, "speedup": 1.1, "limits": []}}}}}]
    s = summarize_table(rows, ["v5e"])
    pre, dec = s["by_config"]["v5e"]["prefill"], s["by_config"]["v5e"]["decode"]
    assert pre["tasks"] == dec["tasks"] == 3  # 12p has one config: not here; the incorrect task counts, as not fast
    assert pre["fast_1"] == pytest.approx(1 / 3) and pre["geomean_speedup"] == pytest.approx((1.2 * 0.9) ** 0.5)
    assert dec["fast_0"] == pytest.approx(1 / 3) and dec["fast_1"] == pytest.approx(1 / 3)  # fp8's decode is rough
    assert dec["geomean_speedup"] == pytest.approx(2.0) and dec["estimated"] == 1
    assert "| v5e | decode | 3 | 33% | 33% |" in _markdown(rows, s, ["v5e"])


@pytest.mark.unit
def test_a_second_table_on_the_same_folder_is_refused_while_the_first_runs(tmp_path):
    """Two `bench kernels` on one --out wrote each other's records: a row one judged INCORRECT was replaced by the
    other's, its reason lost. The second is refused at once, naming the first; the folder is free again after."""
    import fcntl
    import os

    from maxkernel.kernel_table import RECORDS, TableError, run_table

    (tmp_path / RECORDS).mkdir()
    with open(tmp_path / ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242")
        held.flush()
        with pytest.raises(TableError, match=r"another `bench kernels` \(pid 4242\) is writing to"):
            run_table([], ["v5e"], tmp_path)
    doc = run_table([], ["v5e"], tmp_path)  # free again: an empty table is made
    assert doc["rows"] == [] and os.path.exists(tmp_path / ".lock")
