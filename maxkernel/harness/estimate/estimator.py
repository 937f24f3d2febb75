"""TPU run time without a TPU: libtpu's static LLO profile on shrunk shapes, fitted, extrapolated, floored by the roofline.

    T = max(cycles(full) / clock, HBM bytes / bandwidth, FLOPs / peak)

cycles(full) comes from profiling the program at two or three shrunk sizes (parallel dimensions halved, blocks and
reduction axes kept) in a fresh, memory-guarded sandboxed process, fitting cycles = a + b * x (x: the fraction of
the full size's parallel work) and reading it at x = 1. Ops the profiler prices at 0 cycles (copies, broadcasts,
gathers) are filled with their bytes over the chip's bandwidth. The floors never come from the candidate alone: FLOPs
are the task's, bytes are the larger of what the inputs and outputs must move and what the BlockSpecs and grid
fetch. The share of roofline is held against the task's own floor (its FLOPs, its inputs read once and its outputs
written once), the floor any implementation has, beside the kernel's own-traffic floor (what its BlockSpecs fetch).
Every figure is an estimate, labelled so, never a measured time.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, Field

from maxkernel import chips
from maxkernel.harness.estimate.facts import (PLAN_PROGRESS_FILE, PROFILE_PROGRESS_FILE, int8_matmul_flops,
                                              libtpu_version, task_dims)
from maxkernel.harness.sandbox.guard import jobs_guarded
from maxkernel.settings import get_settings

__all__ = ["ProgramEstimate", "Estimate", "estimate", "estimate_program", "task_work", "roofline_floors",
           "TaskBaselineError", "METHOD", "LABEL", "METHOD_VERSION", "DEFAULT_PARALLEL_DIMS"]

METHOD_VERSION = 5  # part of every cache key: bump when the method changes what it reports
LABEL = "TPU estimate (libtpu static profile + roofline floor), not a measured time"
METHOD = ("static LLO profile on a shrunk grid, extrapolated, floored by roofline: libtpu's estimated cycles for the "
          "program compiled deviceless at two or three sizes with parallel dimensions halved (blocks and reduction axes "
          "kept), fitted linearly in the parallel work and extrapolated to the full size; 0-cycle ops filled with their "
          "HBM bytes; the result is at least the HBM floor and the FLOP floor")
# XLA programs (baselines) are shrunk only along dimensions the task names independent (PARALLEL_DIMS in its
# baseline.py); these names are taken as independent when it names none.
DEFAULT_PARALLEL_DIMS = ("batch", "batch_size", "batch_tokens", "num_seqs")
# A Pallas program is profiled down to this many parallel tiles (then twice and four times as many), unless its
# work per tile is too small to show the steady state (see estimate_job.plan).
KERNEL_TILES = 1
KERNEL_MIN_SHARE = 1 / 64  # ... of the profiling budget: the least work a kernel's smallest profiled size does
# A static profile below these shares of the task's floors misses work: it is reported under-priced, with the reason.
# FLOPs: no program beats peak (a 10 % margin for rounding in the task's count). Bytes: libtpu's DMA model is
# optimistic, by a factor that differs per chip, so a profile is taken as missing work only under half of what the
# profiler itself prices for streaming the task's bytes (PROFILER_STREAM; half the HBM floor where unmeasured).
UNDER_FLOPS = 0.9
UNDER_BYTES = 0.5
# Chips libtpu's static profiler prices nothing on, by libtpu version (every program tried, with and without the
# retry flag): refused before any process starts, saying what libtpu can do there instead.
UNPROFILED = {
    "0.0.42.1": {
        "v4": "its DMA latency model is 'only supported on VF/VL/GF/GL' (v5p, v5e, v6e): every v4 program's profile "
              "aborts",
        "7x": "every 7x program's profile aborts on an LLO check (LloOpcodeIsScalarBranch; 12p, 8p's baseline, 1p's "
              "kernel and baseline); libtpu 0.0.52 from PyPI prices 7x (12p's and 8p's baselines, 1p's kernel)"},
    "0.0.52": {
        "v4": "its DMA latency model is 'only supported on VF/VL/GF/GL' (v5p, v5e, v6e): every v4 program's profile "
              "aborts"},
}
# Profiled cycles that vary less than this share across the sizes are a fixed cost, not a line to scale.
FLAT = 0.02
# The two largest sizes' slope replaces the line through all sizes when it reads the full size this much higher.
CONVEX = 1.02
PLAIN_JAX = ("not a Pallas kernel (no pallas_call): priced as an XLA program, shrunk along the task's parallel dims "
             "as its baseline is; the verdict does not accept it as a kernel")
# Bytes per second libtpu 0.0.42.1's static profile implies for a plain stream (x * 2 over bf16[8192, 8192]: read
# and write 256 MiB), measured by tests/harness/test_estimate_stream.py: 2.1x v5e's HBM, 2.9x v5p's, 4.0x v6e's.
PROFILER_STREAM = {"v5e": 1.70e12, "v5p": 7.90e12, "v6e": 6.63e12}
# A libtpu abort (the whole process dies) whose known cause this flag avoids; the estimate then describes a
# slightly different program (VMEM memory-space assignment off) and says so.
_RETRY_FLAG = "--xla_vf_vmem_memory_space_assignment=false"
_ABORTS = (("Unsupported DMA direction", "libtpu's profiler does not support a DMA this program issues (gathers or "
            "scatters into VMEM)"),
           ("kScalarMultiplyHighU32", "libtpu's profiler does not support a dynamic update into VMEM inside a loop"),
           ("Check failed", "libtpu hit an internal check"))
# "mmap error: 12" is ENOMEM from the address-space guard (libtpu reserves far more than it touches).
_MEMORY = ("std::bad_alloc", "Cannot allocate memory", "out of memory", "MemoryError", "RESOURCE_EXHAUSTED",
           "mmap error: 12")
# libtpu's LLO type check ("Expected vector") aborts the profile of some kernels that compile; each trigger found so
# far has an equivalent rewrite (docs/kernels.md), so the hint names them instead of calling the kernel unpriceable.
_VECTOR_CHECK = "Expected vector"
_VECTOR_HINT = ("libtpu's LLO type check aborts the profile of a few constructs that compile; rewrites that avoid "
                "the ones found so far: (1) an f32 -> bf16 -> f32 round trip such as v.astype(bf16).astype(f32): "
                "store the bf16 value to a VMEM ref (the output block or a scratch) and load it back (3p; the same "
                "rounding done on the bits with a bitcast aborted too); (2) a bf16 block built by slicing and "
                "stacking (an im2col block): stack in f32 and cast once; (3) a bf16 dot whose left operand's row "
                "count is not a multiple of 16: pad the rows to 32; (4) a bf16 matmul operand 64 lanes wide (a "
                "64-wide head or RoPE dim, 3p): pair two heads into 128 lanes, or give that matmul f32 "
                "operands (exact where the values are bf16); (5) a bf16 matmul operand computed in registers (a "
                "where, a mask or an astype(bf16) feeding jnp.dot: 'Expected vector-f32, got vector-bf16packed' on a "
                "vmatmul): write it to a VMEM scratch and give the dot the scratch's load (rw_mhc_stream_mixing's "
                "coefficient matrices); (6) a matmul operand read with a sublane stride (ref[:, j, :] of a 3-D block, "
                "'got vector-int16'): contract the unstrided block instead (rw_mhc_stream_mixing projects all of its "
                "[bt*4, C] rows and keeps each row's own columns). Bisect at smoke size (maxkernel estimate --size "
                "smoke) to find the line")
# libtpu's profiler refuses the DMA that fills an SMEM operand (BlockSpec(memory_space=SMEM)) of a kernel; scalar
# prefetch is priced (6p, rw_lightning_indexer).
_DMA_CHECK = "Unsupported DMA direction"
_DMA_HINT = ("libtpu's profiler refuses a DMA this kernel issues. If the kernel takes an operand in SMEM (a BlockSpec "
             "with memory_space=SMEM), pass it as a small VMEM block instead (e.g. scalars padded into a [1, 128] "
             "row, read with lane slices): that DMA into SMEM is what the profiler refuses (rw_mhc_stream_mixing's "
             "alpha and bias); scalar prefetch (PrefetchScalarGridSpec) is priced")
# Stages whose outcome the same inputs always repeat: only these are cached.
# "unpriced": libtpu's profile of a kernel priced in parts saw none of a part's work (17p): the same every time, so
# cached, and not profiled again with the VMEM flag (which changes memory placement, not what the profile sees).
_DETERMINISTIC = ("compile", "lower", "import", "plan", "no_pallas", "unpriced")
# What to do when libtpu's profiler cannot price a program even with _RETRY_FLAG.
_UNPRICEABLE_HINT = ("libtpu's static profiler cannot price this program, with or without VMEM memory-space "
                     "assignment: no TPU estimate can be had for it here; compare it by its roofline floor "
                     "(compile_pallas: roofline_ms) and its CPU correctness, and time it on a TPU")


class TaskBaselineError(ValueError):
    """The task's own baseline.py fails at a size (in create_inputs or workload): the task's fault, not a kernel's."""


def task_work(task, size: str) -> tuple[float, int, float]:
    """(FLOPs, HBM bytes, int8 matmul FLOPs) that any implementation of the task must do and move at `size`: the
    task's get_flops (0 when it declares none), its inputs read once and its outputs written once, and how many of
    its FLOPs are matmuls on 8-bit integers (its baseline's, which the MXU retires at its int8 rate). Raises
    TaskBaselineError, naming baseline.py and the function that failed, when the task cannot build its inputs or run
    its workload."""
    try:
        io = _io_bytes(task, size)
        int8 = _int8_flops(task, size)
    except Exception as exc:  # noqa: BLE001  (the task's own code can raise anything)
        raise _baseline_error(task, size, exc) from exc
    return float(task.flops(size) or 0.0), io, int8


