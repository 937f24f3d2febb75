"""The jaxbench suite: 50 task folders in the public JAXBench layout, found by name."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

__all__ = ["suite_root", "task_names", "task_dir", "tier_of"]

_NAME = re.compile(r"^(\d+)([pk])_[A-Za-z0-9_]+$")


def suite_root() -> Path:
    """The folder holding the task folders (inside the installed package)."""
    return Path(str(resources.files(__name__)))


def task_names() -> list[str]:
    """All suite task names, in numeric order (1p ... 50k)."""
    names = [p.name for p in suite_root().iterdir() if _NAME.match(p.name) and (p / "baseline.py").is_file()]
    return sorted(names, key=lambda n: int(_NAME.match(n).group(1)))


def task_dir(name: str) -> Path:
    """The folder of suite task `name`; KeyError if there is none."""
    path = suite_root() / name
    if not _NAME.match(name) or not (path / "baseline.py").is_file():
        raise KeyError(name)
    return path


def tier_of(name: str) -> str:
    """'p' for the production-operator tier, 'k' for the KernelBench-derived tier, '' if unknown."""
    m = _NAME.match(name)
    return m.group(2) if m else ""
