"""The layering in docs/architecture.md holds for every import in the tree, and the table names every package."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"

pytestmark = pytest.mark.unit


def layers() -> dict[str, int]:
    """Package -> layer number, read from the doc's table rows `| N name | `pkg`, `pkg` | ... |`."""
    out = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\|\s*(\d+)\s[^|]*\|([^|]*)\|", line)
        if m:
            for pkg in re.findall(r"`([\w.]+)`", m.group(2)):
                out[pkg] = int(m.group(1))
    return out


def unit_of(module: str, known: dict[str, int]) -> str | None:
    """The table entry a dotted module belongs to (the longest listed prefix), or None outside the project."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in known:
            return ".".join(parts[:n])
    return None


def source_files() -> list[Path]:
    files = sorted((ROOT / "maxkernel").rglob("*.py")) + sorted((ROOT / "jaxbench").glob("*.py"))
    # Shipped kernel files are standalone candidate code, not part of the package's import graph; the top
    # package's __init__ holds only the version.
    return [f for f in files if "replay/kernels" not in f.as_posix() and f != ROOT / "maxkernel" / "__init__.py"]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_edges(known: dict[str, int]) -> dict[tuple[str, str], list[str]]:
    """(importer, imported) table entries -> where, for every import statement anywhere in a file."""
    edges = defaultdict(list)
    for f in source_files():
        me = unit_of(module_name(f), known)
        for name, line, _ in imports_of(f.read_text()):
            other = unit_of(name, known)
            if other and other != me:
                edges[(me, other)].append(f"{f.relative_to(ROOT)}:{line}")
    return edges


def test_every_package_and_top_level_module_is_in_the_table():
    known = layers()
    assert len(known) >= 15 and set(known.values()) == set(range(7))
    missing = sorted({module_name(f) for f in source_files() if unit_of(module_name(f), known) is None})
    assert not missing, f"add these to the layer table in docs/architecture.md: {missing}"
    listed = {p for p in known if p != "jaxbench"}
    on_disk = {f"maxkernel.{p.stem if p.suffix else p.name}" for p in (ROOT / "maxkernel").iterdir()
               if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and any(p.glob("*.py")))}
    assert listed == on_disk, "the layer table and maxkernel/ list different packages"


def test_no_package_imports_a_higher_layer():
    known = layers()
    upward = [f"{a} (layer {known[a]}) imports {b} (layer {known[b]}) at {where[0]}"
              for (a, b), where in sorted(import_edges(known).items()) if known[b] > known[a]]
    assert not upward, "\n".join(upward)


def test_no_import_cycle_between_packages():
    known = layers()
    edges = import_edges(known)
    graph = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)

    def path(start, goal, seen):
        for nxt in sorted(graph[start]):
            if nxt == goal:
                return [start, goal]
            if nxt not in seen:
                seen.add(nxt)
                rest = path(nxt, goal, seen)
                if rest:
                    return [start, *rest]
        return None

    cycles = []
    for a, b in sorted(edges):
        back = path(b, a, {b})
        if back:
            cycles.append(f"{a} -> {' -> '.join(back)} (first import at {edges[(a, b)][0]})")
    assert not cycles, "\n".join(cycles)


def test_the_checker_sees_function_level_imports():
    """The check must not pass by missing imports made inside functions (most heavy imports here are)."""
    known = layers()
    edges = import_edges(known)
    # cli/kernels.py imports the harness only inside its command functions.
    assert any(w.startswith("maxkernel/cli/kernels.py") for w in edges[("maxkernel.cli", "maxkernel.harness")])


# The harness's rooms (docs/architecture.md, "The harness's rooms").

HARNESS = ROOT / "maxkernel" / "harness"
JOBS = "maxkernel.harness.jobs"


def rooms() -> dict[str, tuple[set[str], str]]:
    """Room package -> (the rooms it may import, its row's text), read from the doc's rooms table."""
    out = {}
    for line in DOC.read_text().splitlines():
        m = re.match(r"\|\s*`(maxkernel\.harness\.\w+)`\s*\|([^|]*)\|(.*)\|\s*$", line)
        if m:
            out[m.group(1)] = ({f"maxkernel.harness.{r}" for r in re.findall(r"`(\w+)`", m.group(2))}, m.group(3))
    return out


def imports_of(source: str) -> list[tuple[str, int, bool]]:
    """(dotted name imported, line, whether at module level) for every absolute import in `source`."""
    tree = ast.parse(source)
    top = set()
    for node in tree.body:  # module level: the body, and what an `if`/`try` at module level holds
        top.update(id(n) for n in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                           ast.ClassDef)))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        out += [(n, node.lineno, id(node) in top) for n in names]
    return out


def room_of(module: str) -> str | None:
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["maxkernel", "harness"] and len(parts) > 2 else None


def test_the_harness_is_the_rooms_the_table_lists_and_each_row_names_its_files():
    table = rooms()
    on_disk = {f"maxkernel.harness.{p.name}" for p in HARNESS.iterdir() if p.is_dir() and any(p.glob("*.py"))}
    assert set(table) == on_disk and len(table) == 5
    loose = sorted(p.name for p in HARNESS.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"every harness module lives in a room: {loose}"
    for room, (_, text) in table.items():
        files = {p.name for p in (HARNESS / room.rsplit(".", 1)[1]).glob("*.py")} - {"__init__.py"}
        unnamed = sorted(f for f in files if f"`{f}`" not in text)
        assert not unnamed, f"{room}'s row in docs/architecture.md does not name {unnamed}"


def test_each_room_imports_only_the_rooms_its_row_names():
    table = rooms()
    wrong = []
    for f in sorted(HARNESS.rglob("*.py")):
        mine = room_of(module_name(f))
        if mine is None:
            continue
        for name, line, _ in imports_of(f.read_text()):
            other = room_of(name)
            if other and other != mine and other not in table[mine][0]:
                wrong.append(f"{f.relative_to(ROOT)}:{line} imports {name} ({other} is not in {mine}'s row)")
    assert not wrong, "\n".join(wrong)


def job_body_imports(module: str, source: str) -> list[str]:
    """Where `module` (outside the jobs room) imports a job body: at module level anywhere, at all inside the
    harness (the parent starts a job by its name in the worker's table)."""
    if room_of(module) == JOBS:
        return []
    inside = room_of(module) is not None
    return [f"line {line} imports {name}" for name, line, top in imports_of(source)
            if name.startswith(JOBS + ".") and (top or inside)]


def test_no_parent_side_module_imports_a_job_body():
    found = [f"{f.relative_to(ROOT)}: {w}" for f in source_files() for w in job_body_imports(module_name(f),
                                                                                              f.read_text())]
    assert not found, "\n".join(found)


def test_the_job_body_check_sees_what_it_must():
    """The checker itself: a module-level import of a job body is caught anywhere, a function-level one only inside
    the harness; the jobs room may import its own."""
    top_level = "from maxkernel.harness.jobs.reference_job import run\n"
    in_function = "def f():\n    from maxkernel.harness.jobs import candidate_job\n"
    guarded = "try:\n    import maxkernel.harness.jobs.compile_job\nexcept ImportError:\n    pass\n"
    assert job_body_imports("maxkernel.tools.compile_pallas", top_level)
    assert job_body_imports("maxkernel.tools.compile_pallas", guarded)
    assert not job_body_imports("maxkernel.tools.compile_pallas", in_function)
    assert job_body_imports("maxkernel.harness.verdict.evaluate", in_function)
    assert not job_body_imports("maxkernel.harness.jobs.worker", top_level)
