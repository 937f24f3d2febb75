"""Hint coverage: every mistake in maxkernel/evals/mistakes.py through its real check (deviceless TPU compile,
the strict interpreter, the verdict); prints the families that got a hint of their own family naming the fix,
out of the families seen, and the mistakes that did not.

    python benchmarks/hints.py [--json]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from maxkernel.evals.mistakes import MISTAKES, run


def main() -> int:
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for m in MISTAKES:
            got = run(m, Path(tmp) / m.name)
            got["hit"] = got["hint_family"] == m.family and m.expect in got["hint"]
            rows.append(got)
            print(f"{'hint' if got['hit'] else 'MISS'}  {m.name} ({m.check}): {got['hint'][:110]}", file=sys.stderr)
    families = sorted({r["family"] for r in rows})
    covered = sorted({r["family"] for r in rows} - {r["family"] for r in rows if not r["hit"]})
    out = {"mistakes": len(rows), "hits": sum(r["hit"] for r in rows), "families_seen": len(families),
           "families_with_specific_hint": len(covered), "coverage": round(len(covered) / len(families), 3),
           "seconds": round(time.perf_counter() - t0, 1), "misses": [r for r in rows if not r["hit"]],
           "families": families}
    if "--json" in sys.argv:
        print(json.dumps(out, indent=2))
    else:
        print(f"hints: {out['families_with_specific_hint']}/{out['families_seen']} families with a specific hint "
              f"({out['coverage']:.0%}); {out['hits']}/{out['mistakes']} mistakes; {out['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
