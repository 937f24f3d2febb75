"""`maxkernel port` on every held-in source, as a user runs it: the replay porter's rounds, the harness's equivalence
check, the task folder, and two kernels judged on that task (a Pallas kernel written for it must be correct, one
that copies its first input through must not be). One row per source with its seconds.

The suite proves this path end to end on one source per branch (tests/cli/test_cli_port.py: triton_softmax;
tests/test_porting.py: rmsnorm_module with --optimize) and each source's equivalence in tests/port/test_check.py;
this keeps the per-source figures.

Run: python benchmarks/port_held_in.py [--source rmsnorm_module ...] [--json]   (needs the [port] extra: torch)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "tests" / "port" / "sources"
KERNELS = {"rmsnorm_module": ROOT / "maxkernel" / "agents" / "replay" / "kernels" / "port_rmsnorm_module_pallas.py",
           **{stem: ROOT / "tests" / "port" / "kernels" / f"{stem}_pallas.py"
              for stem in ("swiglu_mlp", "triton_softmax", "fused_attention")}}
ARGS = {
    "rmsnorm_module": ["--arg", "bf16[T=4096,H=2048]", "--init", "dim=H"],
    "swiglu_mlp": ["--arg", "bf16[T=2048,D=1024]", "--dim", "F=2816", "--init", "dim=D", "--init", "hidden=F"],
    "triton_softmax": ["--arg", "f32[R=8192,C=2048]"],
    "fused_attention": ["--arg", "bf16[B=1,H=8,S=2048,D=128]"] * 3 + ["--static", "causal=True"],
}
COPY_KERNEL = ("import jax\nfrom jax.experimental import pallas as pl\n\n\ndef _copy(x_ref, o_ref):\n"
               "    o_ref[...] = x_ref[...]\n\n\ndef workload(x, *rest):\n"
               "    return pl.pallas_call(_copy, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)\n")


def one(stem: str, work: Path) -> dict:
    from maxkernel.harness.verdict.evaluate import evaluate

    out = work / f"port_{stem}"
    env = dict(os.environ, JAX_PLATFORMS="cpu", MAXKERNEL_DATA_DIR=str(work / "data"))
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "maxkernel.cli", "port", "--from", str(SOURCES / f"{stem}.py"),
                           *ARGS[stem], "--model", "replay", "--out", str(out), "--json"],
                          capture_output=True, text=True, cwd=work, env=env)
    row = {"source": stem, "exit": proc.returncode, "port_s": round(time.monotonic() - t0, 1)}
    if proc.returncode != 0:
        return {**row, "error": proc.stderr.strip().splitlines()[-1:] or [""]}
    doc = json.loads(proc.stdout)
    row.update(equivalent=doc["equivalent"], rounds=doc["port"].get("rounds"), seeds=len(doc["port"]["seeds"]),
               task_ok=bool(doc["task"] and doc["task"]["ok"]))
    copy = work / f"copy_{stem}.py"
    copy.write_text(COPY_KERNEL)
    t1 = time.monotonic()
    good = evaluate(str(out), KERNELS[stem], size="smoke", estimate=False)
    bad = evaluate(str(out), copy, size="smoke", estimate=False)
    row.update(pallas_kernel=good.status, copy_kernel=bad.status, judge_s=round(time.monotonic() - t1, 1),
               held=good.status == "correct" and bad.status in ("incorrect", "rejected") and doc["equivalent"])
    return row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", action="append", choices=sorted(ARGS), help="repeatable; default: all four")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="port-held-in-") as tmp:
        for stem in args.source or sorted(ARGS):
            rows.append(one(stem, Path(tmp)))
            if not args.json:
                r = rows[-1]
                print(f"{stem:16s} exit {r['exit']}  port {r['port_s']:6.1f} s  rounds {r.get('rounds')}  "
                      f"equivalent {r.get('equivalent')}  pallas {r.get('pallas_kernel')}  copy {r.get('copy_kernel')}"
                      f"  judged in {r.get('judge_s')} s  {'HELD' if r.get('held') else 'FAILED'}", flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0 if all(r.get("held") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
