"""The port's static screen, asserted on the refusal itself: a port that reaches for the original (torch imported,
or torch called through a host callback that the sandboxed port job would run) is refused before any job starts,
with its stage and reason; and the oracle label says what the oracle job reports it ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from maxkernel.port import build_spec, check_port
from maxkernel.port.check import oracle_label

pytestmark = pytest.mark.unit

SOURCES = Path(__file__).parent / "sources"

HOSTILE = {
    "calls_torch": ("import torch\nimport jax.numpy as jnp\n\n\ndef softmax(x):\n"
                    "    return jnp.asarray(torch.softmax(torch.from_numpy(x), -1))\n",
                    "line 1: import of 'torch' is not allowed"),
    # torch imported only inside the callback, which jax runs on the host during the check.
    "torch_in_callback": ("import jax\nimport numpy as np\n\n\ndef _host(a):\n    import torch\n"
                          "    return torch.softmax(torch.from_numpy(np.asarray(a)), -1).numpy()\n\n\n"
                          "def softmax(x):\n    return jax.pure_callback(_host, jax.ShapeDtypeStruct(x.shape, x.dtype), x)\n",
                          "line 6: import of 'torch' is not allowed"),
    # No import at all: the callback alone is refused (it runs Python the check cannot see).
    "numpy_callback": ("import jax\nimport numpy as np\n\n\ndef softmax(x):\n"
                       "    return jax.pure_callback(lambda a: np.exp(a) / np.exp(a).sum(-1, keepdims=True), "
                       "jax.ShapeDtypeStruct(x.shape, x.dtype), x)\n",
                       "line 6: 'pure_callback' is not allowed"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_port_reaching_past_jax_is_refused_before_any_job(name, tmp_path, monkeypatch):
    import maxkernel.port.check as check

    started = []
    monkeypatch.setattr(check, "WorkerPool", lambda *a, **k: started.append(1) or pytest.fail("a job was started"))
    text, reason = HOSTILE[name]
    port = tmp_path / f"{name}.py"
    port.write_text(text)
    spec = build_spec(f"{SOURCES / 'triton_softmax.py'}", ["f32[R=64,C=128]"])
    r = check_port(spec, port, "softmax", seeds=1)
    assert not started and r.ok and r.equivalent is False
    assert r.summary.startswith("NOT EQUIVALENT: the port was refused before it ran: "), r.summary
    assert r.error.startswith(f"{port.name} {reason}"), r.error
    assert "no torch, no files, no callbacks" in r.hint


def test_the_oracle_label_is_what_the_job_says_it_ran():
    assert oracle_label({"device": "cpu", "triton": True, "triton_interpreter": True}, None) == \
        "the original under Triton's CPU interpreter"
    assert oracle_label({"device": "cpu", "triton": False, "triton_interpreter": False}, None) == \
        "the original in PyTorch on CPU"
    assert oracle_label({"device": "cuda", "triton": True, "triton_interpreter": False}, None) == \
        "the original on an NVIDIA GPU"
    assert oracle_label({"device": "cpu"}, ("oracle.py", "square")) == "the PyTorch oracle oracle.py:square on CPU"
    assert "did not say" in oracle_label({}, None)
