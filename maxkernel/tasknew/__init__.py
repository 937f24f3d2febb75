"""Bring your own workload: a user's JAX function becomes a validated task folder (`maxkernel task new`)."""

from maxkernel.tasknew.build import TaskReport, build_task, resolve_function
from maxkernel.tasknew.specs import SpecError

__all__ = ["TaskReport", "SpecError", "build_task", "resolve_function"]