def roofline_floors(chip, flops: float, io_bytes: float, int8_flops: float = 0.0) -> dict:
    """The least time a program doing `flops` (`int8_flops` of them matmuls on 8-bit integers, at the chip's int8
    rate: twice the bf16 one on v5e, v5p and v6e) and moving `io_bytes` through HBM needs on one `chip` device:
    {compute_ms, memory_ms, roofline_ms (the larger)}. The one floor function: estimate's floors and share of
    roofline, and compile_pallas's roofline bound, all come from here."""
    int8 = min(max(int8_flops, 0.0), flops)
    compute_ms = ((flops - int8) / chip.device_peak_flops + int8 / chip.device_peak_int8_ops) * 1e3
    memory_ms = io_bytes / chip.device_hbm_bytes_per_s * 1e3
    return {"compute_ms": compute_ms, "memory_ms": memory_ms, "roofline_ms": max(compute_ms, memory_ms)}


def _baseline_error(task, size: str, exc: BaseException) -> TaskBaselineError:
    where = "create_inputs or workload"
    if not task.described:  # which of the two: the inputs alone tell (a described task's facts do not)
        import jax

        try:
            jax.eval_shape(lambda: task.create_inputs(size=size, seed=0))
            where = "workload"
        except Exception:  # noqa: BLE001
            where = "create_inputs"
    first = (str(exc).splitlines() or [""])[0][:300]
    return TaskBaselineError(f"the task's baseline.py ({task.baseline_file}) fails in its {where} at {size} size: "
                             f"{type(exc).__name__}: {first}")


class ProgramEstimate(BaseModel):
    """One program's estimate (a candidate kernel or the task's XLA baseline) on one chip."""

    ok: bool
    program: str = Field(description="kernel | baseline")
    chip: str
    estimated_ms: float | None = None
    bound: str | None = Field(None, description="compute | memory | overhead (more than 4x its roofline floor)")
    floors: dict = Field(default_factory=dict, description="The task's floors {compute_ms, memory_ms}: its FLOPs at "
                         "peak; its inputs read once and outputs written once at full HBM bandwidth.")
    roofline_ms: float | None = Field(None, description="The task's roofline floor: the larger of `floors`.")
    own_floor_ms: float | None = Field(None, description="This program's own floor: the task's FLOPs at peak, or the "
                                       "HBM bytes its BlockSpecs and grid fetch (re-reads included) at full "
                                       "bandwidth, whichever is slower. The estimate is never below it.")
    static_cycles_ms: float | None = Field(None, description="The fitted static profile at full size, before floors: "
                                           "libtpu's cycles plus XLA's cost-model cycles for the ops the profile "
                                           "priced at 0, not their HBM fill.")
    fraction_of_roofline: float | None = Field(None, description="roofline_ms / estimated_ms: the share of the task's "
                                               "floor (not of the program's own floor) the estimate reaches.")
    fit: dict = Field(default_factory=dict, description="Shrunk shapes, their cycles, the line fitted through them.")
    limits: list[str] = Field(default_factory=list, description="What this estimate assumed or could not see.")
    data_dependent: bool = False
    under_priced: str | None = Field(None, description="Why the static profile prices less than the task's work "
                                     "physically needs (a finding: the estimate then is the floor, not the profile).")
    uncertainty: dict = Field(default_factory=dict, description="What the error depends on: extrapolation (full size "
                              "over the largest profiled), fit_max_residual, zero_cycle_fill_share (of which cost_model_share: XLA's "
                              "cost model's price of 0-cycle fusions), loop_trips_share (of the largest profile's "
                              "cycles), decided_by (static profile or roofline floor).")
    libtpu_flags: list[str] = Field(default_factory=list)
    libtpu: str | None = None
    error: str | None = None
    hint: str | None = None
    stage: str | None = None
    partial_stage: str | None = Field(default=None, description="memory or timeout: a larger planned size ran out of "
                                      "it, and the fit stands on the smaller sizes profiled before it (in limits)")
    wall_s: float = 0.0
    cached: bool = False


class Estimate(BaseModel):
    """A kernel's estimated TPU time against the task's XLA baseline estimated the same way on the same chip."""

    ok: bool
    summary: str
    label: str = LABEL
    chip: str
    size: str
    estimated_ms: float | None = None
    baseline_estimated_ms: float | None = None
    speedup_estimate: float | None = None
    bound: str | None = None
    floors: dict = Field(default_factory=dict, description="The task's floors {compute_ms, memory_ms}.")
    roofline_ms: float | None = Field(None, description="The task's roofline floor (the larger of `floors`): the "
                                      "figure compile_pallas reports as its roofline bound.")
    own_floor_ms: float | None = Field(None, description="The kernel's own floor: its BlockSpec traffic (re-reads "
                                       "included) or the task's FLOPs, whichever is slower.")
    static_cycles_ms: float | None = None
    fraction_of_roofline: float | None = Field(None, description="roofline_ms / estimated_ms.")
    method: str = METHOD
    fit: dict = Field(default_factory=dict)
    limits: list[str] = Field(default_factory=list)
    data_dependent: bool = False
    under_priced: str | None = Field(None, description="The estimated program's profile is below its floors: why.")
    uncertainty: dict = Field(default_factory=dict, description="The estimated program's: see ProgramEstimate.")
    libtpu: str | None = None
    kernel: ProgramEstimate | None = None
    baseline: ProgramEstimate | None = None
    error: str | None = None
    hint: str | None = None
    stage: str | None = None
    cached: bool = False
    wall_s: float = 0.0


def estimate(task: str, kernel: str | None, chip: str | None = None, size: str = "full", tunables: dict | None = None,
             timeout: float | None = None) -> Estimate:
    """Estimate `kernel` (a file defining workload) and the task's baseline on `chip`; never raises for bad input
    or a failed profile: an Estimate with ok=False says why (and, for a compile failure, the compiler's hint)."""
    t0 = time.monotonic()
    from maxkernel.tasks import TaskError, load_task

    chip_name = chip or get_settings().chip
    try:
        spec = load_task(task)
        target = chips.get(chip_name)
        if not target.is_tpu:
            raise ValueError(f"TPU estimates are for TPU chips; {target.name} is a {target.platform}")
        if size not in spec.sizes:
            raise TaskError(f"task {spec.name} has no size {size!r} (has {', '.join(spec.sizes)})")
        if kernel is not None and not Path(kernel).is_file():
            raise FileNotFoundError(f"kernel file not found: {kernel}")
    except (TaskError, ValueError, FileNotFoundError) as exc:
        return Estimate(ok=False, chip=chip_name, size=size, stage="input", error=str(exc),
                        summary=f"Not estimated: {exc}")
    try:
        task_work(spec, size)
    except TaskBaselineError as exc:  # the task is at fault: no kernel is looked at, and no kernel advice given
        return _task_failed(exc, chip_name, size, time.monotonic() - t0)
    with ThreadPoolExecutor(max_workers=2) as pool:  # the two profiling processes run side by side
        # In the caller's context: the profiling worker belongs to the caller's cancel scope (harness/sandbox/cancel.py).
        base_f = pool.submit(contextvars.copy_context().run, estimate_program, spec, None, target, size, None, timeout)
        kern = estimate_program(spec, kernel, target, size, tunables, timeout) if kernel else None
        base = base_f.result()
    return _one_config(_combine(kern, base, target, size, time.monotonic() - t0), spec, size)


def _one_config(out: Estimate, task, size: str) -> Estimate:
    """A size that names none of a task's several configs runs its first: said, with the sizes of the others."""
    names = task.config_sizes(size)
    if names:
        first, others = next(iter(names)), [s for s in names.values() if s != size]
        note = (f"config {first} only (the task's first of {len(names)}); the others are estimated apart: "
                f"--size {', --size '.join(others)}")
        out.limits.append(note)
        out.summary += f" ({note})"
    return out


def _task_failed(exc: TaskBaselineError, chip: str, size: str, wall: float) -> Estimate:
    return Estimate(ok=False, chip=chip, size=size, stage="task", error=str(exc), wall_s=wall,
                    hint="fix the task: its baseline.py must build its inputs and run its workload at this size "
                         "before any kernel can be measured against it",
                    summary=f"Not estimated: {exc}. The task is at fault, not the kernel; the kernel was not looked "
                            "at.")


