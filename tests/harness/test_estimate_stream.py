"""What libtpu's static profile prices for a plain stream, per chip (estimate.PROFILER_STREAM): measured again here,
so a libtpu whose DMA model changes fails this test instead of silently moving the under-priced line; and that line
applied: a memory-bound profile at the profiler's own stream rate is not under-priced, one far below it is."""

import json
import subprocess
import sys

import pytest

from maxkernel import chips
from maxkernel.harness.estimate.estimator import PROFILER_STREAM, _fit
from maxkernel.tasks import load_task

MEASURE = r'''
import json, os, sys, tempfile
from pathlib import Path
dump = Path(tempfile.mkdtemp())
os.environ["LIBTPU_INIT_ARGS"] = f"--xla_jf_dump_static_llo_profile_to={dump}"
import jax, jax.numpy as jnp
from maxkernel import chips
from maxkernel.harness.jobs import compile_job
from maxkernel.harness.jobs.estimate_job import _lowered_text
from maxkernel.harness.jobs.estimate_compile_job import profiled_compile
out = {}
for name in sys.argv[1:]:
    chip = chips.get(name)
    dev = compile_job._topology_device(chip)
    structs = (jax.ShapeDtypeStruct((8192, 8192), jnp.bfloat16),)
    got = profiled_compile(_lowered_text(lambda x: x * 2, structs, chip, dev), dev, dump)
    out[name] = 2 * 8192 * 8192 * 2 / (sum(got["ops"].values()) / chip.clock)
print(json.dumps(out))
'''


@pytest.mark.integration
def test_the_profilers_stream_rate_is_the_one_the_estimate_assumes():
    r = subprocess.run([sys.executable, "-c", MEASURE, *PROFILER_STREAM], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    measured = json.loads(r.stdout.strip().splitlines()[-1])
    for chip, rate in PROFILER_STREAM.items():
        assert measured[chip] == pytest.approx(rate, rel=0.1), (chip, measured[chip])
        assert measured[chip] > 1.5 * chips.get(chip).device_hbm_bytes_per_s  # optimistic, as the line assumes


@pytest.mark.unit
def test_a_stream_priced_as_the_profiler_prices_streams_is_not_under_priced():
    """12p's baseline on v6e: a profile at 0.47 of its HBM floor is the profiler's 4x-optimistic stream (under_priced
    said so of every memory-bound v6e program before); a profile at a tenth of the stream is missing work."""
    v6e, task = chips.get("v6e"), load_task("12p_RMSNorm")
    io = 2 * 8 * 4096 * 8192 * 2 + 8192 * 2
    floor_cycles = io / v6e.device_hbm_bytes_per_s * v6e.clock
    head = {"plan": {"shrunk_dims": ["batch"], "full_dims": {"batch": 8}, "rejected": {}},
            "facts": {"pallas_calls": [], "data_dependent": []}, "block_traffic": {"bytes": None, "notes": []}}

    def fitted(share):
        pts = [{"point": {"dims": {"batch": 8 * x}, "x": x, "tiles": None, "ops": {"f": int(share * floor_cycles * x)},
                          "zero_cycle_bytes": {}, "compile_s": 1.0, "trips": {}, "loops": []}} for x in (0.25, 0.5, 1)]
        return _fit(dict(ok=False, program="baseline", chip="v6e", libtpu_flags=[], libtpu="t"), [head] + pts, task,
                    v6e, "full", io)

    assert fitted(0.47).under_priced is None
    low = fitted(0.1)
    assert low.under_priced and "streaming the task's bytes" in low.under_priced
    assert low.estimated_ms == pytest.approx(low.floors["memory_ms"], rel=1e-3)
