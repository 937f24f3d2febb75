"""compile_pallas speed: deviceless TPU compile of the reference GEMM for each chip, cold (first in a process)
and warm (again in the same process), plus one sandboxed compile_pallas call end to end.

Run: python benchmarks/compile_speed.py [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNEL = ROOT / "jaxbench" / "8p_GEMM" / "kernel.py"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

    from maxkernel.harness.jobs import compile_job as _compile_job
    from maxkernel.tools.compile_pallas import TPU_CHIPS, compile_pallas

    rows = {}
    scratch = Path(tempfile.mkdtemp())
    # Each compile uses different block sizes: a new program, so no in-process cache can answer it.
    configs = [{"block_m": 512, "block_n": 1024, "block_k": 512}, {"block_m": 256, "block_n": 512, "block_k": 512},
               {"block_m": 256, "block_n": 256, "block_k": 256}]
    for chip in TPU_CHIPS:
        times = []
        for cfg in configs:
            t0 = time.perf_counter()
            r = _compile_job.run({"task": "8p_GEMM", "kernel": str(KERNEL), "chip": chip, "size": "full",
                                  "tunables": cfg}, scratch)
            times.append(time.perf_counter() - t0)
        rows[chip] = {"ok": r["ok"], "cold_s": round(times[0], 3), "warm_s": round(min(times[1:]), 3),
                      "compiler_s": round(r["compile_s"], 3), "vmem_mib": round((r["vmem_bytes"] or 0) / 2**20, 2)}
    # End to end through the sandbox, on pre-started workers that already loaded libtpu (the compile pool).
    from maxkernel.tools.compile_pallas import compile_pool

    compile_pool()
    calls, compiles, ok = [], [], True
    for _ in range(3):
        time.sleep(15)  # let the pool's replacement worker finish its warm-up
        t0 = time.perf_counter()
        sandboxed = compile_pallas("8p_GEMM", str(KERNEL), "v5e")
        calls.append(time.perf_counter() - t0)
        compiles.append(sandboxed.compile_s or 0.0)
        ok = ok and sandboxed.ok
    report = {"kernel": "jaxbench/8p_GEMM/kernel.py (full size)", "in_process": rows,
              "sandboxed_call_s": round(sorted(calls)[1], 3), "sandboxed_compiler_s": round(sorted(compiles)[1], 3),
              "sandboxed_ok": ok, "load_average": os.getloadavg()[0]}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for chip, r in rows.items():
            print(f"{chip:>4}: cold {r['cold_s']:.3f} s, warm {r['warm_s']:.3f} s, VMEM {r['vmem_mib']} MiB, ok={r['ok']}")
        print(f"sandboxed compile_pallas call (pre-started worker, median of 3): {report['sandboxed_call_s']:.3f} s "
              f"of which the compiler {report['sandboxed_compiler_s']:.3f} s (default blocks)")
        print(f"load average during the run: {report['load_average']:.2f}")
    return 0 if all(r["ok"] for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
