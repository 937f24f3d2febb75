"""The compile job: each broken kernel is caught at the right stage with the right hint; a good one compiles."""

import time
from pathlib import Path

import pytest
from _extras import missing, need_module

from maxkernel import chips
from maxkernel.harness.jobs import compile_job as _compile_job
from maxkernel.harness.hints.diagnose import hint_for

KERNELS = Path(__file__).parents[1] / "tools" / "kernels"
TPU_NAMES = [c.name for c in chips.CHIPS.values() if c.is_tpu]


def compile_job(kernel, chip, task="8p_GEMM", size="full", tmp=Path("."), **tunables):
    job = {"task": task, "kernel": str(KERNELS / kernel), "chip": chip, "size": size, "tunables": tunables}
    return _compile_job.run(job, tmp)


@pytest.fixture(scope="module")
def supported():
    """TPU chips the installed libtpu can compile for (all five with libtpu 0.0.42.1)."""
    need_module("libtpu", extra="tpu")
    names = _compile_job.supported_tpu_chips()
    print(f"\nlibtpu compile-only topologies available for: {names}")
    return names


def need(chip, supported):
    if chip not in supported:  # the pinned libtpu has all five: another version is a broken environment
        missing(f"the installed libtpu has no compile-only topology for {chip} (the tpu extra pins libtpu==0.0.42.1)")


# ---- stage 1: lowering (no libtpu needed) --------------------------------------------------------------

@pytest.mark.unit
@pytest.mark.parametrize("chip", ["v5e", "7x"])
def test_block_shape_rule_is_caught_at_lowering(chip):
    r = compile_job("bad_block_shape.py", chip)
    assert (r["ok"], r["stage"]) == (False, "lower")
    assert "divisible by 8 and 128" in r["error"]
    assert "multiples of 8 and 128" in r["hint"]


@pytest.mark.unit
def test_64_bit_types_are_caught_at_lowering():
    r = compile_job("int64_kernel.py", "v6e", task="12p_RMSNorm")
    assert (r["ok"], r["stage"]) == (False, "lower")
    assert "64-bit" in r["error"] and "32-bit" in r["hint"]


@pytest.mark.unit
def test_gpu_target_lowers_and_refuses_tpu_params():
    r = compile_job("good_matmul.py", "h100", size="smoke")
    assert (r["ok"], r["stage"]) == (False, "lower")
    assert "TPU kernel" in r["hint"]


@pytest.mark.unit
def test_native_on_a_cpu_host_says_no_accelerator():
    r = compile_job("good_matmul.py", "native", size="smoke")
    assert (r["ok"], r["stage"]) == (False, "native")
    assert "no accelerator" in r["error"]


@pytest.mark.unit
def test_kernel_that_fails_to_import_is_a_lowering_failure(tmp_path):
    bad = tmp_path / "syntax.py"
    bad.write_text("def workload(a, b):\n    return a +\n")
    r = _compile_job.run({"task": "8p_GEMM", "kernel": str(bad), "chip": "v5e"}, tmp_path)
    assert (r["ok"], r["stage"]) == (False, "lower") and "SyntaxError" in r["error"]


@pytest.mark.unit
def test_usage_errors_raise(tmp_path):
    with pytest.raises(ValueError, match="valid chips"):
        compile_job("good_matmul.py", "v9")
    with pytest.raises(FileNotFoundError):
        compile_job("no_such_kernel.py", "v5e")


# ---- stage 2: deviceless Mosaic + XLA:TPU compile (libtpu) ---------------------------------------------

def test_good_kernel_compiles_at_smoke_size(supported):
    need("v5e", supported)
    r = compile_job("good_matmul.py", "v5e", size="smoke")
    assert r["ok"] and r["stage"] == "compile", r["error"]
    assert 0 < r["vmem_bytes"] < 16 << 20


@pytest.mark.slow
def test_vmem_overflow_depends_on_the_chip(supported):
    need("v5e", supported)
    need("v6e", supported)
    small = compile_job("vmem_hungry.py", "v5e")
    assert (small["ok"], small["stage"]) == (False, "compile")
    assert "E1001" in small["error"] and "16.00M" in small["error"]
    assert "vmem_limit_bytes" in small["hint"] and "128.0 MiB" in small["hint"]
    assert small["vmem_bytes"] > 16 << 20  # what it asked for, parsed from the error
    big = compile_job("vmem_hungry.py", "v6e")
    assert big["ok"], big["error"]
    assert 16 << 20 < big["vmem_bytes"] <= chips.get("v6e").scoped_vmem_default_bytes


@pytest.mark.slow
def test_vmem_beyond_physical_capacity_on_v4(supported):
    need("v4", supported)
    r = compile_job("vmem_hungry.py", "v4")
    assert (r["ok"], r["stage"]) == (False, "compile")
    assert "16.0 MiB per core" in r["hint"]


