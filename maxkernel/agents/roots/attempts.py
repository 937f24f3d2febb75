"""The loop's memory of its own attempts: ledger lines, error classes, errors mapped to kernel lines, and the
check that a sub-agent's turn really produced a usable kernel file."""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path

from maxkernel import pysource

__all__ = ["fingerprint", "error_class", "locate", "with_locations", "check_written", "idea", "ledger_line"]

_CLASSES = (
    (re.compile(r"vmem|scoped memory|out of memory|resource_exhausted", re.I), "VMEM overflow"),
    (re.compile(r"divisible by 8 and 128|\(8, ?128\)|block shape", re.I), "block shape rule"),
    (re.compile(r"not written|wrote no|prose", re.I), "no kernel written"),
    (re.compile(r"syntaxerror|invalid syntax|was never closed|unexpected eof|truncated", re.I), "syntax error"),
    (re.compile(r"\bnan\b", re.I), "NaN in output"),
    (re.compile(r"rejected|allow-list|not allowed|refused", re.I), "rejected by the static check"),
    (re.compile(r"mismatch|tolerance|incorrect|max_rel_err", re.I), "wrong result"),
    (re.compile(r"timeout|timed out", re.I), "timeout"),
    (re.compile(r"shape|dtype", re.I), "shape or dtype error"),
    (re.compile(r"compile|lower|mosaic", re.I), "compile error"),
)


def fingerprint(path: Path) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def error_class(problem: str) -> str:
    """A few words naming what kind of failure `problem` is (for the ledger and the debugger's history)."""
    for pattern, name in _CLASSES:
        if pattern.search(problem or ""):
            return name
    first = " ".join((problem or "").split())[:60]
    return first or "unknown failure"


def locate(problem: str, source: str, name: str = "kernel.py") -> list[tuple[int, str]]:
    """(line number, line text) of each place in the kernel file that `problem` names: tracebacks
    (File ".../kernel.py", line N), lowering messages (kernel.py:N) and MLIR locations ("kernel.py":N:M)."""
    stem = re.escape(Path(name).stem)
    pattern = re.compile(rf'{stem}[\w.-]*\.py(?:", line |:|":)(\d+)')
    lines = source.splitlines()
    found: list[tuple[int, str]] = []
    for m in pattern.finditer(problem or ""):
        n = int(m.group(1))
        if 1 <= n <= len(lines) and n not in [f[0] for f in found]:
            found.append((n, lines[n - 1].strip()))
    return found[:6]


def with_locations(problem: str, kernel: Path) -> str:
    """`problem` followed by the kernel lines it names, as kernel.py:N: <the line's text>."""
    try:
        source = Path(kernel).read_text()
    except (OSError, UnicodeDecodeError):
        return problem
    places = locate(problem, source, Path(kernel).name)
    if not places:
        return problem
    return problem + "\nIn the kernel:\n" + "\n".join(f"{Path(kernel).name}:{n}: {text}" for n, text in places)


def check_written(kernel: Path, wrote: bool, said_text: bool) -> tuple[str, str] | None:
    """None when the turn left a usable kernel file; else (fault kind, the reason to give the model)."""
    if not wrote:
        if said_text:
            return ("prose_answer", "you answered in prose and did not call write_file: call write_file with "
                                    "path kernel.py and the whole file as content")
        return ("no_write", "kernel.py was not written: call write_file with path kernel.py and the whole file")
    try:
        source = Path(kernel).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        return ("no_write", f"kernel.py could not be read back ({exc}): write it again with write_file")
    try:
        tree = pysource.parse(source)
    except SyntaxError as exc:
        end = exc.lineno is not None and exc.lineno >= len(source.splitlines()) - 1
        kind = "truncated_file" if end or "never closed" in str(exc) or "EOF" in str(exc) else "syntax_error"
        return (kind, f"kernel.py is not valid Python ({exc.msg} at line {exc.lineno}"
                      + ("; the file looks cut off" if kind == "truncated_file" else "")
                      + "): write the whole file again with write_file")
    if not any(isinstance(n, ast.FunctionDef) and n.name == "workload" for n in tree.body):
        return ("no_workload", "kernel.py defines no workload() function: write the whole kernel file")
    return None


def idea(plan: str | None) -> str:
    """The plan's idea in a few words: its first non-empty line, numbering and [replay] label stripped."""
    for line in (plan or "").splitlines():
        text = re.sub(r"^\s*(\[replay\]\s*)?(\d+[.)]\s*)?", "", line).strip()
        if text:
            return text[:110]
    return "(no plan)"


def ledger_line(it: int, what: str, outcome: str) -> str:
    return f"iteration {it}: {what} -> {outcome}"[:300]
