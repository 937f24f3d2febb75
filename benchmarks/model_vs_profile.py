"""XLA's own cost model against libtpu's static profile, op by op, on the suites' XLA baselines.

    python3 benchmarks/model_vs_profile.py [--chip v5e --chip v6e] [--out benchmarks/results/model_vs_profile]

The static profile prices an op whose DMA reaches HBM at 0 cycles; the estimator fills such an op with XLA's cost
model's cycles (its `estimated_cycles` under the classic model, in the compiled program's backend_config) where
those exceed its HBM time. This measures how far that model is from the profile on the ops both price: for each
case (a baseline at a small size, compiled for the chip's compile-only topology, one process per case), every op
with a classic-model figure, its profile cycles, its DMA type, and the ratio model / profile. Writes OUT.json and
OUT.md, after each case; a run stopped early is resumed (the cases in OUT.json are kept, not redone). Both figures
are libtpu's estimates, not measured TPU times.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = [  # (task, full-size overrides): small enough to profile in a minute or two
    ("18k_Conv2D_ReLU_BiasAdd", {"batch_size": 2}),
    ("39k_Conv2d_GELU_GlobalAvgPool", {"batch_size": 1}),
    ("39k_Conv2d_GELU_GlobalAvgPool", {"batch_size": 4}),
    ("46k_Conv2d_GroupNorm_Tanh_HardSwish_ResidualAdd_LogSumExp", {"batch_size": 4}),
    ("25k_Conv3d_GroupNorm_Mean", {"batch_size": 2}),
    ("42k_Gemm_Max_Subtract_GELU", {"batch_size": 256}),
    ("8p_GEMM", {"M": 512}),
]


def one(task: str, over: dict, chip_name: str) -> dict:
    """Compile one case in this process (LIBTPU_INIT_ARGS set by the caller) and read both prices of each op."""
    import importlib

    import jax
    from jax._src import compiler

    from maxkernel import chips
    from maxkernel.harness.jobs import compile_job, estimate_compile_job, estimate_job

    dump = Path(os.environ["MK_PROFILE_DUMP"])
    base = importlib.import_module(f"jaxbench.{task}.baseline")
    dims = {k: v for k, v in base.CONFIG.items() if isinstance(v, int)}
    dims.update(over)
    base.SIZES["__probe__"] = dims
    structs = jax.eval_shape(lambda: base.create_inputs(size="__probe__", seed=0))
    chip = chips.get(chip_name)
    dev = compile_job._topology_device(chip)
    text = estimate_job._lowered_text(base.workload, structs, chip, dev)
    kept = []
    real = compiler.backend_compile_and_load

    def keep(*a, **k):
        exe = real(*a, **k)
        kept.append("\n".join(m.to_string() for m in exe.hlo_modules()))
        return exe

    compiler.backend_compile_and_load = keep
    got = estimate_compile_job.profiled_compile(text, dev, dump)
    hlo = kept[-1]
    model = estimate_job.model_cycles(hlo, list(got["ops"]))
    dma = {}
    for f in dump.glob("*static_llo_profile*"):
        t = f.read_text(errors="replace")
        for name, kind in re.findall(r'hlo_op_name: "([^"]+)".*?dma_instruction_type: (\w+)', t, re.S):
            dma[name] = kind.replace("DMA_INSTRUCTION_TYPE_", "")
    ops = [{"op": n, "profile": int(c), "model": model.get(n), "dma": dma.get(n),
            "zero_cycle_bytes": got["zero_cycle_bytes"].get(n)} for n, c in got["ops"].items()]
    return {"task": task, "dims": over, "chip": chip_name, "compile_s": round(got["compile_s"], 1),
            "profile_cycles": sum(o["profile"] for o in ops), "ops": ops}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chip", action="append", default=None)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "model_vs_profile"))
    ap.add_argument("--one", nargs=3, metavar=("TASK", "DIMS_JSON", "CHIP"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one[0], json.loads(args.one[1]), args.one[2])))
        return 0
    out = Path(args.out)
    done = out.with_suffix(".json")
    results = json.loads(done.read_text()) if done.is_file() else []  # resumable: a case measured is not redone
    for chip in args.chip or ["v5e", "v6e"]:
        for task, over in CASES:
            if any(r["task"] == task and r["dims"] == over and r["chip"] == chip for r in results):
                continue
            with tempfile.TemporaryDirectory() as dump:
                env = {**os.environ, "MK_PROFILE_DUMP": dump,
                       "LIBTPU_INIT_ARGS": f"--xla_jf_dump_static_llo_profile_to={dump}"}
                run = subprocess.run([sys.executable, __file__, "--one", task, json.dumps(over), chip],
                                     capture_output=True, text=True, env=env, timeout=900)
            if run.returncode != 0:
                errs = [ln for ln in run.stderr.splitlines() if ln.startswith(("Traceback", "RuntimeError", "ValueError",
                                                                              "jax", "Error", "MemoryError"))]
                why = (f"killed by signal {-run.returncode} (9: most likely out of memory)" if run.returncode < 0
                       else (errs or ["no error line"])[-1][:300])
                print(f"{task} {over} {chip}: failed: {why}", file=sys.stderr)
                continue
            results.append(json.loads(run.stdout.strip().splitlines()[-1]))
            r = results[-1]
            print(f"{chip} {task} {over}: {r['profile_cycles']:,} profile cycles, compile {r['compile_s']} s",
                  file=sys.stderr)
            _write(results, out)  # after each case: a long run stopped early keeps what it measured
    _write(results, out)
    return 0


def _write(results: list[dict], out: Path) -> None:
    both = [(r, o) for r in results for o in r["ops"] if o["model"] and o["profile"]]
    zero = [(r, o) for r in results for o in r["ops"] if o["model"] and not o["profile"]]
    ratios = [o["model"] / o["profile"] for _, o in both]
    lines = ["# XLA's cost model against libtpu's static profile (both estimates, not measured)", "",
             f"Ops with a classic-model figure that the profile also prices: {len(both)}; model / profile "
             + (f"median {statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}." if ratios
                else "none."),
             "DMA types of the ops the profile priced at 0 cycles (views excluded): " + ", ".join(
                 f"{k} {v}" for k, v in sorted(collections.Counter(
                     o["dma"] for r in results for o in r["ops"] if not o["profile"] and o["zero_cycle_bytes"]
                 ).items(), key=str)) + ".", "",
             "| chip | task | dims | op | profile cycles | model cycles | model / profile | DMA |", "|---|---|---|---|---|---|---|---|"]
    for r, o in both + zero:
        ratio = f"{o['model'] / o['profile']:.2f}" if o["profile"] else "profile 0"
        lines.append(f"| {r['chip']} | {r['task']} | {r['dims']} | {o['op']} | {o['profile']:,} | {o['model']:,} | "
                     f"{ratio} | {o['dma']} |")
    out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:3]))


if __name__ == "__main__":
    raise SystemExit(main())