def _combine(kern: ProgramEstimate | None, base: ProgramEstimate, chip, size: str, wall: float) -> Estimate:
    main = kern or base
    common = dict(chip=chip.name, size=size, kernel=kern, baseline=base, wall_s=wall, libtpu=main.libtpu or base.libtpu,
                  cached=main.cached and base.cached)
    if not main.ok:
        what = "the kernel" if kern else "the baseline"
        if main.stage == "task":
            return _task_failed(TaskBaselineError(main.error), chip.name, size, wall)
        if main.stage == "no_pallas":
            return Estimate(ok=False, stage=main.stage, error=main.error, hint=main.hint,
                            baseline_estimated_ms=base.estimated_ms if base.ok else None,
                            summary=f"Not estimated as a kernel on {chip.name}: {main.error}"
                                    + (f" (XLA baseline estimated at {base.estimated_ms:.3g} ms)" if base.ok else ""),
                            **common)
        return Estimate(ok=False, stage=main.stage, error=main.error, hint=main.hint, limits=main.limits,
                        baseline_estimated_ms=base.estimated_ms if kern else None,
                        summary=f"could not estimate {what} on {chip.name}: {main.error}"
                                + (f"\nHint: {main.hint}" if main.hint else ""), **common)
    speedup = base.estimated_ms / main.estimated_ms if kern and base.ok and main.estimated_ms else None
    limits = list(main.limits) + ([f"baseline: {x}" for x in base.limits] if kern else [])
    if kern and not base.ok:
        limits.append(f"baseline not estimated: {base.error}")
    if main.fraction_of_roofline:
        at = f"{main.fraction_of_roofline:.0%} of the task's roofline ({main.roofline_ms:.3g} ms"
        own = main.own_floor_ms
        at += (f"; its own HBM traffic's floor is {own:.3g} ms)" if own and own > 1.01 * main.roofline_ms else ")")
    else:
        at = "roofline unknown"
    summary = (f"TPU estimate on {chip.name} ({size} size): {main.estimated_ms:.3g} ms, {main.bound}-bound, {at}"
               + (f"; XLA baseline {base.estimated_ms:.3g} ms, speedup {speedup:.2f}x" if speedup else "")
               + (" [not a Pallas kernel: priced as XLA's program]" if kern and PLAIN_JAX in main.limits else "")
               + (" [data-dependent: floored by the task's work]" if main.data_dependent else "")
               + (" [under-priced: the profile prices less than the work needs (see under_priced)]"
                  if main.under_priced else "")
               + (" [the baseline is under-priced: its static profile misses work]"
                  if kern and base.ok and base.under_priced else "")
               + ". Estimated from libtpu's static profile, not measured.")
    return Estimate(ok=True, summary=summary, estimated_ms=main.estimated_ms,
                    baseline_estimated_ms=base.estimated_ms if base.ok else None, speedup_estimate=speedup,
                    bound=main.bound, floors=main.floors, roofline_ms=main.roofline_ms,
                    own_floor_ms=main.own_floor_ms, static_cycles_ms=main.static_cycles_ms,
                    fraction_of_roofline=main.fraction_of_roofline, fit=main.fit, limits=limits,
                    data_dependent=main.data_dependent or (kern is not None and base.data_dependent),
                    under_priced=main.under_priced, uncertainty=main.uncertainty, **common)


def _cache_path(key: str) -> Path:
    return get_settings().cache_dir / "estimate" / f"{key}.json"


def _method_digest() -> str:
    """Hash of the estimator's own code: a changed method never reads an old method's cached figures."""
    here = Path(__file__).resolve().parent  # the estimate room; its jobs are read as files, never imported here
    jobs = here.parent / "jobs"
    h = hashlib.sha256(str(METHOD_VERSION).encode())
    # integrity.py makes the fingerprints a cached estimate carries: a cache made under another fingerprint method
    # would read as "not the program checked" (1p's row, re-made after the fingerprint text changed, lost its speedup).
    for path in (Path(__file__), jobs / "estimate_job.py", jobs / "estimate_compile_job.py", here / "hlo_loops.py",
                 here / "facts.py", here.parent / "verdict" / "integrity.py"):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _key(task, source: bytes, chip, size: str, tunables: dict | None, settings) -> str:
    parts = [_method_digest(), task.name, task.digest, hashlib.sha256(source).hexdigest(), chip.name, size,
             json.dumps(tunables or {}, sort_keys=True), libtpu_version(), settings.estimate_max_gflop,
             settings.estimate_max_mb] + (["in parts"] if settings.estimate_in_parts else [])
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32]


def estimate_program(task, kernel: str | None, chip, size: str = "full", tunables: dict | None = None,
                     timeout: float | None = None) -> ProgramEstimate:
    """The estimate of one program, from the cache when (source, task, size, chip, libtpu version) was seen."""
    settings = get_settings()
    program = "kernel" if kernel else "baseline"
    why = UNPROFILED.get(libtpu_version() or "", {}).get(chip.name)
    if why:
        return _unprofiled(task, program, chip, size, why)
    source = Path(kernel).read_bytes() if kernel else task.baseline_file.read_bytes()
    key = _key(task, source, chip, size, tunables, settings)
    path = _cache_path(key)
    if path.is_file():
        try:
            return ProgramEstimate(**{**json.loads(path.read_text()), "cached": True})
        except (ValueError, TypeError):
            path.unlink(missing_ok=True)
    t0 = time.monotonic()
    if kernel:
        from maxkernel.harness.sandbox.static_check import check_source

        refused = check_source(source.decode(errors="replace"), Path(kernel).name)
        if refused:  # one violation, naming its line (a string: never joined as a sequence)
            return ProgramEstimate(ok=False, program=program, chip=chip.name, stage="static",
                                   error=f"the kernel was refused before import: {refused}")
    try:
        out = _profile(task, kernel, chip, size, tunables, timeout, [])
        # At a shrunk size XLA may place its own temporaries in VMEM beside a kernel's scoped limit and run out (9p
        # on v5e: 48 MiB scoped + 80 MiB of HLO temps), which the full size, whose temporaries are too big for VMEM,
        # never does: the same flag keeps them in HBM.
        crowded = out.stage == "compile" and "memory space vmem" in (out.error or "") and "HLO temp" in (out.error or "")
        if (out.stage == "abort" or crowded) and _RETRY_FLAG not in out.libtpu_flags:
            retry = _profile(task, kernel, chip, size, tunables, timeout, [_RETRY_FLAG])
            if retry.ok:
                why = ("XLA's temporaries crowded VMEM at a profiled size" if crowded else "libtpu aborted")
                retry.limits.append(f"profiled with {_RETRY_FLAG} after {why} ({(out.error or '')[:200]}): the "
                                    "estimate describes the program with VMEM memory-space assignment off")
                out = retry
            else:  # the flag was tried: the hint is what the retry says, never the flag again
                out.error = f"{out.error}; retried with {_RETRY_FLAG}: {retry.error}"
                out.hint = retry.hint if retry.hint and _RETRY_FLAG not in retry.hint else _UNPRICEABLE_HINT
                out.libtpu_flags = [_RETRY_FLAG]
        if _grows(out):
            out = _larger(task, kernel, chip, size, tunables, timeout, out)
    except TaskBaselineError as exc:
        return ProgramEstimate(ok=False, program=program, chip=chip.name, stage="task", error=str(exc),
                               wall_s=time.monotonic() - t0)
    out.wall_s = time.monotonic() - t0
    # Deterministic outcomes only: not a fit cut short by the clock (on a quieter machine every size may finish).
    if (out.ok and out.partial_stage != "timeout") or (not out.ok and out.stage in _DETERMINISTIC):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{time.monotonic_ns()}.tmp")
        tmp.write_text(out.model_dump_json())
        tmp.replace(path)
    return out


# A profile that ran out of memory or time at a larger size is fitted on the smaller sizes profiled before it.
_PARTIAL_STAGES = ("memory", "timeout")
PARTIAL_FIT = "fitted on the"
PARTIAL_AGREE = 2.0  # a partial fit's sizes must agree on cycles per unit of work within this factor


# The profiling process hit its memory guard before two sizes were profiled (4p's and 5p's XLA baselines on v5e, at
# the sizes their work budget allowed): the sizes are planned again for a budget this many times smaller, once.
MEMORY_SHRINK = 8
MEMORY_RETRIED = "planned again for a profiling budget"
# rw_gated_deltanet_chunk's XLA baseline on v5e still ran the profiler out of memory at the sizes planned 8 times
# smaller (one sequence, 16 of 32 heads): a plan 64 times smaller reaches fewer heads.
MEMORY_RETRIES = 2


