"""Custom ADK eval metrics that re-judge the agent's kernel with the trusted harness on held-out seeds.

Each is a `code_config` function for an eval config's `custom_metrics`:
`fn(eval_metric, actual_invocations, expected_invocations, conversation_scenario) -> EvaluationResult`.
The kernel is read from the agent's answer ("Best kernel: <path> ..."; only a file under the data folder, where
agents write, counts), the task and size from the user turn; a metric cannot see session state, and needs
nothing else from the agent. Timing-based scores taken on a CPU are interpreter times, so there they are
reported as INFORMATIONAL and never pass or fail a case.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from google.adk.evaluation.eval_case import ConversationScenario, Invocation, InvocationEvents
from google.adk.evaluation.eval_metrics import EvalMetric, EvalStatus
from google.adk.evaluation.evaluator import EvaluationResult, PerInvocationResult

from maxkernel.evals.judging import Judgement, find_kernel, find_task_and_size, judge_kernel

__all__ = ["kernel_correct", "speedup_vs_xla", "speedup_vs_reference", "roofline_fraction", "METRICS"]


def _texts(content) -> list[str]:
    return [p.text for p in (content.parts if content and content.parts else []) if p.text]


def _answer_texts(inv: Invocation) -> list[str]:
    """Everything the agent said in an invocation, final response last."""
    texts = []
    if isinstance(inv.intermediate_data, InvocationEvents):
        for ev in inv.intermediate_data.invocation_events:
            texts += _texts(ev.content)
    return texts + _texts(inv.final_response)


def _target(invocations: list[Invocation]) -> int:
    """The invocation whose answer names the kernel to judge (the last such), else the last invocation."""
    for i in range(len(invocations) - 1, -1, -1):
        if find_kernel(_answer_texts(invocations[i])):
            return i
    return len(invocations) - 1


async def _judge(invocations: list[Invocation], idx: int) -> Judgement | None:
    asks = [t for inv in invocations[: idx + 1] for t in _texts(inv.user_content)]
    task, size = find_task_and_size(asks)
    if task is None:
        return None
    kernel = find_kernel(_answer_texts(invocations[idx]))
    if kernel and not _agent_written(kernel):
        kernel = None  # an answer pointing at any other file (say, the shipped reference kernel) earns nothing
    return await asyncio.to_thread(judge_kernel, task, kernel, size)


def _agent_written(kernel: str) -> bool:
    """Whether the file lies under the data folder, where agent sessions and searches write their kernels."""
    from maxkernel.settings import get_settings

    return Path(kernel).resolve().is_relative_to(get_settings().data_dir.resolve())


def _threshold(eval_metric: EvalMetric) -> float | None:
    if eval_metric.criterion is not None:
        return eval_metric.criterion.threshold
    return eval_metric.threshold


def _status(score: float | None, threshold: float | None, fixed: EvalStatus | None) -> EvalStatus:
    if fixed is not None:
        return fixed
    if score is None:
        return EvalStatus.NOT_EVALUATED
    if threshold is None:
        return EvalStatus.INFORMATIONAL
    return EvalStatus.PASSED if score >= threshold else EvalStatus.FAILED


async def _evaluate(eval_metric: EvalMetric, invocations: list[Invocation],
                    score_of: Callable[[Judgement], tuple[float | None, EvalStatus | None]]) -> EvaluationResult:
    """The metric's result from `score_of(judgement) -> (score, status or None to compare with the threshold)`."""
    if not invocations:
        return EvaluationResult()
    idx = _target(invocations)
    judgement = await _judge(invocations, idx)
    if judgement is None:  # the conversation never named a suite task: nothing to judge against
        return EvaluationResult()
    score, fixed = score_of(judgement)
    status = _status(score, _threshold(eval_metric), fixed)
    # Only the invocation that produced the kernel carries the score; the others share its status so that
    # readers keying on the first invocation (AgentEvaluator does) see the same verdict.
    per = [PerInvocationResult(actual_invocation=inv, score=score if i == idx else None, eval_status=status)
           for i, inv in enumerate(invocations)]
    return EvaluationResult(overall_score=score, overall_eval_status=status, per_invocation_results=per)


def _correct(j: Judgement) -> tuple[float | None, EvalStatus | None]:
    return (1.0 if j.correct else 0.0), None


def _timed(value: Callable[[Judgement], float | None]):
    """An incorrect kernel fails with 0 whatever the threshold (it is faster at nothing); a correct one scores
    its value, informational on CPU where the times are the interpreter's."""

    def score_of(j: Judgement) -> tuple[float | None, EvalStatus | None]:
        if not j.correct:
            return 0.0, EvalStatus.FAILED
        return value(j), (EvalStatus.INFORMATIONAL if j.cpu_timing else None)

    return score_of


def _vs_reference(j: Judgement) -> tuple[float | None, EvalStatus | None]:
    from maxkernel.tasks import load_task

    if load_task(j.task).reference_kernel is None:
        # Not applicable, which must not read as a failure: ADK counts a missing score as "not evaluated".
        return None, EvalStatus.INFORMATIONAL
    return _timed(lambda x: x.speedup_vs_reference)(j)


async def kernel_correct(eval_metric: EvalMetric, actual_invocations: list[Invocation],
                         expected_invocations: list[Invocation] | None = None,
                         conversation_scenario: ConversationScenario | None = None) -> EvaluationResult:
    """1.0 when the harness judges the agent's kernel correct on the held-out seeds, else 0.0."""
    return await _evaluate(eval_metric, actual_invocations, _correct)


async def speedup_vs_xla(eval_metric: EvalMetric, actual_invocations: list[Invocation],
                         expected_invocations: list[Invocation] | None = None,
                         conversation_scenario: ConversationScenario | None = None) -> EvaluationResult:
    """The kernel's speedup over the task's XLA baseline (0.0 when it is not correct)."""
    return await _evaluate(eval_metric, actual_invocations, _timed(lambda j: j.speedup))


async def speedup_vs_reference(eval_metric: EvalMetric, actual_invocations: list[Invocation],
                               expected_invocations: list[Invocation] | None = None,
                               conversation_scenario: ConversationScenario | None = None) -> EvaluationResult:
    """The kernel's speedup over the task's shipped reference Pallas kernel, where the task has one."""
    return await _evaluate(eval_metric, actual_invocations, _vs_reference)


async def roofline_fraction(eval_metric: EvalMetric, actual_invocations: list[Invocation],
                            expected_invocations: list[Invocation] | None = None,
                            conversation_scenario: ConversationScenario | None = None) -> EvaluationResult:
    """The chip's roofline time bound over the kernel's median time (1.0 = at the roofline)."""
    return await _evaluate(eval_metric, actual_invocations, _timed(lambda j: j.roofline_fraction))


METRICS = {f.__name__: f for f in (kernel_correct, speedup_vs_xla, speedup_vs_reference, roofline_fraction)}
