"""Old and new XLA baselines agree: a task's baseline.py at a git revision against the working tree's, at smoke size.

For each task and seed, both workloads run jitted on the same inputs; the figures are max|new - old| / max|old|
for the bf16 outputs and for both run on f32-widened inputs (numerics.reference_outputs), and the error of each
bf16 output against the f32 reference. With --q-chunk N the
new baseline's Q_CHUNK is set to N too, so its query loop takes several steps even at smoke size.

Run: python benchmarks/baseline_equivalence.py --task 1p_Flash_Attention [--rev HEAD] [--q-chunk 32] [--seeds 0 1 2]
     [--dims seq_len=1024]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", action="append", required=True)
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--size", default="smoke")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--q-chunk", type=int, action="append", help="also run with the new Q_CHUNK set to this")
    ap.add_argument("--dims", nargs="+", metavar="KEY=INT", default=[],
                    help="override --size's dimensions (e.g. seq_len=1024), as a size of its own")
    args = ap.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import numpy as np

    from maxkernel.harness.verdict.numerics import reference_outputs, rel_error
    from maxkernel.tasks import load_task

    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.task:
            task = load_task(name)
            size = args.size
            if args.dims:
                # The inputs come from the working tree's create_inputs, which reads its module's SIZES.
                extra = {k: int(v) for k, v in (d.split("=", 1) for d in args.dims)}
                task.module.SIZES["equivalence"] = {**task.module.SIZES.get(size, {}), **extra}
                size = "equivalence"
            rel = task.baseline_file.relative_to(ROOT)
            old_src = subprocess.run(["git", "show", f"{args.rev}:{rel}"], cwd=ROOT, check=True,
                                     capture_output=True, text=True).stdout
            old_path = Path(tmp) / f"old_{name}.py"
            old_path.write_text(old_src)
            old = _import(old_path, f"_old_{name}")
            new = _import(task.baseline_file, f"_new_{name}")
            chunks = [None] + (args.q_chunk or [])
            for seed in args.seeds:
                inputs = task.create_inputs(size=size, seed=seed)
                ref = reference_outputs(old.workload, inputs)
                old_out = [np.asarray(x) for x in jax.tree.leaves(jax.jit(old.workload)(*inputs))]
                for chunk in chunks:
                    saved = new.Q_CHUNK
                    if chunk:
                        new.Q_CHUNK = chunk
                    try:
                        new_out = [np.asarray(x) for x in jax.tree.leaves(jax.jit(new.workload)(*inputs))]
                        new_ref = reference_outputs(new.workload, inputs)
                    finally:
                        new.Q_CHUNK = saved
                    for o, n, r, nr in zip(old_out, new_out, ref, new_ref):
                        assert o.shape == n.shape and o.dtype == n.dtype, (o.shape, n.shape, o.dtype, n.dtype)
                        diff = rel_error(n, o)
                        f32_diff = rel_error(nr, r)  # both workloads on f32-widened inputs
                        worst = max(worst, diff, f32_diff)
                        differing = int(np.count_nonzero(o.astype(np.float64) != n.astype(np.float64)))
                        steps = -(-inputs[0].shape[2 if name[:2] in ("1p", "5p") else 1] // (chunk or new.Q_CHUNK))
                        print(f"{name:<22} seed {seed}  Q_CHUNK {chunk or new.Q_CHUNK:>4} ({steps} step(s))  "
                              f"{str(n.dtype)} new vs old {diff:.1e} ({differing}/{n.size} differ), "
                              f"f32 path {f32_diff:.1e}; "
                              f"vs f32 ref: old {rel_error(o, r):.2e} new {rel_error(n, r):.2e}")
    print(f"worst new-vs-old relative difference: {worst:.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
