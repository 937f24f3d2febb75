"""How long a usage error takes: wall time of `maxkernel` processes that fail pre-flight (bad chip, unknown task,
missing kernel file), beside `maxkernel --help` as the floor (interpreter start plus the CLI's imports).

Run: python benchmarks/cli_preflight.py [--reps 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNEL = str(ROOT / "tests/harness/kernels/gemm_tiled.py")
CASES = {
    "--help": ["--help"],
    "bad chip": ["compile", "--task", "8p_GEMM", "--kernel", KERNEL, "--chip", "v9"],
    "unknown task": ["compile", "--task", "nosuch", "--kernel", KERNEL],
    "missing kernel": ["compile", "--task", "8p_GEMM", "--kernel", "missing.py"],
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    exe = shutil.which("maxkernel")
    cmd = [exe] if exe else [sys.executable, "-m", "maxkernel.cli"]
    rows = {}
    for name, argv in CASES.items():
        times, codes, lines = [], set(), set()
        for _ in range(args.reps):
            t0 = time.perf_counter()
            r = subprocess.run([*cmd, *argv], capture_output=True, text=True, cwd=ROOT)
            times.append(time.perf_counter() - t0)
            codes.add(r.returncode)
            lines.add(r.stderr.count("\n"))
        rows[name] = {"median_s": round(statistics.median(times), 3), "max_s": round(max(times), 3),
                      "exit_codes": sorted(codes), "stderr_lines": sorted(lines)}
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for name, r in rows.items():
            print(f"{name:<16} median {r['median_s']:.3f} s  max {r['max_s']:.3f} s  exit {r['exit_codes']}  "
                  f"stderr lines {r['stderr_lines']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
