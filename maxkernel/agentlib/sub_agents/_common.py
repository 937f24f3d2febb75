"""Text every sub-agent's instruction starts with: the session facts, filled from state by ADK."""

CONTEXT = """Task: {task}
Size: {size}
Target chip: {chip}
Iteration: {iteration?}
Debug round: {debug_round?}
"""

KERNEL_RULES = """A kernel is the file kernel.py in the workspace. It defines workload(*inputs) taking exactly the task's
inputs and returning the task's outputs as one array or a flat tuple of arrays (same shapes and dtypes). The
heavy work (matmuls, reductions, the epilogue) must run inside pl.pallas_call, without an interpret= argument
(the harness interprets it on CPU); work left in XLA around a thin Pallas call is rejected. Declare tunables as
keyword-only parameters of workload() with defaults, and their candidate values in a module-level
TUNABLES = {"name": (values, ...)} mapping. The file must be self-contained and is checked before it is run:
import only jax (public modules), numpy, functools, math, dataclasses, typing, itertools, operator; no os, sys,
time, threading, file access, callbacks, getattr/eval, dunder attributes, or assignments to module attributes."""
