"""ADK eval sets over jaxbench, custom metrics that re-judge the agent's kernel, and the field's summary numbers."""

from maxkernel.evals.evalsets import (SET_NAMES, SMOKE_TASKS, build_eval_set, named_eval_set, set_tasks,
                                      smoke_config_path, smoke_eval_set_path, write_eval_set)
from maxkernel.evals.judging import FAILURES, Judgement, heldout_seeds, judge_kernel
from maxkernel.evals.stats import FAST_P, summarize

__all__ = ["SET_NAMES", "SMOKE_TASKS", "build_eval_set", "named_eval_set", "set_tasks", "smoke_config_path",
           "smoke_eval_set_path", "write_eval_set", "FAILURES", "Judgement", "heldout_seeds", "judge_kernel",
           "FAST_P", "summarize"]