def test_fp8_matmul_is_a_v4_only_rejection(supported):
    need("v4", supported)
    need("v5e", supported)
    old = compile_job("fp8_matmul.py", "v4", size="smoke")
    assert (old["ok"], old["stage"]) == (False, "compile")
    assert "matmul" in old["error"] and "bfloat16" in old["hint"]
    new = compile_job("fp8_matmul.py", "v5e", size="smoke")
    assert new["ok"], new["error"]


def test_unaligned_dynamic_lane_slice(supported):
    need("v5e", supported)
    r = compile_job("unaligned_lane_slice.py", "v5e", task="12p_RMSNorm", size="smoke")
    assert (r["ok"], r["stage"]) == (False, "compile")
    assert "E2003" in r["error"] and "multiple of 128" in r["error"]
    assert "pl.multiple_of(start, 128)" in r["hint"]


@pytest.mark.slow
@pytest.mark.parametrize("chip", TPU_NAMES)
def test_good_kernel_compiles_for_every_supported_chip(chip, supported):
    need(chip, supported)
    t0 = time.perf_counter()
    cold = compile_job("good_matmul.py", chip)
    cold_s = time.perf_counter() - t0
    warm = compile_job("good_matmul.py", chip, bm=256)  # new tunables: a real recompile, nothing cached
    for r in (cold, warm):
        assert r["ok"] and r["stage"] == "compile", r["error"]
        assert 0 < r["vmem_bytes"] <= chips.get(chip).scoped_vmem_default_bytes
        assert r["pallas_calls"] == 1  # the roofline is the parent's now (estimate.roofline_floors, issue 29)
        assert r["memory"]["argument_size_in_bytes"] == 2 * (8192 * 8192 + 8192 * 28672)
    print(f"\n{chip}: cold {cold_s:.2f}s (lower {cold['lower_s']:.2f}s, compile {cold['compile_s']:.2f}s), "
          f"warm compile {warm['compile_s']:.2f}s; VMEM {cold['vmem_bytes'] / 2**20:.2f} MiB "
          f"(bm=512) / {warm['vmem_bytes'] / 2**20:.2f} MiB (bm=256)")


# ---- hints on error text captured from jax 0.10.2 / libtpu 0.0.42.1 ------------------------------------

@pytest.mark.parametrize("text, chip, expect", [
    ("E1001: CompileTimeScopedVmemOom: ... Scoped allocation with size 60.00M and limit 32.00M exceeded",
     "v6e", "up to 128.0 MiB"),
    ("Scoped allocation with size 200.00M and limit 16.00M exceeded", "v5e", "no limit can fit"),
    ("Ran out of memory in memory space vmem. Used 72.82M of 63.94M vmem. Exceeded", "v5p", "63.9 MiB per core"),
    ("Allocation (size=31457280) would exceed memory (size=16777216) :: #allocation2 [space=vmem, scoped]",
     "v4", "30.0 MiB VMEM allocation"),
    ("Not implemented: Only vector<i16> and vector<i32> are supported, but got 'i8'. Please cast", "v5e", "int32"),
    ("Invalid vector type for load ... -> vector<8x128x2xf16>", "v6e", "bfloat16"),
    ("Unimplemented primitive in Pallas TPU lowering for tc: sort. Please file", "v5e", "bitonic"),
    ("Unimplemented primitive in Pallas TPU lowering for tc: cumsum. Please file", "v5e", "triangular"),
    ("NotImplementedError: Only take_along_axis-like gathers supported", "v5e", "one-hot"),
    ("ValueError: Can only load scalars from SMEM", "v5e", "VMEM"),
    ("Length of grid does not match length of dimension semantics. len(grid)=1", "v5e", "one entry per grid"),
    ("Only single (1) and double (2) buffering are supported. Got 3.", "v5e", "pl.Buffered(2)"),
    ("requires that all operations have array arguments and results whose size is a power of 2", "h100",
     "power-of-two"),
    ("Mosaic GPU kernel exceeds available shared memory: smem_bytes=294920 > max_smem_bytes=232448", "h200",
     "227 KiB"),
    ("RESOURCE_EXHAUSTED: Shared memory size limit exceeded", "h100", "num_stages"),
    ("E2001: Unsupported matmul RHS type on target: vector<128x128xf8E5M2>", "v4", "v5e, v5p, v6e or 7x"),
])
@pytest.mark.unit
def test_hint_families(text, chip, expect):
    assert expect in hint_for(text, chips.get(chip))


@pytest.mark.unit
def test_no_hint_for_unknown_text():
    assert hint_for("something else entirely", "v5e") is None
    assert hint_for("", None) is None


@pytest.mark.unit
def test_a_gather_dma_of_one_row_is_told_that_hbm_is_tiled_too():
    """Met writing rw_topk_sparse_attention_sink: one DMA per selected key row failed to compile with Mosaic's 'index
    at dimension 0 is divisible by the tile dimension 8' and no hint, first for the VMEM destination, then (with a
    flat destination) for the HBM source."""
    said = hint_for("Failed to verify that the index at dimension 1 is divisible by the tile dimension 8. If it is, "
                    "use tpu.assume_multiple to suppress this error.", "v5e")
    assert "whole tiles of 8" in said and "dimension 1" in said and "HBM arrays are tiled" in said
