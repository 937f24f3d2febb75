"""Reproduce tpu-estimate.md's figures with the project's own `estimate`, and estimate suite baselines beyond GEMM.

    python3 benchmarks/estimate_table.py [--part gemm|chips|rmsnorm|kernels|baselines|all] [--json OUT] [--fresh]

Prints, per case: the estimate (ms), the reference figure where tpu-estimate.md gives one and the difference, the
bound, the share of the roofline, the method's limits and the wall time of the estimate. Every figure is an
estimate from libtpu's static profile on this machine, never a measured TPU time. --fresh uses an empty cache so
the wall times are those of a first call.
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
sys.path.insert(0, str(ROOT))

# tpu-estimate.md, "Figures measured this way" (8p_GEMM full size, bf16 8192x8192 @ 8192x28672).
GEMM_V5E = {(128, 128, 128): 459.0, (256, 256, 256): 74.0, (512, 512, 512): 22.6, (512, 1024, 1024): 20.6}
GEMM_V6E = {(512, 1024, 1024): 7.2}
GEMM_XLA_V5E = 19.7
RMSNORM_V5E_STATIC = {8: 2.48, 32: 1.14, 128: 0.76}  # static cycles; the HBM floor is 1.31 ms
RMSNORM_FLOOR_MS = 1.31
SHIPPED_KERNELS = ("8p_GEMM", "12p_RMSNorm", "41k_Gemm_Add_ReLU", "50k_Matmul_GELU_Softmax", "1p_Flash_Attention")
BEYOND_GEMM = ("1p_Flash_Attention", "2p_GQA_Attention", "3p_MLA_Attention", "5p_Flex_Attention", "6p_Paged_Attention",
               "7p_Ragged_Paged_Attention", "9p_SwiGLU_MLP", "10p_Sparse_MoE", "11p_Megablox_GMM", "12p_RMSNorm",
               "13p_Cross_Entropy", "14p_Ragged_Dot", "15p_RetNet_Retention", "16p_Mamba2_SSD",
               "18k_Conv2D_ReLU_BiasAdd", "22k_Conv2d_InstanceNorm_Divide", "33k_Conv3d_Mish_Tanh",
               "29k_Matmul_Swish_Sum_GroupNorm")


def _row(case: str, est, ref: float | None = None, ref_of: str = "estimated_ms", wall: float = 0.0) -> dict:
    value = getattr(est, ref_of) if est.ok else None
    diff = (value / ref - 1.0) if value and ref else None
    return {"case": case, "ok": est.ok, "chip": est.chip, "estimated_ms": est.estimated_ms,
            "static_cycles_ms": est.static_cycles_ms, "reference_ms": ref, "compared": ref_of if ref else None,
            "diff": diff, "bound": est.bound, "fraction_of_roofline": est.fraction_of_roofline,
            "floors": est.floors, "speedup_estimate": est.speedup_estimate,
            "baseline_estimated_ms": est.baseline_estimated_ms, "limits": est.limits,
            "data_dependent": est.data_dependent, "error": est.error, "wall_s": round(wall, 1),
            "fit_points": [(p.get("dims"), p.get("cycles"), p.get("compile_s")) for p in est.fit.get("points", [])]}


def _print(row: dict) -> None:
    if not row["ok"]:
        print(f"{row['case']:<46} {row['chip']:<4} could not estimate: {str(row['error'])[:150]}  [{row['wall_s']} s]",
              flush=True)
        return
    ref = (f" ref {row['reference_ms']:.3g} ({row['compared']}) {row['diff']:+.1%}" if row["reference_ms"] else "")
    frac = f"{row['fraction_of_roofline']:.0%}" if row["fraction_of_roofline"] else "?"
    extra = f" speedup {row['speedup_estimate']:.2f}x" if row["speedup_estimate"] else ""
    lim = f" | limits: {'; '.join(row['limits'])[:160]}" if row["limits"] else ""
    print(f"{row['case']:<46} {row['chip']:<4} {row['estimated_ms']:9.3f} ms (static {row['static_cycles_ms']:.3f}) "
          f"{row['bound']:<8} {frac:>4} of roofline{ref}{extra} [{row['wall_s']} s]{lim}", flush=True)


def gemm(rows: list) -> None:
    from maxkernel.harness.estimate.estimator import estimate

    kernel = str(ROOT / "jaxbench/8p_GEMM/kernel.py")
    for chip, table in (("v5e", GEMM_V5E), ("v6e", GEMM_V6E)):
        for (bm, bn, bk), ref in table.items():
            t0 = time.monotonic()
            est = estimate("8p_GEMM", kernel, chip, tunables={"block_m": bm, "block_n": bn, "block_k": bk})
            rows.append(_row(f"8p_GEMM kernel {bm},{bn},{bk}", est, ref, wall=time.monotonic() - t0))
            _print(rows[-1])
    t0 = time.monotonic()
    est = estimate("8p_GEMM", None, "v5e")
    rows.append(_row("8p_GEMM XLA jnp.matmul", est, GEMM_XLA_V5E, wall=time.monotonic() - t0))
    _print(rows[-1])
    t0 = time.monotonic()
    est = estimate("8p_GEMM", kernel, "v5e", tunables={"block_m": 1024, "block_n": 1024, "block_k": 1024})
    rows.append(_row("8p_GEMM kernel 1024,1024,1024 (VMEM overflow)", est, wall=time.monotonic() - t0))
    _print(rows[-1])


def other_chips(rows: list) -> None:
    """The same GEMM tiling on the chips the reference table does not cover (no reference figure to compare)."""
    from maxkernel.harness.estimate.estimator import estimate

    kernel = str(ROOT / "jaxbench/8p_GEMM/kernel.py")
    for chip in ("v4", "v5p", "7x"):
        t0 = time.monotonic()
        est = estimate("8p_GEMM", kernel, chip, tunables={"block_m": 512, "block_n": 1024, "block_k": 1024})
        rows.append(_row("8p_GEMM kernel 512,1024,1024", est, wall=time.monotonic() - t0))
        _print(rows[-1])


def rmsnorm(rows: list) -> None:
    from maxkernel.harness.estimate.estimator import estimate

    kernel = str(ROOT / "jaxbench/12p_RMSNorm/kernel.py")
    for block, ref in RMSNORM_V5E_STATIC.items():
        t0 = time.monotonic()
        est = estimate("12p_RMSNorm", kernel, "v5e", tunables={"block_rows": block})
        rows.append(_row(f"12p_RMSNorm kernel block_rows={block}", est, ref, "static_cycles_ms", time.monotonic() - t0))
        _print(rows[-1])
        if est.ok:
            print(f"{'':<46}      HBM floor {est.floors['memory_ms']:.3f} ms (reference {RMSNORM_FLOOR_MS})")


def kernels(rows: list) -> None:
    from maxkernel.harness.estimate.estimator import estimate

    for task in SHIPPED_KERNELS:
        t0 = time.monotonic()
        est = estimate(task, str(ROOT / "jaxbench" / task / "kernel.py"), "v5e")
        rows.append(_row(f"{task} shipped kernel", est, wall=time.monotonic() - t0))
        _print(rows[-1])


def baselines(rows: list) -> None:
    from maxkernel.harness.estimate.estimator import estimate

    for task in BEYOND_GEMM:
        t0 = time.monotonic()
        est = estimate(task, None, "v5e")
        rows.append(_row(f"{task} XLA baseline", est, wall=time.monotonic() - t0))
        _print(rows[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("gemm", "chips", "rmsnorm", "kernels", "baselines", "all"), default="all")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--fresh", action="store_true", help="an empty estimate cache (first-call wall times)")
    args = ap.parse_args()
    if args.fresh:
        os.environ["MAXKERNEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="maxkernel-estimate-bench-")
    rows: list = []
    parts = {"gemm": gemm, "chips": other_chips, "rmsnorm": rmsnorm, "kernels": kernels, "baselines": baselines}
    for name, fn in parts.items():
        if args.part in (name, "all"):
            print(f"# {name}", flush=True)
            fn(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