def _profile(task, kernel, chip, size, tunables, timeout, flags: list[str], shrink: int = 1,
             below: list | None = None, avoid: dict | None = None) -> ProgramEstimate:
    """Two sandboxed jobs: the candidate's process plans the sizes and lowers the program at each (estimate_job);
    a process that never imports candidate code compiles those lowerings with libtpu and reads the profile
    (estimate_compile_job). Only the plan comes from the first; every cycle from the second. `shrink` divides the
    profiling budget; `below`, the sizes of a plan that ran out of memory: the same plan is not profiled again;
    `avoid`, a size XLA:TPU did not compile: a plan that reaches it again is not profiled."""
    settings = get_settings()
    program = "kernel" if kernel else "baseline"
    spec, task_files = task.for_job()
    dims_order = _dims_order(task, kernel is not None)
    _, full_bytes, _ = task_work(task, size)
    job = {"kind": "estimate", "task": spec, "kernel": "kernel.py" if kernel else None, "chip": chip.name,
           "size": size, "tunables": tunables or {}, "dims_order": dims_order,
           "xla_dims_order": _dims_order(task, False),  # a candidate with no pallas_call is planned as XLA's program
           "budget": {"flops": settings.estimate_max_gflop * 1e9 / shrink, "bytes": settings.estimate_max_mb * 2**20 / shrink,
                      "tiles": KERNEL_TILES, "min_share": KERNEL_MIN_SHARE,
                      "full_bytes": full_bytes}, "guard": jobs_guarded(), "in_parts": settings.estimate_in_parts}
    files = dict(task_files)
    if kernel:
        files["kernel.py"] = Path(kernel).read_bytes()
    base = dict(ok=False, program=program, chip=chip.name, libtpu_flags=flags, libtpu=libtpu_version())
    budget = timeout or settings.estimate_timeout_s
    t0 = time.monotonic()
    planned = _run(job, files, budget, PLAN_PROGRESS_FILE, lowerings=True)
    failed = _failed(base, planned, settings, kernel)
    if failed:
        return failed
    head = [ln for ln in planned["lines"] if "plan" in ln]
    points = [ln["lowered"] for ln in planned["lines"] if "lowered" in ln]
    if not head or not points or len(planned["lowered"]) != len(points):
        return ProgramEstimate(**base, stage="sandbox", error="the planning job wrote no plan or lost a lowering")
    if below is not None and _sizes(points) == below:
        return ProgramEstimate(**base, stage="plan", error=f"the sizes go no lower than {below[0]}")
    if below is not None and head[0]["plan"].get("whole"):  # the whole program, where smaller sizes ran out of memory
        return ProgramEstimate(**base, stage="plan", error=f"the sizes go no lower than {below[0]}: "
                                                           f"{head[0]['plan']['whole']}")
    if avoid is not None and avoid in _sizes(points):
        return ProgramEstimate(**base, stage="plan", error=f"the larger budget's sizes still include {avoid}")
    trusted = {"kind": "estimate_compile", "chip": chip.name, "libtpu_flags": flags,
               "points": [{**pt, "file": f"lowered_{i}.mlir"} for i, pt in enumerate(points)]}
    texts = {f"lowered_{i}.mlir": planned["lowered"][pt["file"]] for i, pt in enumerate(points)}
    profiled = _run(trusted, texts, max(budget - (time.monotonic() - t0), 1.0), PROFILE_PROGRESS_FILE)
    failed = _failed(base, profiled, settings, kernel)
    done = [ln for ln in profiled["lines"] if "point" in ln]
    sized = [pt for pt in points if not pt.get("glue")]
    started = [ln["starting"] for ln in profiled["lines"] if "starting" in ln]
    if failed and started and isinstance(started[-1], dict) and "glue" in started[-1]:
        # Only the glue at full size failed (its sorts past the memory guard): they are priced with the rest.
        glue_failed, failed = failed.error, None
    else:  # or the planning job could not lower it apart (a pallas_call inside a loop)
        glue_failed = next((str(ln["glue_skipped"]) for ln in planned["lines"] if "glue_skipped" in ln), None)
    whole = head[0]["plan"].get("whole")
    at = started[-1] if started and isinstance(started[-1], dict) else None
    if (failed and failed.stage == "compile" and not done and shrink >= 1 and avoid is None and at
            and at != head[0]["plan"]["full_dims"] and (kernel is None or head[0]["plan"].get("plain_jax"))):
        return _above(task, kernel, chip, size, tunables, timeout, flags, failed, at, shrink)
    if failed and whole:  # profiled whole because nothing shrinks it: what would let it shrink is the way out
        failed.error = f"{failed.error} (profiled whole at full size: {whole})"
        failed.hint = WHOLE_HINT
    if head[0]["plan"].get("split"):  # priced in parts: every part is needed
        if failed:
            if failed.stage == "memory" and shrink == 1:  # the parts cut further, for a smaller budget
                return _smaller(task, kernel, chip, size, tunables, timeout, flags, failed, _sizes(points))
            return failed
        try:
            out = _fit_split(base, head + done, task, chip, size, full_bytes)
        except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError, StopIteration) as exc:
            return ProgramEstimate(**base, stage="sandbox",
                                   error=f"the profile job wrote a malformed record ({type(exc).__name__}: {exc})")
        if glue_failed:
            out.limits.append(f"{GLUE_FAILED}: {glue_failed}")
        return out
    if failed and not (failed.stage in _PARTIAL_STAGES and len(done) >= 2):
        if failed.stage == "memory" and shrink == 1:
            return _smaller(task, kernel, chip, size, tunables, timeout, flags, failed, _sizes(points))
        if failed.stage == "memory":
            failed.fit = {"planned_sizes": _sizes(points)}  # for _smaller: the next plan must go lower than these
        return failed
    disagree = _disagree([ln["point"] for ln in done if not ln["point"].get("glue")]) if failed else None
    if disagree:
        failed.error = f"{failed.error}; the {len(done)} smaller sizes were not fitted: {disagree}"
        return failed
    try:
        out = _fit(base, head + done, task, chip, size, full_bytes)
    except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError) as exc:
        return failed or ProgramEstimate(**base, stage="sandbox",
                                         error=f"the profile job wrote a malformed record ({type(exc).__name__}: {exc})")
    if failed:
        # The sizes are profiled smallest first: a larger one that ran out of memory or time leaves the smaller ones
        # whole, and a line through them prices the program, further from the full size than planned.
        out.limits.append(f"{PARTIAL_FIT} {len(done)} of {len(sized)} planned sizes: {failed.error}")
        out.partial_stage = failed.stage
    if glue_failed:
        out.limits.append(f"{GLUE_FAILED}: {glue_failed}")
    return out


WHOLE_HINT = ("name a dim the program computes independently along (the task's PARALLEL_DIMS, or --parallel with "
              "--program) so that smaller sizes can be profiled, or raise MAXKERNEL_ESTIMATE_MEMORY_MB / "
              "MAXKERNEL_ESTIMATE_TIMEOUT_S for the whole program")
GLUE_FAILED = ("the XLA around the kernels (its sorts) could not be profiled at full size, so its sorts were "
               "priced with the rest (extrapolated, or in parts at their bytes' floor)")


# An XLA program whose shrunk sizes priced it under its floor is profiled once more at sizes planned for a budget this
# many times larger. Met on the GEMM baselines (42k on v6e: sizes up to batch 512 were held by streaming the weight and
# the line fell under the FLOP floor; at batch 512-2048 it is compute-bound as the full size is and prices 0.637 ms,
# where the whole program at full size profiles 0.648 ms). Not the full size itself: the profiler's memory grows with
# the work (42k whole, 0.55 TFLOP: 7.9 GB; 8p's GEMM whole, 3.85 TFLOP: past 24 GB).
GROW = 4
# How far XLA's cost model (classic) is from the static profile on the ops both price: benchmarks/model_vs_profile.py
MODEL_AGREEMENT = ("How far that model is from the profile on the ops both price (conv and GEMM fusions kept in VMEM, "
                   "v5e and v6e): benchmarks/results/model_vs_profile.md")
GROWN = "profiled again at sizes planned for a budget"


def _grows(out: ProgramEstimate) -> bool:
    """Whether larger sizes may price what the shrunk ones missed: an XLA program (no pallas_call: a kernel's tiles
    already are its steady state) fitted on shrunk sizes, under its FLOP floor or under-priced for a reason size can
    change (not a loop whose trips could not be read, not work that depends on the data), and not already cut short
    by memory or time."""
    fit = out.fit or {}
    # Under the FLOP floor by less than the under-priced margin is also a profile the floor decided (42k's baseline
    # on v5e read the floor, 2.79 ms, where its whole program profiles 2.88).
    below = bool(out.static_cycles_ms and (out.floors or {}).get("compute_ms")
                 and out.static_cycles_ms < out.floors["compute_ms"])
    return bool(out.ok and (out.under_priced or below) and fit.get("shrunk_dims") and not fit.get("pallas_calls")
                and not out.data_dependent and out.partial_stage is None
                and "trip count could not be read" not in (out.under_priced or ""))


def _larger(task, kernel, chip, size, tunables, timeout, first: ProgramEstimate) -> ProgramEstimate:
    """`first`, under-priced, profiled again at sizes GROW times larger: that estimate, saying why (still under-priced
    where the larger sizes also fall short), or `first` with why the larger sizes could not be profiled."""
    if any(x.startswith(COMPILE_RETRIED) for x in first.limits):  # already planned for a budget GROW times larger
        return first
    sizes = [p.get("dims") for p in first.fit.get("points") or []]
    why = (first.under_priced.split(". Likely cause")[0] if first.under_priced else
           f"its static profile ({first.static_cycles_ms:.3g} ms) is below the task's FLOP floor "
           f"({first.floors['compute_ms']:.3g} ms at peak)")
    again = _profile(task, kernel, chip, size, tunables, timeout, list(first.libtpu_flags), shrink=1 / GROW)
    if not again.ok:
        first.limits.append(f"{GROWN} {GROW} times larger, which failed ({again.error}): the first sizes stand")
        if again.stage in _PARTIAL_STAGES:  # out of time is the machine's load: not cached, so a quieter run retries
            first.partial_stage = again.stage
        return first
    flagged = [x for x in first.limits if _RETRY_FLAG in x]  # the first's flag applies to the larger sizes too
    again.limits = [f"{GROWN} {GROW} times larger: the first sizes ({sizes}) priced it under its floor ({why})",
                    *flagged, *again.limits]
    return again


def _sort_cycles(point: dict) -> float:
    """The cycles of a profiled size's sort ops (outside the kernels), times their loops' trips."""
    cost = op_cycles(point)
    return float(sum(cost.get(n, 0) for n in point.get("sort_ops") or ()))


def _sizes(points: list[dict]) -> list:
    """What a plan profiles, point by point: a size's dims, or a split part's cut grid."""
    return [p.get("grid") or p.get("dims") for p in points]


