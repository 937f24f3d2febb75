"""The accelerators maxkernel targets: their limits, peak rates, and how JAX and libtpu name them."""

from __future__ import annotations

import re

from dataclasses import dataclass

__all__ = ["Chip", "CHIPS", "get", "from_device_kind", "detect", "roofline_seconds", "ridge_point"]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB


@dataclass(frozen=True)
class Chip:
    """One accelerator generation. Rates and HBM are per chip; VMEM/SMEM are per TensorCore."""

    name: str
    platform: str  # "tpu" | "gpu" | "cpu"
    lowering_platform: str  # what jax.jit(...).lower(lowering_platforms=...) takes: "tpu" | "cuda" | "cpu"
    device_kinds: tuple[str, ...]  # device.device_kind strings JAX reports (GPUs: matched by substring)
    peak_bf16_flops: float  # dense, per chip
    hbm_bytes_per_s: float
    hbm_bytes: int
    generation: int | None = None
    vmem_bytes: int | None = None  # TPU: VMEM per TensorCore, the most vmem_limit_bytes can grant
    scoped_vmem_default_bytes: int | None = None  # TPU: what a kernel gets without vmem_limit_bytes
    smem_bytes: int | None = None  # TPU: scalar memory per TensorCore
    shared_mem_bytes_per_block: int | None = None  # GPU: opt-in maximum per thread block
    topology_name: str | None = None  # libtpu compile-only topology for a deviceless compile
    abstract_device_kind: str | None = None  # for jax.sharding.AbstractDevice, so chip queries resolve
    cores_per_device: int = 1  # TensorCores one compile-only device spans (AbstractDevice num_cores)
    devices_per_chip: int = 1  # JAX devices one chip shows up as (7x: one per TensorCore)
    nominal: bool = False  # True where the rates are placeholders, not a spec sheet
    clock_hz: float | None = None  # TPU: TensorCore clock, to turn libtpu's estimated cycles into seconds
    mxu_flops_per_cycle: int | None = None  # TPU: dense bf16 FLOPs all MXUs of one chip retire per cycle
    peak_int8_ops: float | None = None  # dense int8 x int8 matmul ops per second, per chip; None: the bf16 rate

    @property
    def is_tpu(self) -> bool:
        return self.platform == "tpu"

    @property
    def clock(self) -> float | None:
        """TensorCore clock in Hz: the peak rate over what the MXUs retire per cycle (see the table's sources)."""
        if self.clock_hz:
            return self.clock_hz
        return self.peak_bf16_flops / self.mxu_flops_per_cycle if self.mxu_flops_per_cycle else None

    @property
    def device_peak_flops(self) -> float:
        """Peak dense bf16 FLOP/s of the one JAX device a kernel runs on."""
        return self.peak_bf16_flops / self.devices_per_chip

    @property
    def device_peak_int8_ops(self) -> float:
        """Peak dense int8 matmul ops/s of one JAX device (the bf16 rate where the chip has no faster int8 path)."""
        return (self.peak_int8_ops or self.peak_bf16_flops) / self.devices_per_chip

    @property
    def device_hbm_bytes_per_s(self) -> float:
        return self.hbm_bytes_per_s / self.devices_per_chip


