"""python -m maxkernel.tasknew TASK [TASK ...]: a shipped task's proof (traces, smoke time, tolerance, non-degenerate)."""

import sys

from maxkernel.tasknew.validate import Refused, suite_checks
from maxkernel.tasks import load_task

failed = 0
for spec in sys.argv[1:]:
    try:
        for c in suite_checks(load_task(spec)):
            print(f"{'ok  ' if c.ok else 'FAIL'} {spec}: {c.name}: {c.detail}")
    except Refused as exc:
        failed += 1
        print(f"FAIL {spec}: {exc}")
sys.exit(1 if failed else 0)
