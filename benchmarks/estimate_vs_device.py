"""The TPU estimate against measured time, for the day a TPU is attached: how wrong is the estimate, per case?

    python3 benchmarks/estimate_vs_device.py [--json OUT] [--reps N]

On a TPU host: for each case (the shipped reference kernels, the GEMM tilings of tpu-estimate.md, and XLA
baselines), the estimate for the attached chip (libtpu's static profile on shrunk shapes, as off a TPU) next to
the harness's measured device time at full size, and their ratio; then the median and worst error. Off a TPU it
says so and exits 2: there is nothing to measure against.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = [
    ("8p_GEMM", "kernel.py", {"block_m": 128, "block_n": 128, "block_k": 128}),
    ("8p_GEMM", "kernel.py", {"block_m": 256, "block_n": 256, "block_k": 256}),
    ("8p_GEMM", "kernel.py", {"block_m": 512, "block_n": 1024, "block_k": 1024}),
    ("12p_RMSNorm", "kernel.py", {"block_rows": 8}),
    ("12p_RMSNorm", "kernel.py", {"block_rows": 128}),
    ("41k_Gemm_Add_ReLU", "kernel.py", None),
    ("50k_Matmul_GELU_Softmax", "kernel.py", None),
    ("1p_Flash_Attention", "kernel.py", None),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    import jax

    from maxkernel import chips
    from maxkernel.harness.estimate import estimate
    from maxkernel.harness.evaluate import evaluate

    if jax.default_backend() != "tpu":
        print(f"estimate_vs_device: no TPU attached (backend {jax.default_backend()}): nothing to measure against; "
              "run this on a TPU VM", file=sys.stderr)
        return 2
    chip = chips.detect()
    rows = []
    for task, kernel, tunables in CASES:
        path = ROOT / "jaxbench" / task / kernel
        est = estimate(task, str(path), chip.name, "full", tunables)
        v = evaluate(task, path, size="full", reps=args.reps, tunables=tunables, estimate=False)
        measured = v.kernel.median_ms if v.status == "correct" and v.kernel else None
        base = v.baseline.median_ms if v.baseline else None
        row = {"task": task, "tunables": tunables, "chip": chip.name, "status": v.status,
               "estimated_ms": est.estimated_ms, "measured_ms": measured,
               "ratio": est.estimated_ms / measured if est.estimated_ms and measured else None,
               "baseline_estimated_ms": est.baseline_estimated_ms, "baseline_measured_ms": base,
               "baseline_ratio": est.baseline_estimated_ms / base if est.baseline_estimated_ms and base else None,
               "bound": est.bound, "limits": est.limits, "estimate_error": est.error}
        rows.append(row)
        print(f"{task:<26} {json.dumps(tunables or {}):<50} estimated {est.estimated_ms or float('nan'):9.3f} ms  "
              f"measured {measured or float('nan'):9.3f} ms  ratio {row['ratio'] or float('nan'):.2f}  "
              f"(baseline {row['baseline_ratio'] or float('nan'):.2f})", flush=True)
    errors = [abs(r["ratio"] - 1) for r in rows if r["ratio"]] + [abs(r["baseline_ratio"] - 1) for r in rows
                                                                   if r["baseline_ratio"]]
    if errors:
        print(f"median |estimate / measured - 1| = {statistics.median(errors):.1%}, worst {max(errors):.1%} "
              f"over {len(errors)} programs on {chip.name}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