# Sources. TPU rates and HBM: Google Cloud TPU system-architecture pages (cloud.google.com/tpu/docs/v4,
# v5e, v5p, v6e, tpu7x). VMEM and SMEM per TensorCore: jax/_src/pallas/mosaic/tpu_info.py (jax 0.10.2),
# confirmed with libtpu 0.0.42.1 deviceless compiles (the largest scratch that compiles with
# vmem_limit_bytes = capacity). Scoped-VMEM defaults: the limit libtpu 0.0.42.1 prints in E1001 errors
# (v4 has no separate scoped limit: its whole 16 MiB is the limit). Compile-only device shapes
# (cores_per_device, two devices per v4/7x topology) as libtpu 0.0.42.1 reports them.
# Clocks: peak_bf16_flops / (MXU count x MXU width^2 x 2), with the MXU counts of Google's architecture pages and
# the "How to Scale Your Model" TPU chapter (v4, v5p: 2 TensorCores x 4 MXUs of 128x128; v5e: 1 x 4 of 128x128;
# v6e: 1 x 4 of 256x256; 7x: 2 x 4 of 256x256, assumed): v4 1.05 GHz, v5e 1.5 GHz, v5p 1.75 GHz, v6e 1.75 GHz,
# 7x 2.2 GHz. Derived, not read from a spec sheet: tpu-estimate.md checks v5e's against its GEMM figures.
# int8 peaks (the MXU's int8 path at twice the bf16 rate): the same Cloud TPU pages, v5e 393 TOPS, v5p 918,
# v6e 1836; v4 lists one figure for bf16 and int8. GPUs: the datasheets' dense INT8 Tensor Core figure.
# GPUs: NVIDIA H100 SXM5 and H200 SXM datasheets (dense, no sparsity); 227 KiB opt-in shared memory per
# block is the sm_90 limit in the CUDA C Programming Guide (compute capability table).
CHIPS: dict[str, Chip] = {
    c.name: c
    for c in (
        Chip(
            name="v4", mxu_flops_per_cycle=2 * 4 * 128 * 128 * 2, platform="tpu", lowering_platform="tpu", generation=4,
            device_kinds=("TPU v4",),
            peak_bf16_flops=275e12, hbm_bytes_per_s=1200e9, hbm_bytes=32 * GiB,
            vmem_bytes=16 * MiB, scoped_vmem_default_bytes=16 * MiB, smem_bytes=1 * MiB,
            topology_name="v4:1x1x1", abstract_device_kind="TPU v4", cores_per_device=1,
        ),
        Chip(
            name="v5e", mxu_flops_per_cycle=4 * 128 * 128 * 2, platform="tpu", lowering_platform="tpu", generation=5,
            device_kinds=("TPU v5 lite", "TPU v5e"),
            peak_bf16_flops=197e12, peak_int8_ops=393e12, hbm_bytes_per_s=819e9, hbm_bytes=16 * 10**9,
            vmem_bytes=128 * MiB, scoped_vmem_default_bytes=16 * MiB, smem_bytes=1 * MiB,
            topology_name="v5e:1x1", abstract_device_kind="TPU v5 lite", cores_per_device=1,
        ),
        Chip(
            name="v5p", mxu_flops_per_cycle=2 * 4 * 128 * 128 * 2, platform="tpu", lowering_platform="tpu", generation=5,
            device_kinds=("TPU v5", "TPU v5p"),
            peak_bf16_flops=459e12, peak_int8_ops=918e12, hbm_bytes_per_s=2765e9, hbm_bytes=95 * 10**9,
            vmem_bytes=64 * MiB, scoped_vmem_default_bytes=16 * MiB, smem_bytes=1 * MiB,
            # megacore: one device drives both TensorCores
            topology_name="v5p:1x1x1", abstract_device_kind="TPU v5", cores_per_device=2,
        ),
        Chip(
            name="v6e", mxu_flops_per_cycle=4 * 256 * 256 * 2, platform="tpu", lowering_platform="tpu", generation=6,
            device_kinds=("TPU v6 lite", "TPU v6e"),
            peak_bf16_flops=918e12, peak_int8_ops=1836e12, hbm_bytes_per_s=1638e9, hbm_bytes=32 * 10**9,
            vmem_bytes=128 * MiB, scoped_vmem_default_bytes=32 * MiB, smem_bytes=1 * MiB,
            topology_name="v6e:1x1", abstract_device_kind="TPU v6 lite", cores_per_device=1,
        ),
        Chip(
            name="7x", mxu_flops_per_cycle=2 * 4 * 256 * 256 * 2, platform="tpu", lowering_platform="tpu", generation=7,
            device_kinds=("TPU7x",),
            # 2307 TF bf16 (4614 fp8), 192 GiB HBM3E at 7.37 TB/s per chip; no megacore, so each
            # TensorCore is its own JAX device
            peak_bf16_flops=2307e12, hbm_bytes_per_s=7370e9, hbm_bytes=192 * GiB,
            vmem_bytes=64 * MiB, scoped_vmem_default_bytes=32 * MiB, smem_bytes=1 * MiB,
            topology_name="tpu7x:1x1x1", abstract_device_kind="TPU7x", cores_per_device=1,
            devices_per_chip=2,
        ),
        Chip(
            name="h100", platform="gpu", lowering_platform="cuda",
            device_kinds=("H100",),
            peak_bf16_flops=989e12, peak_int8_ops=1979e12, hbm_bytes_per_s=3350e9, hbm_bytes=80 * 10**9,
            shared_mem_bytes_per_block=227 * KiB,
        ),
        Chip(
            name="h200", platform="gpu", lowering_platform="cuda",
            device_kinds=("H200",),
            peak_bf16_flops=989e12, peak_int8_ops=1979e12, hbm_bytes_per_s=4800e9, hbm_bytes=141 * 10**9,
            shared_mem_bytes_per_block=227 * KiB,
        ),
        Chip(
            # Nominal figures for a few-core host: only so CPU numbers have a scale, never a claim.
            name="cpu", platform="cpu", lowering_platform="cpu",
            device_kinds=("cpu",),
            peak_bf16_flops=100e9, hbm_bytes_per_s=20e9, hbm_bytes=16 * GiB, nominal=True,
        ),
    )
}