def _smaller(task, kernel, chip, size, tunables, timeout, flags, failed: ProgramEstimate,
             smallest: list) -> ProgramEstimate:
    """A program whose smallest planned size already ran the profiler out of memory, profiled again at sizes planned
    for a budget MEMORY_SHRINK times smaller, and MEMORY_SHRINK times smaller again while the smallest sizes still
    run out of memory and each plan goes lower (MEMORY_RETRIES plans at most): priced, and said so (the line reaches
    further to the full size), or the memory failure stands with what each plan met."""
    shrink, met = 1, []
    for _ in range(MEMORY_RETRIES):
        shrink *= MEMORY_SHRINK
        again = _profile(task, kernel, chip, size, tunables, timeout, flags, shrink=shrink, below=smallest)
        if again.ok:
            again.limits.append(f"{MEMORY_RETRIED} {shrink} times smaller after {failed.error}"
                                + "".join(f"; {m}" for m in met) + ": the profiled sizes are further from the full size")
            return again
        met.append(f"{MEMORY_RETRIED} {shrink} times smaller: {again.error}")
        smallest = (again.fit or {}).get("planned_sizes")
        if again.stage != "memory" or not smallest:
            break
    failed.error = "; ".join([failed.error or "", *met])
    return failed


# XLA:TPU refuses to compile some programs at a shrunk size it compiles at full size (28k's transposed conv with a
# LayerNorm at one image: "Expected instruction to have shape equal to f32[32,64,64], actual shape is f32[64,32,64]"
# after layout assignment; two images and more compile). An XLA program whose smallest size fails so is planned again
# for a budget GROW times larger, whose sizes start above it; a kernel's compile failure is the kernel's to fix.
COMPILE_RETRIED = "XLA:TPU did not compile the program at"


def _above(task, kernel, chip, size, tunables, timeout, flags, failed: ProgramEstimate, at: dict,
           shrink: float = 1) -> ProgramEstimate:
    """An XLA program whose smallest planned size `at` did not compile, profiled at sizes planned for a budget GROW
    times larger than the plan that reached `at` (`shrink`: a plan made after smaller sizes ran out of memory grows
    from its own budget, not the first one), none of them `at`: priced, and said so, or the compile failure stands
    with what the second plan met."""
    again = _profile(task, kernel, chip, size, tunables, timeout, flags, shrink=shrink / GROW, avoid=at)
    if again.ok:
        again.limits.append(f"{COMPILE_RETRIED} the shrunk size {at} ({(failed.error or '')[:160]}): "
                            f"{GROWN} {GROW} times larger, none of them that size")
        return again
    failed.error = f"{failed.error} (at the shrunk size {at}); {GROWN} {GROW} times larger: {again.error}"
    return failed


def op_cycles(point: dict) -> dict[str, int]:
    """A profiled size's cycles per op, times the trips of the while loops it sits in (the profile prices one)."""
    trips = point.get("trips") or {}
    return {n: int(c) * max(int(trips.get(n, 1)), 1) for n, c in point["ops"].items()}


def point_cycles(point: dict) -> int:
    """A profiled size's cycles: every op's, times its loops' trips."""
    return sum(op_cycles(point).values())


def _disagree(points: list[dict]) -> str | None:
    """Why the sizes a partial fit would stand on cannot price the full size, or None: their cycles per unit of work
    differ more than PARTIAL_AGREE times (29k's XLA baseline on v6e: 4.3 times the cycles for twice the work, so a
    line through the two read 2.16 ms where the program's floor is 0.3). Beyond the sizes profiled, nothing says
    which of the two programs XLA runs at full size."""
    per = [point_cycles(p) / float(p["x"]) for p in points if float(p.get("x") or 0) > 0]
    if len(per) < 2 or min(per) <= 0 or max(per) <= PARTIAL_AGREE * min(per):
        return None
    return (f"their cycles per unit of work differ {max(per) / min(per):.1f} times (XLA ran another program at the "
            "larger size), so a line through them does not price the full size")


MAX_LOWERED_BYTES = 64 << 20  # one size's lowering (StableHLO text, Mosaic kernels serialized inside)


def _run(job: dict, files: dict, timeout: float, progress_file: str, lowerings: bool = False) -> dict:
    """Run one job in a fresh, memory-guarded worker; what it reported, its progress lines, and (with `lowerings`)
    the lowering texts it wrote, read out of its scratch without following links."""
    from maxkernel.harness.sandbox.copyout import MAX_RESULT_BYTES, CopyOutError, read_bytes
    from maxkernel.harness.sandbox.pool import WorkerPool

    settings = get_settings()
    out = {"lines": [], "lowered": {}}
    with WorkerPool(size=0, memory_mb=settings.estimate_memory_mb) as pool:
        res = pool.run(job, files, timeout)
        try:
            if res.scratch is not None:
                try:  # written inside the sandbox: JSON lines in a regular file, or nothing is taken from it
                    text = read_bytes(res.scratch, progress_file, MAX_RESULT_BYTES).decode(errors="replace")
                    out["lines"] = [json.loads(ln) for ln in text.splitlines() if ln.strip()]
                except (CopyOutError, ValueError):
                    out["lines"] = []
                for ln in out["lines"] if lowerings and res.status == "ok" else []:
                    name = str((ln.get("lowered") or {}).get("file") or "")
                    if name:
                        try:
                            out["lowered"][name] = read_bytes(res.scratch, name, MAX_LOWERED_BYTES)
                        except CopyOutError:
                            pass
            out.update(status=res.status, wall_s=res.wall_s, result=res.result or {}, stderr=res.stderr_tail or "",
                       inside=str(res.scratch / "kernel.py") if res.scratch else None)
        finally:
            res.cleanup()
    return out


def _failed(base: dict, run: dict, settings, kernel) -> ProgramEstimate | None:
    """The ProgramEstimate for a job that timed out, crashed or reported an error; None when it worked."""
    if run["status"] == "timeout":
        return ProgramEstimate(**base, stage="timeout", error=f"the profile did not finish within {run['wall_s']:.0f} s",
                               hint="raise MAXKERNEL_ESTIMATE_TIMEOUT_S, or lower MAXKERNEL_ESTIMATE_MAX_GFLOP so "
                                    "the profiled sizes shrink further")
    if run["status"] == "crashed":
        return _crash(base, run["stderr"], run["lines"], settings)
    if run["result"].get("status") != "ok":
        err = str(run["result"].get("error") or "the profile job failed")
        if run["inside"] and kernel:
            err = err.replace(run["inside"], str(kernel))
        return ProgramEstimate(**base, stage=run["result"].get("stage") or "worker", error=err,
                               hint=run["result"].get("hint"))
    return None


def _crash(base: dict, stderr: str, lines: list[dict], settings) -> ProgramEstimate:
    running = next((ln["starting"] for ln in reversed(lines) if "starting" in ln), None)
    at = f" while profiling {running}" if running else ""
    if any(m in stderr for m in _MEMORY):
        return ProgramEstimate(**base, stage="memory", error=f"the profiling process hit its memory guard "
                               f"({settings.estimate_memory_mb} MB){at}",
                               hint="raise MAXKERNEL_ESTIMATE_MEMORY_MB, or lower MAXKERNEL_ESTIMATE_MAX_GFLOP so the "
                                    "profiled sizes shrink further")
    retried = _RETRY_FLAG in base["libtpu_flags"]  # then the flag is no advice: it was on and it still died
    for marker, why in _ABORTS:
        if marker in stderr:
            line = next((ln for ln in stderr.splitlines() if marker in ln), marker)
            hint = _UNPRICEABLE_HINT if retried else f"libtpu flag {_RETRY_FLAG} avoids most of these aborts"
            if retried and _VECTOR_CHECK in stderr and base.get("program") == "kernel":
                hint = _VECTOR_HINT
            if retried and marker == _DMA_CHECK and base.get("program") == "kernel":
                hint = _DMA_HINT
            return ProgramEstimate(**base, stage="abort", error=f"libtpu aborted{at}: {why} ({line.strip()[:200]})",
                                   hint=hint)
    fatal = [ln.strip() for ln in stderr.splitlines() if re.match(r"\s*F\d{4} ", ln) or "Check failed" in ln]
    # A crash with no fatal line: libtpu's crash handler prints only its own noise (no crash socket, a core dumped,
    # the signal raised); name the signal instead of quoting that noise.
    signal = re.search(r"Raising signal (\d+)", stderr)
    told = [ln for ln in stderr.strip().splitlines() if not re.search(r"coredump_hook|process_state\.cc", ln)]
    if fatal:
        tail = fatal[0][:400]
    elif signal:
        name = {"6": "SIGABRT", "11": "SIGSEGV: a crash inside libtpu", "9": "SIGKILL"}.get(signal[1], "")
        tail = f"killed by signal {signal[1]}{f' ({name})' if name else ''}" + (
            f" after: {' | '.join(told[-2:])[:300]}" if told else ", with no message from libtpu")
    else:
        tail = " | ".join(stderr.strip().splitlines()[-3:])[:400]
    return ProgramEstimate(**base, stage="abort", error=f"the profiling process died{at}: {tail or 'no output'}",
                           hint=_UNPRICEABLE_HINT if retried else f"libtpu flag {_RETRY_FLAG} avoids most libtpu aborts")


def _unprofiled(task, program: str, chip, size: str, why: str) -> ProgramEstimate:
    """A chip libtpu's profiler cannot price: said at once, with the task's floors where they can be had."""
    try:
        floors = roofline_floors(chip, *task_work(task, size))
    except Exception:  # noqa: BLE001  (a task that fails is said by the chips that can be profiled)
        floors = {}
    shown = {k: floors[k] for k in ("compute_ms", "memory_ms")} if floors else {}
    return ProgramEstimate(
        ok=False, program=program, chip=chip.name, stage="chip", libtpu=libtpu_version(), floors=shown,
        roofline_ms=floors.get("roofline_ms"),
        error=f"no TPU estimate on {chip.name}: libtpu {libtpu_version()}'s static profiler cannot price it ({why})",
        hint=f"what libtpu does for {chip.name}: the real compile (maxkernel compile --chip {chip.name}: errors, VMEM, "
             "the roofline floor); estimates: v5e, v5p or v6e")


