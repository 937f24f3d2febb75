"""How far pricing a kernel in parts (each pallas_call alone, its grid cut; docs/estimate.md) strays from the
ordinary estimate (the whole program shrunk along the task's dims), on shipped kernels both can price.

    python3 benchmarks/estimate_in_parts.py [--task 12p_RMSNorm --task 8p_GEMM ...] [--chip v5e] [--json OUT]

Per task: the kernel's static cycles (ms) both ways, their ratio, and how far each part was extrapolated. Both are
estimates from libtpu's static profile, in the same run; the ratio is the figure (this machine's load moves wall
times, not cycles).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", action="append", help="a task with a shipped kernel.py (repeatable)")
    ap.add_argument("--chip", default="v5e")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    os.environ.setdefault("MAXKERNEL_CACHE_DIR", tempfile.mkdtemp(prefix="maxkernel-parts-bench-"))
    from maxkernel import chips
    from maxkernel.harness.estimate.estimator import estimate_program
    from maxkernel.settings import get_settings
    from maxkernel.tasks import load_task

    chip = chips.get(args.chip)
    rows = []
    for name in args.task or ["12p_RMSNorm", "8p_GEMM"]:
        task = load_task(name)
        kernel = str(task.baseline_file.parent / "kernel.py")
        got = {}
        for mode in ("whole", "parts"):
            os.environ["MAXKERNEL_ESTIMATE_IN_PARTS"] = "true" if mode == "parts" else "false"
            get_settings.cache_clear()
            got[mode] = estimate_program(task, kernel, chip)
        whole, parts = got["whole"], got["parts"]
        row = {"task": name, "chip": chip.name, "whole_ms": whole.static_cycles_ms, "parts_ms": parts.static_cycles_ms,
               "ratio": (parts.static_cycles_ms / whole.static_cycles_ms
                         if whole.ok and parts.ok and whole.static_cycles_ms else None),
               "parts_extrapolation": parts.uncertainty.get("extrapolation") if parts.ok else None,
               "whole_extrapolation": whole.uncertainty.get("extrapolation") if whole.ok else None,
               "error": whole.error or parts.error}
        rows.append(row)
        ratio = f"{row['ratio']:.3f}" if row["ratio"] else "—"
        print(f"{name:<40} {chip.name}  whole {row['whole_ms'] or float('nan'):8.3f} ms  parts "
              f"{row['parts_ms'] or float('nan'):8.3f} ms  parts/whole {ratio}"
              + (f"  ({row['error'][:120]})" if row["error"] else ""), flush=True)
    print("static cycles from libtpu's profile, both ways in one run: TPU estimates, not measured times")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
