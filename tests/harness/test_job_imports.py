"""The sandboxed child is a leaf: its entry point and the job bodies import nothing of the parent's side (the
sandbox launcher, the verdict, the tools), and the harness's modules import each other without a cycle."""

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from maxkernel.harness.jobs import worker

pytestmark = pytest.mark.unit

HARNESS = Path(worker.__file__).parent
PARENT_SIDE = {"maxkernel.harness.sandbox.pool", "maxkernel.harness.verdict.evaluate", "maxkernel.harness.sandbox.copyout",
               "maxkernel.harness.verdict.result"}


def imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in out if m.startswith("maxkernel")}


def closure(module: str) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        path = HARNESS / f"{m.rsplit('.', 1)[-1]}.py"
        if m in seen or not m.startswith("maxkernel.harness.") or not path.is_file():
            seen.add(m)
            continue
        seen.add(m)
        todo += sorted(imports(path))
    return seen


def test_the_child_reaches_no_parent_side_module():
    for entry in ["maxkernel.harness.jobs.worker", *worker.HANDLERS.values()]:
        reached = closure(entry)
        assert not reached & PARENT_SIDE, f"{entry} reaches {sorted(reached & PARENT_SIDE)}"
        assert not any(m.startswith(("maxkernel.tools", "maxkernel.agents", "maxkernel.cli")) for m in reached), entry


def test_no_import_cycle_inside_the_harness():
    graph = defaultdict(set)
    for path in HARNESS.glob("*.py"):
        me = f"maxkernel.harness.{path.stem}"
        graph[me] = {m for m in imports(path) if (HARNESS / f"{m.rsplit('.', 1)[-1]}.py").is_file()
                     and m.startswith("maxkernel.harness.") and m != me}

    def reaches(a, b, seen):
        # .get: a name like maxkernel.harness.estimate.estimator.estimate (a function named as its module) is no node
        return any(n == b or (n not in seen and not seen.add(n) and reaches(n, b, seen)) for n in graph.get(a, ()))

    cycles = [(a, b) for a in graph for b in graph[a] if reaches(b, a, {b})]
    assert not cycles, cycles
