"""On attached TPU hardware the chip is detected and the default size is full; on a CPU, smoke and the
configured chip. No TPU is reachable here, so the device node and JAX's answer are what is faked: the
detection code itself runs."""

from __future__ import annotations

import glob
import types

import jax
import pytest

from maxkernel.agents.roots import _common
from maxkernel.agents.roots._common import attached_tpu, default_size

pytestmark = pytest.mark.unit


@pytest.fixture
def tpu_host(monkeypatch):
    """A host with /dev/accel0 whose JAX backend is a TPU of the kind set on the returned namespace."""
    host = types.SimpleNamespace(kind="TPU v5 lite", backend="tpu", asked=0)
    real_glob = glob.glob
    monkeypatch.setattr(glob, "glob", lambda p, *a, **k: ["/dev/accel0"] if p == "/dev/accel*" else real_glob(p, *a, **k))
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)

    def backend():
        host.asked += 1
        return host.backend

    monkeypatch.setattr(jax, "default_backend", backend)
    monkeypatch.setattr(jax, "devices", lambda *a: [types.SimpleNamespace(device_kind=host.kind)])
    return host


@pytest.mark.parametrize("kind,chip", [("TPU v5 lite", "v5e"), ("TPU v5", "v5p"), ("TPU v6 lite", "v6e"),
                                       ("TPU v4", "v4")])
def test_the_attached_chip_is_detected_and_the_size_is_full(tpu_host, kind, chip):
    tpu_host.kind = kind
    assert attached_tpu() == chip
    assert default_size() == "full"


def test_a_tpu_kind_maxkernel_does_not_know_is_not_guessed(tpu_host):
    tpu_host.kind = "TPU v99"
    assert attached_tpu() is None and default_size() == "smoke"


def test_a_gpu_backend_is_not_a_tpu(tpu_host):
    tpu_host.backend = "gpu"
    tpu_host.kind = "NVIDIA H200"
    assert attached_tpu() is None and default_size() == "smoke"


def test_cpu_only_never_asks_jax(tpu_host, monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    assert attached_tpu() is None and default_size() == "smoke"
    monkeypatch.delenv("JAX_PLATFORMS")
    monkeypatch.setattr(glob, "glob", lambda p, *a, **k: [])  # no TPU device node: libtpu is never started
    assert attached_tpu() is None
    assert tpu_host.asked == 0


def test_a_new_run_on_a_tpu_gets_the_chip_and_full_size(tpu_host, tmp_path, monkeypatch):
    from maxkernel.settings import get_settings

    monkeypatch.setenv("MAXKERNEL_DATA_DIR", str(tmp_path))
    get_settings.cache_clear()
    ctx = types.SimpleNamespace(session=types.SimpleNamespace(id="s1", state={}))
    monkeypatch.setattr(_common, "request_text", lambda c: "optimize 12p_RMSNorm")
    try:
        state = _common.session_setup(ctx, "12p_RMSNorm")
        assert (state["chip"], state["size"]) == ("v5e", "full")
        monkeypatch.setattr(_common, "request_text", lambda c: "optimize 12p_RMSNorm smoke")
        assert _common.session_setup(ctx, "12p_RMSNorm")["size"] == "smoke"  # an explicit size wins
    finally:
        get_settings.cache_clear()


def test_the_autotuner_never_asks_jax_on_a_machine_without_a_device_node(tpu_host, monkeypatch):
    """Asking JAX for its backend on a CPU machine starts libtpu's runtime, which prints its host-bounds warnings
    into the user's terminal (seen in the demo's autotune step): without a device node JAX is not asked."""
    from maxkernel.tools.autotune import _on_accelerator

    assert _on_accelerator() is True and tpu_host.asked == 1  # /dev/accel0 present: JAX says tpu
    monkeypatch.setattr(glob, "glob", lambda p, *a, **k: [])
    assert _on_accelerator() is False and tpu_host.asked == 1
