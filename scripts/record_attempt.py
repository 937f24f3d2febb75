"""Make (or re-check) a replay recording's attempt through the real tools.

    python scripts/record_attempt.py maxkernel/agents/replay/41k_Gemm_Add_ReLU.json [--check-only]

A recording whose kernel turns say "content_kernel" replays the task's shipped kernel.py: the implementer's first
version is that kernel with the recording's "edits" made (the first attempt), and the debugger's fix is the kernel
itself. This script writes the first version, puts it through the checks the auto loop runs (compile for v5e at
full size, then the strict-interpreter tests at smoke size), requires one of them to refuse it, requires the
shipped kernel to pass both, and stores what the tools said in the recording's "attempt" (and the kernel's sha256
the recording pins). So nothing a recording claims the tools said is written by hand. --check-only compares instead
of writing, exit 1 on a difference.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path


def first_attempt(rec: dict) -> tuple[str, str]:
    """(first version, shipped kernel) of a recording: the implementer's iteration-1 write and the kernel."""
    import jaxbench
    from maxkernel.agents.replay.model import _expand

    shipped = (jaxbench.task_dir(rec["task"]) / "kernel.py").read_text()
    impl = next(t for t in rec["turns"] if t["role"] == "implementer" and t.get("iteration", 1) == 1)
    call = next(c for c in impl["calls"] if c["name"] == "write_file")
    return _expand(call, {**rec, "kernel_sha256": _sha(shipped)})["args"]["content"], shipped


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _checks(task: str, path: Path) -> dict:
    """The auto loop's first two checks on one kernel file: the first that refuses it, or passed."""
    from maxkernel.tools.compile_pallas import compile_pallas
    from maxkernel.tools.run_tests import run_tests

    c = compile_pallas(task, str(path), "v5e")
    if not c.ok:
        return {"check": "compile for v5e (full size)", "refused": True, "tool_said": c.error or c.summary,
                "hint": c.hint or "", "hint_family": c.hint_family or ""}
    t = run_tests(task, str(path), seeds=2)
    return {"check": "tests (strict interpreter, smoke size)", "refused": not t.ok, "tool_said": t.summary,
            "hint": t.hint or "", "hint_family": t.hint_family or ""}


def attempt(rec: dict) -> dict:
    first, shipped = first_attempt(rec)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.py"
        path.write_text(first)
        refused = _checks(rec["task"], path)
        path.write_text(shipped)
        fixed = _checks(rec["task"], path)
    if not refused.pop("refused"):
        raise SystemExit(f"{rec['task']}: the first attempt passed its checks; a recording replays a refused one")
    if fixed.pop("refused"):
        raise SystemExit(f"{rec['task']}: the shipped kernel did not pass: {fixed['tool_said'][:300]}")
    return {"refused_by": refused["check"], "tool_said": refused["tool_said"][:1500], "hint": refused["hint"],
            "hint_family": refused["hint_family"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recording", type=Path)
    ap.add_argument("--check-only", action="store_true")
    args = ap.parse_args()
    rec = json.loads(args.recording.read_text())
    import jaxbench

    sha = _sha((jaxbench.task_dir(rec["task"]) / "kernel.py").read_text())
    found = attempt(rec)
    old = {k: (rec.get("attempt") or {}).get(k) for k in found}
    if args.check_only:
        same = sha == rec.get("kernel_sha256") and found["refused_by"] == old["refused_by"]
        print(f"{rec['task']}: {'as recorded' if same else 'differs'}: {found['refused_by']}: {found['tool_said'][:200]}")
        return 0 if same else 1
    rec["kernel_sha256"] = sha
    rec["attempt"] = {**(rec.get("attempt") or {}), **found}
    args.recording.write_text(json.dumps(rec, indent=1) + "\n")
    print(f"{rec['task']}: refused by {found['refused_by']}: {found['tool_said'][:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