def _dims_order(task, is_kernel: bool) -> list[str]:
    declared = getattr(task.module, "PARALLEL_DIMS", None)
    names = list(declared) if declared else [d for d in DEFAULT_PARALLEL_DIMS if d in task.config]
    if is_kernel:  # a Pallas program shows which dims only add parallel tiles: every dimension may be tried
        names += [d for d in task_dims(task, "full") if d not in names]
    return names


def _int8_flops(task, size: str) -> float:
    """The baseline's matmul FLOPs whose operands are both 8-bit integers (traced, loops multiplied): what a compute
    floor prices at the chip's int8 rate. 0 for a task this process knows only by its facts."""
    if task.described:
        return 0.0
    key = (str(task.path), task.digest, size)  # traced once per task files and size: every fit asks again
    if key not in _INT8_SEEN:
        import jax

        inputs = jax.eval_shape(lambda: task.create_inputs(size=size, seed=0))
        _INT8_SEEN[key] = int8_matmul_flops(jax.make_jaxpr(task.module.workload)(*inputs))
    return _INT8_SEEN[key]


_INT8_SEEN: dict[tuple, float] = {}


def _io_bytes(task, size: str) -> int:
    """Bytes the inputs and the baseline's outputs occupy: what any implementation must move through HBM."""
    structs, outs = task.structs(size)
    return int(sum(x.size * x.dtype.itemsize for x in structs + outs))


def _fit(base: dict, lines: list[dict], task, chip, size: str, io_bytes: int) -> ProgramEstimate:
    head = next(ln for ln in lines if "plan" in ln)
    plan, facts, traffic = head["plan"], head["facts"], head["block_traffic"]
    glue = next((ln["point"] for ln in lines if "point" in ln and ln["point"].get("glue")), None)
    points = sorted((ln["point"] for ln in lines if "point" in ln and not ln["point"].get("glue")),
                    key=lambda p: p["x"])[-3:]  # the largest three
    if not points:
        raise ValueError("no profiled point")
    clock, bw = chip.clock, chip.device_hbm_bytes_per_s
    limits: list[str] = []
    rows = []
    unknown_loops: list[str] = []
    for p in points:
        trips = p.get("trips") or {}  # ops inside while loops run once per trip; the profile prices one
        # With the glue profiled at full size, the shrunk sizes' sorts are left out of the line and added after it.
        apart = set(p.get("sort_ops") or ()) if glue is not None else set()
        raw = point_cycles(p) - (_sort_cycles(p) if apart else 0)
        once = sum(int(c) for n, c in p["ops"].items() if n not in apart)
        fill, modelled = _zero_cycle_fill(p, apart, clock, bw)
        loops = p.get("loops") or []
        unknown_loops += [f"{lp['name']} ({lp['why']})" for lp in loops if lp.get("trip_count") is None]
        rows.append({"dims": {d: p["dims"][d] for d in plan["shrunk_dims"]} or "full", "x": float(p["x"]),
                     "tiles": p.get("tiles"), "cycles": raw, "zero_cycle_ops": len(p["zero_cycle_bytes"]),
                     "zero_cycle_fill_cycles": round(fill), "compile_s": round(float(p["compile_s"]), 2),
                     **({"zero_cycle_model_cycles": round(sum(modelled.values())), "zero_cycle_model_ops":
                         sorted(modelled, key=lambda n: -modelled[n]),
                         "zero_cycle_model_dma": sorted({str((p.get("zero_cycle_dma") or {}).get(n, "not named"))
                                                         for n in modelled})} if modelled else {}),
                     **({"loop_trips": [lp.get("trip_count") for lp in loops], "cycles_once": once} if loops else {})})
    if any(r["zero_cycle_ops"] for r in rows):
        limits.append("ops priced at 0 cycles by the profiler were filled with their HBM bytes / bandwidth")
    if any(r.get("zero_cycle_model_ops") for r in rows):
        limits.append(_modelled_line(rows))
    if any(r.get("loop_trips") for r in rows):
        counts = sorted({t for r in rows for t in r.get("loop_trips", []) if t is not None})
        limits.append("ops inside while loops priced once per trip (trip counts read from the compiled program: "
                      + ", ".join(map(str, counts)) + " at the profiled sizes)")
    xs = [r["x"] for r in rows]
    ys = [r["cycles"] + r["zero_cycle_fill_cycles"] for r in rows]
    # XLA's cost model prices what it fills (a convolution's compute): counted as priced, unlike an HBM fill.
    raw_ys = [r["cycles"] + r.get("zero_cycle_model_cycles", 0) for r in rows]
    a, b, residual = _line_fit(xs, ys)
    if residual is not None and residual > 0.03:
        limits.append(f"cycles are not linear in the work over the profiled sizes (largest residual {residual:.0%}): "
                      "the extrapolation is rougher than usual")
    big = xs.index(max(xs))
    if max(xs) >= 1.0 - 1e-12:
        full_cycles, raw_full, how = ys[big], raw_ys[big], "profiled at full size"
    else:
        ra, rb, _ = _line_fit(xs, raw_ys)
        flat = len(set(xs)) >= 2 and max(ys) - min(ys) <= FLAT * max(ys)
        if flat and (b is None or b <= 0 or rb is None or rb <= 0):
            # The same cycles at every profiled size: a fixed cost (operands every size streams whole) hides the
            # work the sizes add. Scaled in proportion it would be multiplied by 1/x (rw_fused_linear_cross_entropy:
            # 2.88 M cycles at 4-16 of 8192 tokens, 512x = 841 ms on v6e); kept as the fixed cost, the floors decide.
            full_cycles, raw_full = ys[big], raw_ys[big]
            a, b = ys[big], 0.0
            how = f"the same cycles at all {len(xs)} sizes (within {FLAT:.0%}): taken as a fixed cost, not scaled"
            limits.append("cycles do not grow with the work over the profiled sizes: the largest size's cycles are "
                          "taken as a fixed cost and the roofline floors decide the work")
        elif b is None or b <= 0 or rb is None or rb <= 0 or a + b <= 0 or ra + rb <= 0:
            # One size, or sizes whose cycles do not grow with the work (XLA chose another program at another
            # size): scale the largest profiled size in proportion rather than trust a line through them.
            full_cycles, raw_full = ys[big] / xs[big], raw_ys[big] / xs[big]
            how = f"scaled in proportion from the largest profiled size (x = {xs[big]:.3g})"
            limits.append("only one usable shrunk size: cycles scaled in proportion to the work" if len(set(xs)) < 2
                          else "cycles do not grow linearly with the work over the profiled sizes: scaled in "
                               "proportion from the largest")
        else:
            full_cycles, raw_full = a + b, ra + rb
            how = f"cycles = a + b*x fitted on {len(xs)} sizes, read at x = 1"
            seg = _segment(xs, ys), _segment(xs, raw_ys)
            if seg[0] and seg[1] and seg[0][0] + seg[0][1] > CONVEX * full_cycles:
                # Convex: each added unit of work still costs more at the largest sizes (a dot leaving the
                # weight-bound regime). The steady state is nearer the last slope than the line through them all.
                (a, b), full_cycles, raw_full = seg[0], seg[0][0] + seg[0][1], max(seg[1][0] + seg[1][1], 0.0)
                how = (f"cycles extrapolated along the slope of the two largest of {len(xs)} sizes, read at x = 1 "
                       f"(steeper than the line through all: the cost per unit of work was still rising)")
    if glue is not None:
        sorted_cycles = _sort_cycles(glue)
        full_cycles, raw_full = full_cycles + sorted_cycles, raw_full + sorted_cycles
        limits.append(f"the {len(glue.get('sort_ops') or ())} sort(s) outside the kernels priced once at full size "
                      f"({sorted_cycles / clock * 1e3:.3g} ms), not extrapolated: libtpu's price of a sort does not "
                      "grow in proportion to its rows or its length")
    cycles_ms = full_cycles / clock * 1e3
    flops = float(task.flops(size) or 0.0)
    int8 = _int8_flops(task, size)
    spec_bytes = traffic.get("bytes")
    hbm_bytes = max(io_bytes, spec_bytes or 0)
    floors = roofline_floors(chip, flops, io_bytes, int8)  # the task's: what any implementation needs
    own = roofline_floors(chip, flops, hbm_bytes, int8)  # this program's: its BlockSpec re-reads included
    compute_ms, memory_ms = own["compute_ms"], own["memory_ms"]
    if not flops:
        limits.append("the task declares no FLOP count: no compute floor")
    declared = [c["declared_bytes"] for c in facts["pallas_calls"] if c.get("declared_bytes") is not None]
    if spec_bytes is None and facts["pallas_calls"]:
        limits.append("HBM bytes from the inputs and outputs only (" + "; ".join(traffic.get("notes") or []) + ")")
    elif traffic.get("notes"):
        limits.extend(traffic["notes"])
    if declared and spec_bytes is not None and sum(declared) < 0.5 * spec_bytes:
        limits.append(f"the kernel's cost_estimate declares {sum(declared):.3g} bytes, under the {spec_bytes:.3g} its "
                      "BlockSpecs fetch: the BlockSpec figure is used")
    if plan.get("plain_jax"):
        limits.append(PLAIN_JAX)
    if plan.get("whole"):
        limits.append(f"profiled whole at full size, not shrunk ({plan['whole']})")
    data_dependent = bool(facts.get("data_dependent"))
    if data_dependent:
        limits.append("work depends on the data (" + ", ".join(facts["data_dependent"]) + "): the profiler cannot see "
                      "values, so the estimate is floored by the task's declared work")
    for c in facts["pallas_calls"]:
        if c.get("vmem_limit_bytes"):
            limits.append(f"{c['name']} asks for a {int(c['vmem_limit_bytes']) >> 20} MiB scoped VMEM limit")
    outside = _outside_kernels(points[big]) if facts["pallas_calls"] else None
    if outside and outside["share"] >= OUTSIDE_SHARE:
        limits.append(_outside_line(outside))
    estimated = max(cycles_ms, compute_ms, memory_ms)
    slope = None  # the cycles the line adds from x = 0 to the full size, where it was extrapolated
    if how.startswith(("cycles = a + b*x", "cycles extrapolated along", "the same cycles")) and b is not None:
        slope = (b / clock * 1e3, max(xs), a / clock * 1e3, how.startswith("cycles extrapolated along"))
    stream_ms = io_bytes / PROFILER_STREAM.get(chip.name, chip.device_hbm_bytes_per_s) * 1e3
    under = _under_priced(raw_full / clock * 1e3, cycles_ms, floors, sorted(set(unknown_loops)), slope, stream_ms)
    if under:
        under += (". The estimate is the program's floor, not a priced program" if cycles_ms < estimated else
                  ". The estimate stands on the 0-cycle ops' HBM fill, a rough stand-in for the work not priced")
        limits.append(f"under-priced: {under}")
    top = max(compute_ms, memory_ms)
    bound = "compute" if compute_ms >= memory_ms else "memory"
    if top <= 0 or estimated > 4 * top:
        bound = "overhead"
    roofline = floors["roofline_ms"]
    fit = {"how": how, "shrunk_dims": plan["shrunk_dims"], "full_dims": {d: plan["full_dims"][d] for d in plan["shrunk_dims"]},
           "points": rows, "a_cycles": a, "b_cycles": b, "max_residual": residual, "cycles_full": full_cycles,
           "clock_hz": clock, "hbm_bytes": hbm_bytes, "io_bytes": io_bytes, "hbm_bytes_source": "block specs and grid"
           if spec_bytes is not None and spec_bytes >= io_bytes else "inputs and outputs",
           "flops": flops, "rejected_dims": plan.get("rejected", {}),
           "pallas_calls": [{k: c[k] for k in ("name", "grid", "parallel")} for c in facts["pallas_calls"]],
           "fingerprints": plan.get("fingerprints") or [], **({"outside_kernels": outside} if outside else {})}
    uncertainty = _uncertainty(rows, residual, estimated, cycles_ms, max(compute_ms, memory_ms))
    return ProgramEstimate(**{**base, "ok": True}, estimated_ms=estimated, bound=bound, uncertainty=uncertainty,
                           floors={"compute_ms": floors["compute_ms"], "memory_ms": floors["memory_ms"]},
                           roofline_ms=roofline, own_floor_ms=top,
                           static_cycles_ms=raw_full / clock * 1e3,
                           fraction_of_roofline=roofline / estimated if roofline else None,
                           fit=fit, limits=limits, data_dependent=data_dependent, under_priced=under)


