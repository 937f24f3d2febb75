"""The suites: jaxbench's 50 task folders in the public JAXBench layout, and `realworld/` (production ops beyond
JaxBench: sparse and linear attention, MoE dispatch, fused losses, quantized matmuls, scans), found by name."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

__all__ = ["SUITES", "suite_root", "suite_of", "task_names", "task_dir", "tier_of"]

_NAME = re.compile(r"^(\d+)([pk])_[A-Za-z0-9_]+$")
_REALWORLD = re.compile(r"^rw_[a-z0-9_]+$")
SUITES = ("jaxbench", "realworld")


def suite_root() -> Path:
    """The folder holding the task folders (inside the installed package)."""
    return Path(str(resources.files(__name__)))


def task_names(suite: str = "jaxbench") -> list[str]:
    """A suite's task names: jaxbench's in numeric order (1p ... 50k), realworld's alphabetically; "all" for both."""
    if suite == "all":
        return [n for s in SUITES for n in task_names(s)]
    if suite == "realworld":
        root = suite_root() / "realworld"
        return sorted(p.name for p in root.iterdir() if _REALWORLD.match(p.name) and (p / "baseline.py").is_file())
    if suite != "jaxbench":
        raise ValueError(f"unknown suite {suite!r}; choose from {', '.join(SUITES)} or all")
    names = [p.name for p in suite_root().iterdir() if _NAME.match(p.name) and (p / "baseline.py").is_file()]
    return sorted(names, key=lambda n: int(_NAME.match(n).group(1)))


def suite_of(name: str) -> str:
    """'jaxbench' or 'realworld' for a suite task's name, '' for anything else (a folder)."""
    return "jaxbench" if _NAME.match(name) else ("realworld" if _REALWORLD.match(name) else "")


def task_dir(name: str) -> Path:
    """The folder of suite task `name` (either suite); KeyError if there is none."""
    suite = suite_of(name)
    path = suite_root() / ("realworld" if suite == "realworld" else "") / name
    if not suite or not (path / "baseline.py").is_file():
        raise KeyError(name)
    return path


def tier_of(name: str) -> str:
    """'p' for the production-operator tier, 'k' for the KernelBench-derived tier, 'rw' for the real-world suite,
    '' if unknown."""
    m = _NAME.match(name)
    return m.group(2) if m else ("rw" if _REALWORLD.match(name) else "")
