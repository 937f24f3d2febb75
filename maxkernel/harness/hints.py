"""One-line, actionable hints for the compiler and lowering errors Pallas kernels commonly hit."""

from __future__ import annotations

import re
from collections.abc import Callable

from maxkernel import chips as chips_mod

__all__ = ["hint_for"]

_UNIT = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def hint_for(error_text: str, chip=None) -> str | None:
    """A one-line fix for `error_text` on `chip` (a Chip, a chip name, or None), or None if unrecognised."""
    if not error_text:
        return None
    if isinstance(chip, str):
        try:
            chip = chips_mod.get(chip)
        except ValueError:
            chip = None
    for pattern, make in _RULES:
        m = re.search(pattern, error_text, re.S)
        if m:
            return make(m, chip)
    return None


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _size(num: str, unit: str) -> float:
    return float(num) * _UNIT[unit]


def _chip_label(chip) -> str:
    return chip.name if chip is not None else "this chip"


def _vmem_fix(needed: float | None, chip) -> str:
    """Shrink blocks, or raise the scoped limit as far as the chip's physical VMEM allows."""
    shrink = "shrink the blocks (every pipelined input/output block is double-buffered) or the scratch"
    if chip is None or not chip.vmem_bytes:
        return shrink + ", or raise pltpu.CompilerParams(vmem_limit_bytes=...)"
    if needed is not None and needed > chip.vmem_bytes:
        return f"{shrink}: {chip.name} has only {_mib(chip.vmem_bytes)} of VMEM per core, so no limit can fit it"
    return (f"{shrink}, or pass pltpu.CompilerParams(vmem_limit_bytes=...) up to "
            f"{_mib(chip.vmem_bytes)} ({chip.name}'s VMEM per core)")


def _scoped_oom(m: re.Match, chip) -> str:
    need, limit = _size(m.group(1), m.group(2)), _size(m.group(3), m.group(4))
    return f"Kernel needs {_mib(need)} of scoped VMEM, over the {_mib(limit)} limit on {_chip_label(chip)}: " + _vmem_fix(need, chip)


def _capacity_oom(m: re.Match, chip) -> str:
    need, cap = _size(m.group(1), m.group(2)), _size(m.group(3), m.group(4))
    return (f"Kernel needs {_mib(need)} of VMEM but {_chip_label(chip)} has {_mib(cap)} per core: shrink the blocks, "
            "use pipeline_mode=pl.Buffered(1) for blocks whose index never changes, or trim scratch buffers")


def _allocation_oom(m: re.Match, chip) -> str:
    need, cap = int(m.group(1)), int(m.group(2))
    return (f"A {_mib(need)} VMEM allocation exceeds the {_mib(cap)} on {_chip_label(chip)}: shrink that block or "
            "scratch buffer (or tile the work over more grid steps)")


def _unaligned(m: re.Match, chip) -> str:
    dim, mult = m.group(1), m.group(2)
    return (f"A dynamic offset in dimension {dim} must be provably a multiple of {mult}: build it as i * {mult} "
            f"(or wrap it in pl.multiple_of(start, {mult}) when it truly is), or move the offset into the "
            "BlockSpec index_map so the pipeline does the slicing")


def _matmul_dtype(m: re.Match, chip) -> str:
    dtype = m.group(2)
    where = f"The {chip.name} MXU" if chip is not None else "This chip's MXU"
    fp8 = "f8" in dtype.lower()
    alt = " fp8 matmuls need v5e, v5p, v6e or 7x." if fp8 else ""
    return f"{where} cannot multiply {dtype} operands: cast both operands to bfloat16 before jnp.dot on this chip.{alt}"


def _int8_vector(m: re.Match, chip) -> str:
    return ("TPU vector units do no int8 arithmetic: cast the loaded block to int32 (or float32/bfloat16), "
            "compute, then cast back when storing")


def _f16(m: re.Match, chip) -> str:
    return "float16 is not a TPU vector type: use bfloat16 in the kernel (or cast to float32 outside it)"


def _x64(m: re.Match, chip) -> str:
    return ("TPU kernels have no 64-bit types: keep int32/float32 inside the kernel and give constants and "
            "iotas an explicit 32-bit dtype (x64 mode makes Python scalars 64-bit)")


_PRIMITIVE_FIX = {
    "sort": "sort outside the kernel (jax.lax.sort / lax.top_k) or build a bitonic network from jnp.minimum/maximum",
    "top_k": "take the top-k outside the kernel, or keep a running k-best with jnp.maximum/jnp.where",
    "cumsum": "write the prefix sum as a matmul with a lower-triangular ones mask, or a log-step loop of pltpu.roll + add",
    "cumprod": "use cumulative sums of logs (as a triangular-mask matmul) or move it outside the kernel",
    "argsort": "sort indices outside the kernel",
    "gather": "use jnp.take_along_axis along one axis, a one-hot matmul, or scalar prefetch + index_map",
}


