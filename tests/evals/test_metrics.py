"""The custom ADK metrics re-judge the kernel an agent answered with, through the real sandboxed harness."""

from pathlib import Path

import pytest
from _extras import need_module
from google.adk.evaluation.eval_config import get_eval_metrics_from_config, get_evaluation_criteria_or_default
from google.adk.evaluation.eval_metrics import BaseCriterion, EvalMetric, EvalStatus
from google.adk.evaluation.evaluation_generator import EvaluationGenerator
from google.adk.events import Event
from google.genai import types

from maxkernel.evals import metrics
from maxkernel.evals.evalsets import smoke_config_path
from maxkernel.evals.judging import heldout_seeds, judge_kernel
from maxkernel.settings import get_settings
from maxkernel.tasks import load_task

pytestmark = pytest.mark.integration

KERNELS = Path(__file__).resolve().parents[1] / "harness" / "kernels"


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """`put(kernel)` copies a kernel where an agent session writes its kernels (the metrics judge nothing else)."""
    monkeypatch.setenv("MAXKERNEL_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()

    def put(source: Path) -> Path:
        dest = tmp_path / "data" / "workspaces" / source.stem / "best_kernel.py"
        dest.parent.mkdir(parents=True)
        dest.write_bytes(source.read_bytes())
        return dest

    yield put
    monkeypatch.undo()
    get_settings.cache_clear()


def invocations(request: str, *answers: str):
    """Invocations as ADK builds them from a run's events: the user turn, progress, then the final answer."""
    events = [Event(author="user", invocation_id="inv-1",
                    content=types.Content(role="user", parts=[types.Part(text=request)]))]
    events += [Event(author="maxkernel_auto", invocation_id="inv-1",
                     content=types.Content(role="model", parts=[types.Part(text=a)])) for a in answers]
    return EvaluationGenerator.convert_events_to_eval_invocations(events)


def answer(kernel) -> str:
    return (f"Done (iteration budget (1) used). Best kernel: {kernel} from iteration 1, re-judged on held-out "
            f"seeds [7919, 7920, 7921]: CORRECT — matches the reference")


def metric(name: str, threshold: float) -> EvalMetric:
    return EvalMetric(metric_name=name, criterion=BaseCriterion(threshold=threshold))


async def scores(invs) -> dict:
    out = {}
    for name, fn in metrics.METRICS.items():
        r = await fn(metric(name, 1.0 if name == "kernel_correct" else 0.0), invs, None, None)
        assert len(r.per_invocation_results) == len(invs)
        out[name] = (r.overall_score, r.overall_eval_status)
    return out


async def test_a_correct_kernel_passes_and_reports_its_speedups(workspace):
    good = workspace(KERNELS / "rmsnorm_rows.py")
    invs = invocations("optimize 12p_RMSNorm smoke", "Iteration 1: planning.", answer(good))
    s = await scores(invs)
    assert s["kernel_correct"] == (1.0, EvalStatus.PASSED)
    # On CPU the times are the interpreter's: reported, never gating.
    for name in ("speedup_vs_xla", "speedup_vs_reference", "roofline_fraction"):
        score, status = s[name]
        assert score is not None and score > 0 and status == EvalStatus.INFORMATIONAL, name
    j = judge_kernel("12p_RMSNorm", good, "smoke")  # the same judgement, from the per-process cache
    # as many seeds as the held-out set names, drawn fresh by the harness: seeds the agent's loop never saw
    assert len(j.seeds) == len(heldout_seeds()) and not set(j.seeds) & set(heldout_seeds())
    assert j.verdict["correctness"]["seeds"] == j.seeds and j.verdict["correctness"]["seeds_drawn"] == "fresh"
    assert s["speedup_vs_xla"][0] == j.speedup and j.speedup_low <= j.speedup <= j.speedup_high
    assert s["speedup_vs_reference"][0] == pytest.approx(j.speedup / j.reference_speedup)


async def test_a_kernel_writing_zeros_fails_every_metric(workspace):
    bad = workspace(KERNELS / "hostile" / "zeros.py")
    s = await scores(invocations("optimize 12p_RMSNorm smoke", answer(bad)))
    assert s["kernel_correct"] == (0.0, EvalStatus.FAILED)
    for name in ("speedup_vs_xla", "speedup_vs_reference", "roofline_fraction"):
        assert s[name] == (0.0, EvalStatus.FAILED), name  # even against a 0.0 threshold
    j = judge_kernel("12p_RMSNorm", bad, "smoke")
    assert j.failure in ("incorrect", "rejected") and j.speedup is None


async def test_an_answer_naming_a_file_outside_the_data_folder_earns_nothing(workspace):
    shipped = load_task("12p_RMSNorm").reference_kernel  # correct, but not the agent's work
    s = await scores(invocations("optimize 12p_RMSNorm smoke", answer(shipped)))
    assert s["kernel_correct"] == (0.0, EvalStatus.FAILED)


async def test_an_answer_without_a_kernel_fails_without_running_anything():
    s = await scores(invocations("optimize 8p_GEMM smoke", "Done (iteration budget (1) used) without a kernel "
                                                           "the harness judged correct."))
    assert s["kernel_correct"] == (0.0, EvalStatus.FAILED)
    assert s["speedup_vs_xla"] == (0.0, EvalStatus.FAILED)


async def test_the_shipped_config_runs_the_metrics_through_adks_registry(workspace):
    need_module("pandas", extra="eval")  # the registry imports pandas, which comes with google-adk[eval]
    from google.adk.evaluation.metric_evaluator_registry import (DEFAULT_METRIC_EVALUATOR_REGISTRY,
                                                                 register_custom_metrics_from_config)
    config = get_evaluation_criteria_or_default(str(smoke_config_path()))
    registry = register_custom_metrics_from_config(config, DEFAULT_METRIC_EVALUATOR_REGISTRY.fork())
    invs = invocations("optimize 12p_RMSNorm smoke", answer(workspace(KERNELS / "rmsnorm_rows.py")))
    wanted = {m.metric_name: m for m in get_eval_metrics_from_config(config)}
    result = await registry.get_evaluator(wanted["kernel_correct"]).evaluate_invocations(invs, None, None)
    assert (result.overall_score, result.overall_eval_status) == (1.0, EvalStatus.PASSED)
    result = await registry.get_evaluator(wanted["speedup_vs_xla"]).evaluate_invocations(invs, None, None)
    assert result.overall_eval_status == EvalStatus.INFORMATIONAL and result.overall_score > 0