OUTSIDE_SHARE = 0.2  # XLA outside the pallas_calls at or above this share of a kernel program's cycles is named
_LAYOUT_OPS = ("reshape", "copy", "transpose")


def _outside_kernels(point: dict) -> dict | None:
    """What the XLA around a kernel costs at one profiled size: the share of the program's cycles (ops times their
    loops' trips) outside the pallas_calls, and the largest such ops. None when the point does not say which ops
    are the kernels."""
    kernels = set(point.get("kernel_ops") or ())
    if not kernels:
        return None
    cost = op_cycles(point)
    total = sum(cost.values())
    out = {n: c for n, c in cost.items() if n not in kernels and c > 0}
    if not total:
        return None
    top = sorted(out.items(), key=lambda kv: -kv[1])[:5]
    layouts = point.get("op_layouts") or {}
    return {"share": sum(out.values()) / total, "cycles": sum(out.values()), "dims": point.get("dims"),
            "ops": [[n, c] for n, c in top], "layouts": {n: layouts[n] for n, _ in top if n in layouts}}


def _relayout(name: str, op: dict) -> str | None:
    """What one XLA op beside a kernel copies, in words, where it moves a kernel's output or an argument between
    layouts (read by estimate_compile_job.op_layouts from the optimised HLO); None otherwise."""
    def plain(layout):  # the memory space (S(1): VMEM) is not the layout
        return re.sub(r"S\(\d+\)", "", layout or "") or "its default"

    if op.get("opcode") not in _LAYOUT_OPS and name.split(".")[0] not in _LAYOUT_OPS:
        return None  # a fusion that reads an argument computes; only a copy, transpose or reshape is said to move it
    for src in op.get("sources") or ():
        if src.get("opcode") == "custom-call" and op.get("root"):
            return (f"{name} copies the kernel's output {op['shape']} from the layout it writes, {plain(src['layout'])}, "
                    f"into {plain(op['layout'])}, the one XLA keeps the program's result in")
        if src.get("parameter") is not None and plain(src["layout"]) != plain(op["layout"]):
            return (f"{name} copies argument {src['parameter']} {src['shape']} from the layout XLA holds it in, "
                    f"{plain(src['layout'])}, into {plain(op['layout'])}")
    return None


def _outside_line(outside: dict) -> str:
    """The limit naming the XLA ops around the kernels; a reshape, copy or transpose there that costs cycles is a
    physical layout change (a free one is a bitcast), which a kernel can often avoid by taking its operands in the
    layout they already have."""
    total = outside["cycles"] / outside["share"]
    named = ", ".join(f"{n} {c / total:.0%}" for n, c in outside["ops"])
    line = (f"{outside['share']:.0%} of the kernel program's profiled cycles are XLA ops outside its pallas_calls "
            f"(at {outside['dims']}: {named})")
    said = [w for w in (_relayout(n, (outside.get("layouts") or {}).get(n) or {}) for n, _ in outside["ops"]) if w]
    if said:
        return line + "; " + "; ".join(said) + (
            " (a layout lists dims minor to major, then the tiling: a kernel that takes or returns an array with its "
            "dims in that order, jnp.transpose'd to the task's order outside, a bitcast, is not copied)")
    layout = [n for n, _ in outside["ops"] if n.split(".")[0] in _LAYOUT_OPS]
    if layout:
        line += (f"; {', '.join(layout)} move data between layouts (a reshape that costs cycles is a relayout, not "
                 "a bitcast): a kernel that takes and returns its operands in the layout XLA already holds them "
                 "saves those copies")
    return line


SPLIT = "priced in parts"


def _fit_split(base: dict, lines: list[dict], task, chip, size: str, io_bytes: int) -> ProgramEstimate:
    """A kernel no size of the task shrinks whole, priced as the sum of its parts: each pallas_call's own cycles
    (only the kernel's op: a lone call's layout copies are not the program's; an op priced at 0 cycles is a named
    failure, not filled with its full-size bytes), read at its full grid on the line
    through its two cut sizes, plus the XLA around the kernels at its roofline floor. The sum then goes through the
    ordinary fit at x = 1, for floors, bound and limits."""
    head = next(ln for ln in lines if "plan" in ln)
    glue_point = next((ln["point"] for ln in lines if "point" in ln and ln["point"].get("glue")), None)
    done = [ln["point"] for ln in lines if "point" in ln and not ln["point"].get("glue")]
    clock, bw = chip.clock, chip.device_hbm_bytes_per_s
    planned, profiled = {int(p["part"]) for p in head["plan"]["split"]}, {int(p["part"]) for p in done}
    if planned != profiled:  # a part left out would price the kernel without its work
        return ProgramEstimate(**base, stage="sandbox", error=f"the profile priced pallas_calls {sorted(profiled)} "
                               f"where the plan split {sorted(planned)}")

    def cost(p: dict) -> float:
        keep = set(p.get("kernel_ops") or ())
        return float(sum(c for n, c in op_cycles(p).items() if n in keep))

    parts, limits, total, reach = [], [], 0.0, 1.0
    for i in sorted({p["part"] for p in done}):
        pts = sorted((p for p in done if p["part"] == i), key=lambda p: float(p["x"]))
        xs, ys = [float(p["x"]) for p in pts], [cost(p) for p in pts]
        if not all(ys):
            # 17p's projections: the profiler priced the kernel's op at 0 cycles at every cut (it saw none of its
            # work); filled with the op's bytes it read the full-size operands at every cut, the same at each.
            return ProgramEstimate(**base, stage="unpriced", error=f"libtpu's profiler priced pallas_call {i} of "
                                   f"{len({p['part'] for p in done})} at 0 cycles (it sees none of that kernel's "
                                   "work), so the kernel cannot be priced in parts", hint=_UNPRICEABLE_HINT)
        if xs[-1] >= 1 - 1e-12:
            full, how = ys[-1], "profiled whole"
        elif len(xs) >= 2 and ys[-1] > ys[0] and xs[-1] > xs[0]:
            full = ys[0] + (ys[-1] - ys[0]) / (xs[-1] - xs[0]) * (1 - xs[0])
            how = f"line through {len(xs)} cut grids"
        else:
            full, how = ys[-1] / xs[-1], "scaled in proportion from its largest cut grid"
            limits.append(f"part {i}: its cycles do not grow with its tiles: {how}")
        reach = max(reach, 1 / xs[-1])
        parts.append({"part": i, "grids": [p.get("grid") for p in pts], "x": xs, "cycles": [round(y) for y in ys],
                      "cycles_full": round(full), "how": how})
        total += full
    glue = head["plan"].get("glue") or {"bytes": 0, "ops": 0}
    # Each XLA operation at its own roofline floor: its bytes at HBM bandwidth or its FLOPs at peak, the larger.
    peak = chip.device_peak_flops
    work = glue.get("work") if "work" in glue else [[glue["bytes"], 0]]
    sort_floor = [[float(b), float(f)] for b, f in glue.get("sort_work") or []]
    glue_cycles = sum(max(b / bw, f / peak) for b, f in work + ([] if glue_point else sort_floor)) * clock
    if glue_point is not None:  # the sorts profiled at full size, not at their bytes' floor
        glue_cycles += _sort_cycles(glue_point)
        limits.append(f"the {len(glue_point.get('sort_ops') or ())} sort(s) outside the kernels profiled at full size "
                      f"({_sort_cycles(glue_point) / clock * 1e3:.3g} ms), not at their bytes' floor")
    elif sort_floor:
        limits.append(f"{len(sort_floor)} sort(s) outside the kernels at their roofline floor: not profiled")
    unknown = [lp["name"] for p in done for lp in p.get("loops") or [] if lp.get("trip_count") is None]
    synthetic = {"dims": head["plan"]["full_dims"], "x": 1.0, "tiles": None,
                 "ops": {"parts": round(total + glue_cycles)}, "zero_cycle_bytes": {}, "trips": {},
                 "compile_s": sum(float(p.get("compile_s") or 0) for p in done)}
    out = _fit(base, [head, {"point": synthetic}], task, chip, size, io_bytes)
    out.fit.update(how=f"{SPLIT}: {len(parts)} pallas_calls, each alone on its full-size operands with its grid cut "
                       "along parallel axes and read at its full grid, plus the XLA around them at its roofline floor",
                   parts=parts, glue={k: v for k, v in glue.items() if k != "work"}, glue_cycles=round(glue_cycles))
    out.limits[:0] = [f"{SPLIT}: each pallas_call alone, its grid cut along parallel axes (extrapolated up to "
                      f"{reach:.3g} times its tiles); the XLA around the kernels ({glue['ops']} operations, "
                      f"{glue['bytes'] / 2**20:.3g} MiB in and out, reshapes free, {float(glue.get('flops') or 0):.3g} "
                      "FLOPs) each operation at its roofline floor, not profiled; "
                      "what the parts would overlap in one program is not seen", *limits] + (
        [f"loops whose trip count could not be read were priced once: {', '.join(sorted(set(unknown)))}"]
        if unknown else [])
    out.uncertainty["extrapolation"] = reach
    return out


