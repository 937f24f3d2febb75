"""Skips for a missing test dependency (a dev extra, a Debian package) that become failures where all must run.

A plain local run skips a test whose optional dependency is missing. With CI set to anything but "", "0" or
"false", or with `pytest --require-extras`, the same test fails instead: a broken CI image cannot pass by
skipping. Hardware the machine lacks (a TPU, a GPU) is not a dependency; those tests keep plain skips.
"""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType
from typing import NoReturn

import pytest

__all__ = ["OPTION", "extras_required", "missing", "need_binary", "need_module", "set_required"]

OPTION = "--require-extras"
_required_by_option = False  # set once, by tests/conftest.py's pytest_configure


def set_required(value: bool) -> None:
    """Record the --require-extras option (conftest calls this; tests never do)."""
    global _required_by_option
    _required_by_option = bool(value)


def extras_required() -> bool:
    """True in CI (CI set and not 0/false) or under --require-extras: a missing dependency is a failure."""
    ci = os.environ.get("CI", "").strip().lower()
    return _required_by_option or ci not in ("", "0", "false")


def missing(reason: str) -> NoReturn:
    """Skip the test with `reason`, or fail it where every test dependency is required."""
    if extras_required():
        pytest.fail(f"{reason} [required: CI is set or {OPTION} was given]", pytrace=False)
    pytest.skip(reason)


def need_module(name: str, extra: str = "dev") -> ModuleType:
    """The imported module `name`; if it cannot be imported, skip (fail in CI) naming the extra that has it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing(f"needs the Python module {name} ({type(exc).__name__}: {exc}); "
                f"install it with pip install -e '.[{extra}]'")


def need_binary(name: str, package: str | None = None) -> str:
    """The path of the executable `name` (a command or an absolute path); if absent, skip (fail in CI)."""
    path = shutil.which(name)
    if path is None:
        missing(f"needs the executable {name} (Debian package {package or name})")
    return path
