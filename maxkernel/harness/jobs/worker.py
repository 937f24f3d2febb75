"""Entry point of a sandboxed child (a leaf: it imports no parent-side logic): check it holds no privilege, preload
JAX, read one job from stdin, run it, write result.json, exit. With --serve it is a persistent judge instead: one
judge job per line of stdin, each in its own subfolder (harness/verdict/judge_service.py)."""

from __future__ import annotations

# First: the timers are taken before any job (and so any candidate code) is imported.
from maxkernel.harness.jobs.timers import TIMERS, replaced_timers  # noqa: F401  (re-exported for older callers)

import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

HANDLERS = {
    "reference": "maxkernel.harness.jobs.reference_job",
    "candidate": "maxkernel.harness.jobs.candidate_job",
    "compile": "maxkernel.harness.jobs.compile_job",
    "compile_many": "maxkernel.harness.jobs.compile_many_job",
    "profile": "maxkernel.harness.jobs.profile_job",
    "estimate": "maxkernel.harness.jobs.estimate_job",
    "estimate_compile": "maxkernel.harness.jobs.estimate_compile_job",
    "port": "maxkernel.harness.jobs.port_job",
    "task": "maxkernel.harness.jobs.task_job",
    "task_build": "maxkernel.tasknew.build_job",
    "program_build": "maxkernel.tasknew.program_job",
}


def _preload(interpreter: bool = True) -> None:
    """Import what every job needs; with `interpreter`, also pay the TPU interpreter's set-up. A compile worker
    (--warm-compiler) and the judge (--serve) never run a kernel in it: they skip it (about 1 s of CPU each)."""
    import jax
    import jax.numpy  # noqa: F401
    from jax.experimental import pallas  # noqa: F401
    from jax.experimental.pallas import tpu  # noqa: F401

    import maxkernel.harness.jobs.candidate_job  # noqa: F401
    import maxkernel.harness.jobs.reference_job  # noqa: F401

    if interpreter and jax.default_backend() == "cpu":
        _warm_interpreter()
    _warm_hints()


def _warm_hints() -> None:
    """Import what the hints load lazily (the installed-API answers, pydantic) before a job: once the audit hook
    is armed (harness/sandbox/guard.py), a library's first import that compiles strings (typing's forward references in
    pydantic's TypedDicts) would be refused."""
    from maxkernel.harness.hints.diagnose import diagnose, lint

    for text in ("AttributeError: module 'jax.experimental.pallas.tpu' has no attribute 'TPUCompilerParams'",
                 "ValueError: Invalid dtype for `swap`. Ref dtype: bfloat16. Value dtype: float32. ",
                 "output 0: 98304 NaN/Inf values, first at (0, 0)"):
        try:
            diagnose(text, "v5e", "import jax\n")
        except Exception:  # noqa: BLE001  (a failed warm-up only costs the job the import)
            pass
    lint("import jax\n")


def _warm_interpreter() -> None:
    """Pay the TPU interpreter's one-time set-up (about 1.5 s) before a job arrives, not during it."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def copy(x_ref, o_ref):
        o_ref[...] = x_ref[...] + 1.0

    x = jnp.zeros((8, 128), jnp.float32)
    with pltpu.force_tpu_interpret_mode(pltpu.InterpretParams(detect_races=True)):
        fn = jax.jit(lambda v: pl.pallas_call(copy, out_shape=jax.ShapeDtypeStruct(v.shape, v.dtype))(v))
        jax.block_until_ready(fn(x))


def _write(scratch: Path, result: dict) -> None:
    tmp = scratch / "result.json.tmp"
    tmp.write_text(json.dumps(result, default=str))
    tmp.replace(scratch / "result.json")


def _preload_compiler(chip_name: str) -> None:
    """Load libtpu and compile a small shipped kernel for `chip_name`, so the job's compile is a warm one."""
    import jaxbench
    from maxkernel import chips
    from maxkernel.harness.jobs import compile_job as _compile_job

    kernel = jaxbench.task_dir("12p_RMSNorm") / "kernel.py"
    _compile_job.run({"task": "12p_RMSNorm", "kernel": str(kernel), "chip": chips.get(chip_name).name,
                      "size": "smoke", "guard": False}, Path(sys.argv[1]))  # the shipped kernel: trusted