_ALIASES = {"tpu7x": "7x", "v7x": "7x", "v7": "7x", "ironwood": "7x", "trillium": "v6e", "v6": "v6e",
            "v6lite": "v6e", "v5lite": "v5e", "v5": "v5p"}


def canonical_name(name: str) -> str | None:
    """The table's name for a chip as people and models write it ("TPU v5e", "v5litepod", "tpu-v6e",
    "TPU v5 lite", "v5p-8"), or None when it names no chip maxkernel knows."""
    raw = str(name).strip().lower()
    raw = re.sub(r"-\d+$", "", raw)  # a slice size: "v5p-8", "v5litepod-16"
    key = re.sub(r"[\s_\-]+", "", raw)
    key = re.sub(r"^(cloud)?tpu", "", key) or key  # "tpu-v6e", "TPU v5e", "tpuv4"
    key = re.sub(r"(pod|slice)$", "", key) or key  # "v5litepod"
    key = _ALIASES.get(key, key)
    return key if key in CHIPS else None


def get(name: str) -> Chip:
    """The chip called `name`, read leniently (see canonical_name); a ValueError lists the valid names."""
    key = canonical_name(name)
    if key is None:
        raise ValueError(f"unknown chip {name!r}; valid chips: {', '.join(CHIPS)}")
    return CHIPS[key]


def from_device_kind(kind: str) -> Chip | None:
    """The chip behind a JAX `device.device_kind`, or None if it is not one maxkernel knows.

    TPU kinds match exactly ("TPU v5" is v5p, "TPU v5 lite" is v5e, so substrings would confuse them);
    GPU kinds match by substring ("NVIDIA H100 80GB HBM3").
    """
    text = kind.strip()
    for chip in CHIPS.values():
        if chip.platform == "gpu":
            if any(k.lower() in text.lower() for k in chip.device_kinds):
                return chip
        elif text.lower() in (k.lower() for k in chip.device_kinds):
            return chip
    return None


def accelerator_nodes() -> bool:
    """Whether this machine has a TPU or NVIDIA device node (/dev/accel*, /dev/vfio, /dev/nvidia*) and JAX is not
    held to the CPU. Without one, asking JAX for its backend only makes libtpu print its host-bounds warnings."""
    import glob
    import os

    if os.environ.get("JAX_PLATFORMS") == "cpu":
        return False
    return any(glob.glob(pattern) for pattern in ("/dev/accel*", "/dev/vfio", "/dev/nvidia[0-9]*"))


def detect() -> Chip:
    """The chip of the default JAX backend's first device; the nominal cpu entry when unknown."""
    import jax

    return from_device_kind(jax.devices()[0].device_kind) or CHIPS["cpu"]


def roofline_seconds(chip: Chip, flops: float, bytes_accessed: float) -> float:
    """Lower bound on one device's run time: the slower of compute at peak and HBM traffic at peak."""
    return max(flops / chip.device_peak_flops, bytes_accessed / chip.device_hbm_bytes_per_s)


def ridge_point(chip: Chip) -> float:
    """Arithmetic intensity (FLOP per HBM byte) above which a kernel is compute-bound on `chip`."""
    return chip.peak_bf16_flops / chip.hbm_bytes_per_s


def trace_context(chip: Chip):
    """Trace and lower as if on `chip`, so pltpu.get_tpu_info(), Mosaic's tiling checks and emit_pipeline resolve
    on a host without it (a no-op context for chips that are not TPUs)."""
    import contextlib

    if not chip.is_tpu:
        return contextlib.nullcontext()
    from jax.sharding import AbstractDevice, AbstractMesh, use_abstract_mesh

    device = AbstractDevice(device_kind=chip.abstract_device_kind, num_cores=chip.cores_per_device, platform="tpu")
    return use_abstract_mesh(AbstractMesh((), (), abstract_device=device))
