"""Retrieval hit rate: for each of the 50 suite tasks, is a kernel of the right family among the top 2 that
maxkernel.knowledge.examples returns? The families below are labelled by hand from what each task computes
(not from the ranker's feature table), so the figure measures the ranker.

    python benchmarks/retrieval.py [--json]
"""

from __future__ import annotations

import json
import sys
import time

import jaxbench
from maxkernel.knowledge.examples import corpus, search
from maxkernel.tasks import load_task

# Kernel families, by path fragments of the corpus (jaxbench reference kernels and jax's own ops).
FAMILIES = {
    "attention": ("flash_attention", "splash_attention", "1p_Flash_Attention", "gpu/attention", "decode_attention",
                  "paged_attention", "attention_mgpu"),
    "paged": ("paged_attention",),
    "grouped_matmul": ("megablox/gmm", "ragged_dot"),
    "matmul": ("8p_GEMM", "41k_Gemm_Add_ReLU", "50k_Matmul_GELU_Softmax", "tpu/matmul", "matmul_mgpu"),
    "norm": ("12p_RMSNorm", "rms_norm", "layer_norm"),
    "softmax": ("50k_Matmul_GELU_Softmax", "gpu/softmax", "flash_attention"),
}

A, P, G, M, N, S = "attention", "paged", "grouped_matmul", "matmul", "norm", "softmax"
# What a good example for each task looks like (any of these families is a hit).
EXPECTED = {
    "1p": {A}, "2p": {A}, "3p": {A}, "4p": {A}, "5p": {A}, "6p": {P}, "7p": {P}, "8p": {M}, "9p": {M},
    "10p": {G}, "11p": {G}, "12p": {N}, "13p": {S}, "14p": {G}, "15p": {A, M}, "16p": {A, M}, "17p": {M},
    "18k": {M}, "19k": {M}, "20k": {M}, "21k": {M}, "22k": {M, N}, "23k": {M, S}, "24k": {M, S}, "25k": {M, N},
    "26k": {M, N}, "27k": {M}, "28k": {M, N}, "29k": {M, N}, "30k": {M}, "31k": {M, N}, "32k": {M, S},
    "33k": {M}, "34k": {M, N}, "35k": {M}, "36k": {M}, "37k": {M}, "38k": {M, S}, "39k": {M}, "40k": {M, N},
    "41k": {M}, "42k": {M}, "43k": {M, N, S}, "44k": {M}, "45k": {M, N}, "46k": {M, N, S}, "47k": {M},
    "48k": {M, N}, "49k": {M}, "50k": {M, S},
}


def families(path: str) -> set[str]:
    return {f for f, marks in FAMILIES.items() if any(m in path for m in marks)}


def main() -> int:
    t0 = time.perf_counter()
    rows, hits = [], 0
    for name in jaxbench.task_names():
        got = search(load_task(name), k=2)
        want = EXPECTED[name.split("_")[0]]
        hit = any(families(g["path"]) & want for g in got)
        hits += hit
        rows.append({"task": name, "hit": hit, "want": sorted(want), "top2": [g["path"] for g in got]})
    took = time.perf_counter() - t0
    out = {"tasks": len(rows), "hits": hits, "hit_rate": round(hits / len(rows), 3), "corpus": len(corpus()),
           "seconds_all_tasks": round(took, 2), "misses": [r for r in rows if not r["hit"]]}
    if "--json" in sys.argv:
        print(json.dumps(out, indent=2))
    else:
        print(f"retrieval: {hits}/{len(rows)} tasks have a kernel of the right family in the top 2 "
              f"({out['hit_rate']:.0%}); corpus {out['corpus']} kernels; {took:.2f} s for all tasks")
        for r in out["misses"]:
            print(f"  miss {r['task']}: want {'/'.join(r['want'])}, got {', '.join(r['top2'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
