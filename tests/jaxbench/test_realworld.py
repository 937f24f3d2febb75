"""The real-world suite (jaxbench/realworld/): production ops beyond JaxBench, each from a named published config,
with a smoke size, FLOPs, several configs where the op has them, and a proof that it cannot be passed by zeros, a
constant, ones or another seed's output (per config)."""

from __future__ import annotations

import ast
import json

import jax
import pytest

import jaxbench
from maxkernel.cli import main
from maxkernel.tasknew.validate import suite_checks
from maxkernel.tasks import load_task

NAMES = jaxbench.task_names("realworld")


@pytest.mark.unit
def test_the_suite_has_at_least_twelve_tasks_apart_from_jaxbench():
    assert len(NAMES) >= 12
    assert not set(NAMES) & set(jaxbench.task_names())
    assert jaxbench.task_names("all") == jaxbench.task_names() + NAMES
    assert all(load_task(n).suite == "realworld" and load_task(n).tier == "rw" for n in NAMES)


@pytest.mark.unit
@pytest.mark.parametrize("name", NAMES)
def test_each_task_names_its_source_and_declares_its_sizes(name):
    task = load_task(name)
    doc = ast.get_docstring(ast.parse(task.baseline_file.read_text())) or ""
    assert task.config.get("model") and task.config.get("operator") and len(doc) > 40, doc
    assert "smoke" in task.sizes and task.seedable
    parallel = getattr(task.module, "PARALLEL_DIMS", ())
    assert set(parallel) <= set(task.config), parallel
    for size in task.sizes:
        assert task.flops(size) and task.flops(size) > 0, size
        shapes = jax.eval_shape(lambda s=size: task.create_inputs(size=s, seed=0))
        assert jax.tree_util.tree_leaves(jax.eval_shape(task.module.workload, *shapes)), size


@pytest.mark.unit
def test_bench_list_shows_the_suite(capsys):
    assert main(["bench", "list", "--suite", "realworld", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == NAMES and {r["suite"] for r in rows} == {"realworld"}
    assert sum(bool(r["configs"]) for r in rows) >= 6  # prefill/decode and the like where the op has them


@pytest.mark.unit
def test_bench_list_text_keeps_configs_out_of_the_kernel_column(capsys):
    assert main(["bench", "list", "--suite", "all"]) == 0
    header, *rows, total = capsys.readouterr().out.splitlines()
    kernel_at, configs_at = header.index("kernel"), header.index("configs")
    by_name = {row.split()[0]: row for row in rows}
    decode = by_name["rw_moe_permute_unpermute"]  # configs, no kernel yet
    assert decode[kernel_at:configs_at].strip() == "-" and decode[configs_at:] == "prefill, decode"
    conv = by_name["rw_causal_conv1d"]  # configs and a kernel
    assert conv[kernel_at:configs_at].strip() == "yes" and conv[configs_at:] == "prefill, decode"
    assert by_name["8p_GEMM"][kernel_at:configs_at].strip() == "yes" and by_name["8p_GEMM"][configs_at:] == "-"


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_each_task_is_non_degenerate_and_its_baseline_within_tolerance_per_config(name):
    checks = suite_checks(load_task(name))  # raises Refused naming the config and the stand-in that passed
    assert all(c.ok for c in checks) and any(c.name.startswith("output non-degenerate") for c in checks)


@pytest.mark.slow
def test_bench_run_times_every_baseline_at_smoke_size(capsys):
    assert main(["bench", "run", "--suite", "realworld", "--all", "--size", "smoke", "--reps", "1",
                 "--no-reference", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in doc["tasks"]] == NAMES
    assert [r["name"] for r in doc["tasks"] if "error" in r] == []
    assert all(r["median_ms"] > 0 for r in doc["tasks"])