def privilege_problems() -> list[str]:
    """What this process could use to break out of its sandbox: capabilities, uid 0, a working remount."""
    import ctypes
    import errno

    problems = []
    status = Path("/proc/self/status").read_text()
    for field in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
        value = next((ln.split()[1] for ln in status.splitlines() if ln.startswith(field + ":")), None)
        if value is None or int(value, 16) != 0:
            problems.append(f"{field} {value}")
    if os.getuid() == 0 or os.geteuid() == 0:
        problems.append("uid 0")
    libc = ctypes.CDLL(None, use_errno=True)
    ms_remount, ms_bind, ms_rdonly = 32, 4096, 1
    if libc.mount(b"none", b"/", None, ms_remount | ms_bind | ms_rdonly, None) == 0:
        problems.append("mount succeeded")
    elif ctypes.get_errno() != errno.EPERM:
        problems.append(f"mount failed with {errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())}, not EPERM")
    return problems


SERVED = ("reference",)  # the only kind a serving judge takes: the judge's side, never candidate code


def _serve(scratch: Path) -> None:
    """Serve judge jobs until stdin closes: one JSON line each, run in its own subfolder `dir` of the scratch
    (made by the parent), its result.json written there. A job that leaves a thread behind (a census that overran
    its bound) or fails in the worker itself ends the judge after its result: the next job gets a fresh one."""
    import gc
    import re
    import threading

    before = {t.ident for t in threading.enumerate()}
    for line in sys.stdin.buffer:
        job = json.loads(line or b"{}")
        name = str(job.pop("dir", ""))
        if not re.fullmatch(r"job-[0-9]{1,9}", name) or not (scratch / name).is_dir():
            os._exit(3)  # the parent names a folder it made; anything else is not a parent speaking
        folder = scratch / name
        os.chdir(folder)  # a folder task's files are in the job's folder, as a single job's are in its scratch
        try:
            if job.get("kind") not in SERVED:
                raise ValueError(f"a judge serves {', '.join(SERVED)} jobs only, not {job.get('kind')!r}")
            result = importlib.import_module(HANDLERS[job["kind"]]).run(job, folder)
        except BaseException as exc:  # noqa: BLE001  (a failure is this job's, reported like a single job's)
            result = {"status": "error", "stage": "worker", "error": f"{type(exc).__name__}: {exc}",
                      "traceback": traceback.format_exc()[-3000:]}
        gc.collect()
        left = [t.name for t in threading.enumerate() if t.ident not in before and t.is_alive()]
        retire = bool(left) or result.get("stage") == "worker"
        if retire:
            result["judge_retiring"] = f"left running: {', '.join(left)}" if left else "failed in the worker"
        os.chdir(scratch)
        _write(folder, result)
        sys.stdout.flush()
        sys.stderr.flush()
        if retire:
            os._exit(0)
    os._exit(0)


def main() -> None:
    scratch = Path(sys.argv[1])
    sys.dont_write_bytecode = True  # no bytecode of the scratch's files: the audit hook checks sources, not caches
    if "--isolated" in sys.argv[2:]:
        problems = privilege_problems()
        if problems:  # checked before any job (and so any candidate code) runs
            serving = "--serve" in sys.argv[2:]
            job = json.loads((sys.stdin.buffer.readline() if serving else sys.stdin.buffer.read()) or b"{}")
            folder = scratch / str(job.get("dir", "")) if serving else scratch
            _write(folder if folder.is_dir() else scratch,
                   {"status": "error", "stage": "sandbox",
                    "error": "refused to run the candidate: the sandbox is privileged (" + ", ".join(problems)
                             + "); it must hold no capability and be unable to mount"})
            os._exit(0)
    _preload(interpreter=not any(a == "--serve" or a.startswith("--warm-compiler=") for a in sys.argv[2:]))
    for arg in sys.argv[2:]:
        if arg.startswith("--warm-compiler="):
            try:
                _preload_compiler(arg.split("=", 1)[1])
            except Exception:  # noqa: BLE001  (a failed warm-up only costs the job its first-compile time)
                pass
    if "--serve" in sys.argv[2:]:
        _serve(scratch)
    job = json.loads(sys.stdin.buffer.read() or b"{}")
    try:
        handler = importlib.import_module(HANDLERS[job["kind"]])
        result = handler.run(job, scratch)
    except BaseException as exc:  # noqa: BLE001  (candidate code can raise anything, SystemExit included)
        result = {"status": "error", "stage": "worker", "error": f"{type(exc).__name__}: {exc}",
                  "traceback": traceback.format_exc()[-3000:]}
    _write(scratch, result)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip atexit hooks and threads that candidate code may have left behind


if __name__ == "__main__":
    main()
