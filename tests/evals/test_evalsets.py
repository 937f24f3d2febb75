"""The eval sets and their config are what ADK's loaders accept, and the shipped smoke set is the built one."""

import json

import pytest
from google.adk.evaluation.eval_config import get_eval_metrics_from_config, get_evaluation_criteria_or_default
from google.adk.evaluation.eval_set import EvalSet
from google.adk.evaluation.local_eval_sets_manager import load_eval_set_from_file

import jaxbench
from maxkernel.agents.replay.model import recorded_tasks
from maxkernel.evals import evalsets, metrics

pytestmark = pytest.mark.unit


def _texts(eval_set):
    return {c.eval_id: c.conversation[0].user_content.parts[0].text for c in eval_set.eval_cases}


def test_shipped_smoke_set_is_valid_for_adk_and_equals_the_built_one():
    path = evalsets.smoke_eval_set_path()
    strict = EvalSet.model_validate_json(path.read_text())  # the new schema itself, not ADK's old-format fallback
    assert strict == load_eval_set_from_file(str(path), "ignored") == evalsets.named_eval_set("smoke")
    assert strict.eval_set_id == "jaxbench_smoke" and path.name.endswith(".evalset.json")
    assert _texts(strict) == {t: f"optimize {t} smoke" for t in ("8p_GEMM", "12p_RMSNorm")}
    for case in strict.eval_cases:
        assert len(case.conversation) == 1 and case.conversation[0].final_response is None
        assert case.session_input.app_name == "auto"  # the app `adk eval maxkernel/apps/auto` runs


def test_smoke_set_is_what_the_replay_model_can_run_offline():
    # Recordings for ported operators (port_*) drive `maxkernel port`, not the suite's eval sets; the smoke set is the
    # two first recordings (a GEMM and a norm), the other families' recordings are run by `bench agent`.
    suite = [t for t in recorded_tasks() if t in jaxbench.task_names()]
    assert set(evalsets.SMOKE_TASKS) <= set(suite) and len(suite) > len(evalsets.SMOKE_TASKS)


# The suite lists its 17 production-operator tasks (1p..17p) first, then its 33 KernelBench-derived ones (18k..50k).
@pytest.mark.parametrize("name, first, last", [("all", 0, 50), ("p", 0, 17), ("k", 17, 50)])
def test_suite_sets_have_one_case_per_task(name, first, last, tmp_path):
    names = jaxbench.task_names()
    assert len(names) == 50 and names[16] == "17p_Triangle_Multiplication" and names[17] == "18k_Conv2D_ReLU_BiasAdd"
    expected = names[first:last]
    built = evalsets.named_eval_set(name, "full")
    assert [c.eval_id for c in built.eval_cases] == expected
    assert all(text == f"optimize {t} full" for t, text in _texts(built).items())
    path = evalsets.write_eval_set(built, tmp_path / f"{built.eval_set_id}.evalset.json")
    assert EvalSet.model_validate_json(path.read_text()) == built
    assert built.eval_set_id == f"jaxbench_{name}_full"


def test_unknown_tasks_and_sets_are_refused():
    with pytest.raises(ValueError, match="not suite tasks"):
        evalsets.build_eval_set(["99p_Nothing"], size="smoke", eval_set_id="x")
    with pytest.raises(ValueError, match="unknown eval set"):
        evalsets.set_tasks("q")


def test_config_names_the_custom_metrics_adk_can_load():
    path = evalsets.smoke_config_path()
    assert path.name == "test_config.json" and path.parent == evalsets.smoke_eval_set_path().parent
    config = get_evaluation_criteria_or_default(str(path))
    by_name = {m.metric_name: m for m in get_eval_metrics_from_config(config)}
    for name, fn in metrics.METRICS.items():
        assert by_name[name].custom_function_path == f"maxkernel.evals.metrics.{name}"
        from google.adk.evaluation.custom_metric_evaluator import _get_metric_function

        assert _get_metric_function(by_name[name].custom_function_path) is fn
    assert by_name["kernel_correct"].threshold == 1.0
    assert json.loads(path.read_text())["custom_metrics"].keys() == metrics.METRICS.keys()
