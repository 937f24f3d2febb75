"""ADK eval sets over the jaxbench suite: one eval case per task, whose user turn names the task and size."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from google.adk.evaluation.eval_case import EvalCase, Invocation, SessionInput
from google.adk.evaluation.eval_set import EvalSet
from google.genai import types

import jaxbench

__all__ = ["SET_NAMES", "SMOKE_TASKS", "APP_NAME", "USER_ID", "set_tasks", "request_text", "build_eval_set",
           "named_eval_set", "write_eval_set", "smoke_eval_set_path", "smoke_config_path"]

SET_NAMES = ("all", "p", "k", "smoke")
# The tasks the offline replay model has recordings for, so the smoke set runs with no LLM endpoint.
SMOKE_TASKS = ("8p_GEMM", "12p_RMSNorm")
APP_NAME = "auto"  # the app `adk eval maxkernel/apps/auto` loads; sessions must carry its name
USER_ID = "user"
_DESCRIPTIONS = {
    "all": "every jaxbench task",
    "p": "the production-operator tier (p) of jaxbench",
    "k": "the KernelBench-derived tier (k) of jaxbench",
    "smoke": "the tasks the offline replay model has recordings for (MAXKERNEL_MODEL=replay runs it offline)",
}


def set_tasks(name: str) -> list[str]:
    """The suite tasks of the named set: all, p, k or smoke."""
    if name == "all":
        return jaxbench.task_names()
    if name in ("p", "k"):
        return [t for t in jaxbench.task_names() if jaxbench.tier_of(t) == name]
    if name == "smoke":
        return list(SMOKE_TASKS)
    raise ValueError(f"unknown eval set {name!r}; choose from {', '.join(SET_NAMES)}")


def request_text(task: str, size: str) -> str:
    """The user turn of a task's eval case; the orchestrator and the metrics both read task and size from it."""
    return f"optimize {task} {size}"


def build_eval_set(tasks: list[str], *, size: str, eval_set_id: str, description: str = "") -> EvalSet:
    """An eval set with one single-turn case per task; expected responses are left out (the metrics re-judge)."""
    unknown = [t for t in tasks if t not in jaxbench.task_names()]
    if unknown:
        raise ValueError(f"not suite tasks: {', '.join(unknown)}")
    if size not in ("smoke", "full"):
        raise ValueError(f"size must be smoke or full, not {size!r}")
    cases = [
        EvalCase(
            eval_id=task,
            conversation=[Invocation(invocation_id=f"{task}-1", user_content=types.Content(
                role="user", parts=[types.Part(text=request_text(task, size))]))],
            session_input=SessionInput(app_name=APP_NAME, user_id=USER_ID),
        )
        for task in tasks
    ]
    return EvalSet(eval_set_id=eval_set_id, name=eval_set_id, description=description or None, eval_cases=cases)


def named_eval_set(name: str, size: str | None = None) -> EvalSet:
    """The named set (all, p, k, smoke) at `size` (default smoke); ids look like jaxbench_p_full."""
    size = size or "smoke"
    eval_set_id = "jaxbench_smoke" if name == "smoke" and size == "smoke" else f"jaxbench_{name}_{size}"
    return build_eval_set(set_tasks(name), size=size, eval_set_id=eval_set_id,
                          description=f"{_DESCRIPTIONS[name]}; {size} size")


def write_eval_set(eval_set: EvalSet, path: str | Path) -> Path:
    """Write the set the way ADK's own eval-set manager does (defaults and Nones left out)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = eval_set.model_dump_json(indent=2, exclude_unset=True, exclude_defaults=True, exclude_none=True)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def smoke_eval_set_path() -> Path:
    """The shipped smoke eval set (package data)."""
    return Path(str(resources.files(__package__) / "jaxbench_smoke.evalset.json"))


def smoke_config_path() -> Path:
    """The shipped config beside it, named as `adk eval` and AgentEvaluator look for it."""
    return Path(str(resources.files(__package__) / "test_config.json"))
