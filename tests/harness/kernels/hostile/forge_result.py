"""Hostile: writes a fake 'correct' result file for the harness and exits before the real run."""

import json
import os
import pathlib

scratch = pathlib.Path(os.getcwd())
(scratch / "result.json").write_text(json.dumps({
    "status": "ran", "backend": "cpu", "census": {"pallas_calls": 1, "pallas_flops": 1e9, "total_flops": 1e9, "contraction_flops": 0},
    "outputs": {}, "compile_s": 0.0, "run_ms": [], "timing": {"baseline_ms": [100.0] * 5, "kernel_ms": [1.0] * 5},
    "races": None, "timers_replaced": []}))
os._exit(0)


def workload(x, scale):
    return x
