"""The chip table: lookups, device-kind matching, agreement with JAX's own TPU table, roofline maths."""

import pytest

from maxkernel import chips

pytestmark = pytest.mark.unit

TPUS = [c for c in chips.CHIPS.values() if c.is_tpu]


def test_get_names_and_aliases():
    assert set(chips.CHIPS) == {"v4", "v5e", "v5p", "v6e", "7x", "h100", "h200", "cpu"}
    assert chips.get("V5E").name == "v5e"
    assert chips.get("tpu7x").name == "7x"


def test_get_unknown_lists_valid_names():
    with pytest.raises(ValueError, match="v5e.*h200"):
        chips.get("v9z")


@pytest.mark.parametrize("kind, name", [
    ("TPU v4", "v4"), ("TPU v5 lite", "v5e"), ("TPU v5e", "v5e"), ("TPU v5", "v5p"), ("TPU v5p", "v5p"),
    ("TPU v6 lite", "v6e"), ("TPU7x", "7x"), ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"),
    ("cpu", "cpu"),
])
def test_from_device_kind(kind, name):
    assert chips.from_device_kind(kind).name == name


@pytest.mark.parametrize("kind", ["TPU v3", "TPU v4 lite", "NVIDIA A100-SXM4-80GB", ""])
def test_from_device_kind_unknown(kind):
    assert chips.from_device_kind(kind) is None


def test_detect_on_this_host_is_cpu():
    chip = chips.detect()
    assert chip.name == "cpu" and chip.nominal


@pytest.mark.parametrize("chip", TPUS, ids=lambda c: c.name)
def test_tpu_entries_agree_with_jax(chip):
    """Every kind we list resolves in JAX to one generation, and its per-core VMEM matches ours."""
    import jax
    from jax._src.pallas.mosaic import tpu_info
    from jax.experimental.pallas import tpu as pltpu
    from jax.sharding import AbstractDevice, AbstractMesh, use_abstract_mesh

    versions = {tpu_info.chip_version_from_device_kind(k) for k in chip.device_kinds + (chip.abstract_device_kind,)}
    assert len(versions) == 1 and None not in versions
    dev = AbstractDevice(device_kind=chip.abstract_device_kind, num_cores=chip.cores_per_device, platform="tpu")
    with use_abstract_mesh(AbstractMesh((), (), abstract_device=dev)):
        info = pltpu.get_tpu_info()
    assert info.generation == chip.generation
    assert info.vmem_capacity_bytes == chip.vmem_bytes
    assert chip.scoped_vmem_default_bytes <= chip.vmem_bytes
    assert chip.topology_name and jax.__version__


@pytest.mark.parametrize("chip", chips.CHIPS.values(), ids=lambda c: c.name)
def test_rates_are_plausible(chip):
    assert 1e10 < chip.peak_bf16_flops < 1e16
    assert 1e9 < chip.hbm_bytes_per_s < 1e14
    assert chip.hbm_bytes > 1e9
    assert (chip.shared_mem_bytes_per_block is not None) == (chip.platform == "gpu")
    assert (chip.vmem_bytes is not None) == chip.is_tpu


def test_roofline_compute_and_memory_bound():
    v5e = chips.get("v5e")
    # 8192^2 x 28672 bf16 GEMM: compute-bound, 3.85e12 FLOP / 197e12 FLOP/s
    flops, nbytes = 2 * 8192 * 8192 * 28672, 2 * (8192 * 8192 + 8192 * 28672 * 2)
    assert chips.roofline_seconds(v5e, flops, nbytes) == pytest.approx(flops / 197e12)
    # an elementwise op: 1 FLOP per 4 bytes is far below the ridge, so bandwidth decides
    assert chips.roofline_seconds(v5e, 1e9, 4e9) == pytest.approx(4e9 / 819e9)
    assert chips.ridge_point(v5e) == pytest.approx(197e12 / 819e9)


def test_7x_roofline_is_per_tensorcore_device():
    tpu7x = chips.get("7x")
    assert tpu7x.devices_per_chip == 2
    assert chips.roofline_seconds(tpu7x, 2307e12, 0) == pytest.approx(2.0)