def _primitive(m: re.Match, chip) -> str:
    prim = m.group(1)
    fix = next((v for k, v in _PRIMITIVE_FIX.items() if prim.startswith(k)), "rewrite it with supported ops or move it out of the kernel")
    return f"`{prim}` has no Pallas TPU lowering: {fix}"


def _gather(m: re.Match, chip) -> str:
    return f"Fancy indexing is not lowerable in a TPU kernel: {_PRIMITIVE_FIX['gather']}"


def _smem_vector(m: re.Match, chip) -> str:
    return ("SMEM holds scalars: read one element at a time (ref[i]) or keep the array in VMEM "
            "(the default BlockSpec memory space) to load vectors")


def _block_shape(m: re.Match, chip) -> str:
    return ("Each block's last two dims must be multiples of 8 and 128 (16 rows for bf16, 32 for 8-bit types are "
            "better still) or equal the array's dims: pick block sizes that divide the array, e.g. (256, 512)")


def _dim_semantics(m: re.Match, chip) -> str:
    return "Give dimension_semantics exactly one entry per grid axis ('parallel' or 'arbitrary')"


def _buffering(m: re.Match, chip) -> str:
    return "TPU pipelines take pl.Buffered(1) or pl.Buffered(2) only; deeper prefetch needs a manual DMA pipeline"


def _shape_cast(m: re.Match, chip) -> str:
    return ("Mosaic cannot reshape across the (8, 128) tile: reshape only leading dims, keep the last dim a multiple "
            "of 128, or reshape outside the kernel")


def _triton_pow2(m: re.Match, chip) -> str:
    return ("Triton needs power-of-two sizes for every array in the kernel: use power-of-two block shapes and "
            "mask the tail (pl.cdiv grid with masked loads/stores)")


def _gpu_smem(m: re.Match, chip) -> str:
    limit = chip.shared_mem_bytes_per_block if chip is not None and chip.shared_mem_bytes_per_block else 227 * 1024
    return (f"The kernel's blocks exceed the {limit // 1024} KiB of shared memory a GPU block may use: use smaller "
            "blocks or fewer pipeline stages (num_stages)")


def _tpu_params_on_gpu(m: re.Match, chip) -> str:
    return (f"This is a TPU kernel (pltpu.CompilerParams) and cannot target {_chip_label(chip)}: compile it for a TPU "
            "chip, or write a GPU variant with GPU compiler params")


def _device_kind(m: re.Match, chip) -> str:
    return "The kernel queries the TPU it runs on: compile it for a named chip (--chip v5e, ...) on a CPU host"


_N = r"([\d.]+)([KMG])"
_RULES: list[tuple[str, Callable[[re.Match, object], str]]] = [
    (rf"Scoped allocation with size {_N}\S* and limit {_N}", _scoped_oom),
    (rf"Used {_N}\S* of {_N}\S* vmem", _capacity_oom),
    (r"Allocation \(size=(\d+)\) would exceed memory \(size=(\d+)\).*?space=vmem", _allocation_oom),
    (r"cannot statically prove that index in dimension (\d+) is a multiple of (\d+)", _unaligned),
    (r"Unsupported matmul (LHS|RHS) type on target: vector<[\dx]*x(\w+)>", _matmul_dtype),
    (r"Only vector<i16> and vector<i32> are supported, but got 'i8'", _int8_vector),
    (r"Invalid vector type for load.*?xf16>|float16 is not supported|\bf16\b.*not supported", _f16),
    (r"64-bit types are not supported", _x64),
    (r"Unimplemented primitive in Pallas TPU lowering for \w+: (\w+)", _primitive),
    (r"Only take_along_axis-like gathers supported", _gather),
    (r"Can only load scalars from SMEM", _smem_vector),
    (r"block shape are divisible by 8 and 128", _block_shape),
    (r"Length of grid does not match length of dimension semantics", _dim_semantics),
    (r"Only single \(1\) and double \(2\) buffering", _buffering),
    (r"(?i)unsupported shape cast|not implemented: .*shape_cast", _shape_cast),
    (r"whose size is a power of 2", _triton_pow2),
    (r"exceeds available shared memory|Shared memory size limit exceeded", _gpu_smem),
    (r"Compiler params for platform tpu cannot be used for gpu", _tpu_params_on_gpu),
    (r"Unsupported TPU device kind", _device_kind),
]