def _zero_cycle_fill(point: dict, apart: set, clock: float, bw: float) -> tuple[float, dict[str, float]]:
    """The cycles that fill the ops the profile priced at 0, once per loop trip: each op's HBM bytes / bandwidth,
    or XLA's own cost model's cycles for it where those are more (a fusion whose DMA reaches HBM: the profiler
    leaves out its compute, XLA's compiler priced it). Returns (fill, {op: cycles filled from the model})."""
    trips = point.get("trips") or {}
    by_bytes, model = point["zero_cycle_bytes"], point.get("zero_cycle_model") or {}
    fill, modelled = 0.0, {}
    for n in set(by_bytes) | set(model):
        if n in apart:
            continue
        times = max(int(trips.get(n, 1)), 1)
        hbm = int(by_bytes.get(n, 0)) / bw * clock
        if int(model.get(n, 0)) > hbm:
            modelled[n] = int(model[n]) * times
        fill += max(hbm, int(model.get(n, 0))) * times
    return fill, modelled


_HBM_DMA = {"REMOTE", "LOCAL_AND_REMOTE"}  # libtpu's profile: DMA types that reach HBM


def _modelled_line(rows: list[dict]) -> str:
    """The limit naming the 0-cycle ops filled from XLA's cost model, at the largest profiled size."""
    last = max((r for r in rows if r.get("zero_cycle_model_ops")), key=lambda r: r["x"])
    total = last["cycles"] + last["zero_cycle_fill_cycles"]
    names, kinds = last["zero_cycle_model_ops"], last.get("zero_cycle_model_dma") or ["not named"]
    # Every 0-cycle op read in the suites' programs had a DMA reaching HBM (benchmarks/results/model_vs_profile.md);
    # the line says so only where the profile names that DMA type for each op filled here.
    why = ("their DMA reaches HBM (" + ", ".join(kinds) + "), and the profiler leaves such an op out"
           if set(kinds) <= _HBM_DMA else "the profile's DMA type for them: " + ", ".join(kinds))
    return (f"{len(names)} op(s) the profiler priced at 0 cycles ({', '.join(names[:3])}"
            f"{', ...' if len(names) > 3 else ''}: {why}) "
            f"were filled with XLA's own cost model's cycles for them (the compiled program's estimated_cycles, "
            f"classic model), above their HBM time: {last['zero_cycle_model_cycles'] / total:.0%} of the largest "
            f"profiled size's cycles. {MODEL_AGREEMENT}")


def _uncertainty(rows: list[dict], residual: float | None, estimated: float, cycles_ms: float, floor_ms: float) -> dict:
    """What the estimate's error depends on, as numbers: how far it was extrapolated (full size over the largest
    profiled size), how well the line fits, how much of the largest profile is filled 0-cycle ops or loop trips
    beyond the first, and whether the figure is the profile or a floor."""
    last = max(rows, key=lambda r: r["x"])
    total = last["cycles"] + last["zero_cycle_fill_cycles"]
    once = last.get("cycles_once")
    return {"extrapolation": 1.0 / last["x"] if last["x"] else None,
            "fit_max_residual": residual,
            "zero_cycle_fill_share": last["zero_cycle_fill_cycles"] / total if total else None,
            # the part of that fill XLA's cost model priced (a 0-cycle fusion's compute), not its bytes
            "cost_model_share": last.get("zero_cycle_model_cycles", 0) / total if total else None,
            "loop_trips_share": (last["cycles"] - once) / total if once is not None and total else None,
            "decided_by": "static profile" if cycles_ms >= floor_ms else "roofline floor"}


def _under_priced(static_ms: float, filled_ms: float, floors: dict, unknown_loops: list[str],
                  slope: tuple | None = None, stream_ms: float | None = None) -> str | None:
    """Why the profile prices less than the work physically needs, or None: a profile below the task's FLOP floor
    (or far below its HBM floor) misses work, or was extrapolated from sizes too small to be bound by that work, and
    the estimate then stands on the floor, not on the profile. `slope`: (the fitted line's added ms from x = 0 to
    x = 1, the largest profiled x, its fixed ms, whether it is the convex profile's last slope) where the figure
    was extrapolated."""
    why = []
    if floors["compute_ms"] and static_ms < UNDER_FLOPS * floors["compute_ms"]:
        why.append(f"its static profile ({static_ms:.3g} ms) is below the task's FLOP floor "
                   f"({floors['compute_ms']:.3g} ms at peak)")
    stream_ms = floors["memory_ms"] if stream_ms is None else stream_ms
    if stream_ms and filled_ms < UNDER_BYTES * stream_ms:
        why.append(f"its static profile with 0-cycle ops filled ({filled_ms:.3g} ms) is under {UNDER_BYTES:.0%} of "
                   f"what the profiler prices for streaming the task's bytes ({stream_ms:.3g} ms; their HBM floor is "
                   f"{floors['memory_ms']:.3g} ms)")
    if not why:
        return None
    if unknown_loops:
        cause = f"loops whose trip count could not be read were priced once: {'; '.join(unknown_loops)}"
    elif (slope and floors["compute_ms"] and slope[0] < UNDER_FLOPS * floors["compute_ms"] and slope[1] < 1
          and (slope[2] >= slope[0] * slope[1] or slope[3])):  # a fixed part holds the sizes, or cost still rising
        held = (f"still rising (each added unit of work cost more at the larger sizes)" if slope[3] and
                slope[2] < slope[0] * slope[1] else f"held by a fixed cost ({slope[2]:.3g} ms: operands every size "
                                                    "streams whole, such as a weight)")
        cause = (f"the profiled sizes (up to x = {slope[1]:.3g} of the full work) are {held} and the line adds only "
                 f"{slope[0]:.3g} ms for the rest of the work, under its {floors['compute_ms']:.3g} ms at peak: those "
                 "sizes are too small to be compute-bound as the full size is, so the slope does not show the "
                 "compute (raise MAXKERNEL_ESTIMATE_MAX_GFLOP to profile larger sizes)")
    else:
        cause = ("the profile misses work (an op it prices at 0 cycles that moves no bytes it can see, or "
                 "work outside the profiled module), or the task's declared FLOPs exceed what the program does")
    return "; ".join(why) + f". Likely cause: {cause}"


def _segment(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """(a, b) of the line through the two largest sizes' points, or None (fewer than two, or not growing)."""
    pts = sorted(zip(xs, ys))[-2:]
    if len(pts) < 2 or pts[1][0] <= pts[0][0] or pts[1][1] <= pts[0][1]:
        return None
    (x2, y2), (x3, y3) = pts
    b = (y3 - y2) / (x3 - x2)
    return y3 - b * x3, b


def _line_fit(xs: list[float], ys: list[float]) -> tuple[float | None, float | None, float | None]:
    """Least-squares a + b*x through the points, and the largest relative residual; (None, None, None) for one x."""
    if len(set(xs)) < 2:
        return None, None, None
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    residual = max(abs(a + b * x - y) / y for x, y in zip(xs, ys) if y) if any(ys) else None
    return a, b, residual
