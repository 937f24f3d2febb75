"""Full sizes fit the chips they claim: each XLA baseline, compiled deviceless at full size for v5e, fits its HBM."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

import _extras
import jaxbench
from maxkernel import chips
from maxkernel.tasks import FULL_SIZE_CHIPS, TaskError, load_task

NAMES = jaxbench.task_names()
CHIP = "v5e"  # the suite's first target and the smallest HBM of FULL_SIZE_CHIPS
COMPILE_TIMEOUT_S = 300

# compile_job.run on one baseline, in a fresh process: libtpu's compiles of 50 full-size programs would pile up in
# one, and a compile that hangs must be killable.
_CHILD = textwrap.dedent("""
    import json, sys, tempfile
    from pathlib import Path
    from maxkernel.harness.jobs import compile_job
    task, kernel, chip = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as scratch:
        r = compile_job.run({"task": task, "kernel": kernel, "chip": chip, "size": "full"}, Path(scratch))
    print(json.dumps({k: r[k] for k in ("ok", "stage", "error", "memory")}))
""")


def compile_full_size(name: str, chip: str, tmp_path) -> dict:
    """The deviceless full-size compile of `name`'s baseline for `chip`: compile_job.run's ok/stage/error/memory."""
    task = load_task(name)
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, name, str(task.baseline_file), chip], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"{name}: the full-size compile for {chip} took over {COMPILE_TIMEOUT_S} s")
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, f"{name}: compile child exited {proc.returncode}: {err[-2000:]}"
    return json.loads(lines[-1])


def hbm_need(memory: dict) -> int:
    """The compiled program's HBM need: memory_analysis's peak, or argument + output + temp without one."""
    if memory.get("peak_memory_in_bytes"):
        return memory["peak_memory_in_bytes"]
    return memory["argument_size_in_bytes"] + memory["output_size_in_bytes"] + memory["temp_size_in_bytes"]


@pytest.mark.slow
@pytest.mark.timeout(COMPILE_TIMEOUT_S + 60)
@pytest.mark.parametrize("name", NAMES)
def test_full_size_baseline_fits_v5e_hbm(name, tmp_path):
    task = load_task(name)
    if CHIP not in task.fits_chips:
        pytest.skip(f"{name} declares FITS_CHIPS = {task.fits_chips}: its full size does not claim {CHIP}")
    r = compile_full_size(name, CHIP, tmp_path)
    if not r["ok"] and "libtpu cannot build" in (r["error"] or ""):
        _extras.missing(f"needs libtpu for a deviceless {CHIP} compile: {r['error']}")
    hbm = chips.get(CHIP).hbm_bytes
    assert r["ok"], (f"{name}: the full-size baseline does not compile for {CHIP} ({r['stage']}): {r['error']}\n"
                     f"Shrink what XLA holds at once, or declare FITS_CHIPS without {CHIP} in its baseline.py.")
    assert r["memory"], f"{name}: the compiled program reports no memory_analysis"
    need = hbm_need(r["memory"])
    assert need <= hbm, (f"{name}: the full-size baseline needs {need / 1e9:.2f} GB on {CHIP}, over its "
                         f"{hbm / 1e9:.2f} GB of HBM (memory_analysis: {r['memory']})")


@pytest.mark.unit
def test_every_task_claims_some_tpu_chips():
    tpus = {c.name for c in chips.CHIPS.values() if c.is_tpu}
    for name in NAMES:
        fits = load_task(name).fits_chips
        assert fits and set(fits) <= tpus, f"{name}: FITS_CHIPS = {fits}"


@pytest.mark.unit
@pytest.mark.parametrize("declared, ok", [
    (None, FULL_SIZE_CHIPS), ('("v5p", "v6e")', ("v5p", "v6e")), ('("v5p", "h100")', None), ('"v5p"', None),
])
def test_fits_chips_is_validated(tmp_path, declared, ok):
    src = (jaxbench.task_dir("12p_RMSNorm") / "baseline.py").read_text()
    folder = tmp_path / f"task_{abs(hash(declared))}"
    folder.mkdir()
    (folder / "baseline.py").write_text(src + (f"\nFITS_CHIPS = {declared}\n" if declared else ""))
    task = load_task(folder)
    if ok is None:
        with pytest.raises(TaskError, match="FITS_CHIPS"):
            task.fits_chips
    else:
        assert task.fits_chips == ok
