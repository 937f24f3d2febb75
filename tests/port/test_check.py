"""The equivalence check, end to end in the sandbox: the held-in ports are proven on 3 seeds in their dtype and
float32; a wrong port is caught with where it differs; a port that reaches for the original, or returns the
wrong thing, is never equivalent; the common shapes of GPU code (in-place ops, autograd.Function, a CUDA kernel
through its PyTorch oracle) are handled."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from _extras import need_module
from maxkernel.port import build_spec, check_port

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SOURCES = Path(__file__).parent / "sources"
PORTS = Path(__file__).parents[2] / "maxkernel" / "agents" / "replay" / "kernels"

HELD_IN = {
    "rmsnorm_module": (dict(args=["bf16[T=4096,H=2048]"], init=["dim=H"]), "port_rmsnorm_module_v2.py", "rmsnorm"),
    "swiglu_mlp": (dict(args=["bf16[T=2048,D=1024]"], dims=["F=2816"], init=["dim=D", "hidden=F"]),
                   "port_swiglu_mlp_v1.py", "swiglu_mlp"),
    "triton_softmax": (dict(args=["f32[R=8192,C=2048]"]), "port_triton_softmax_v1.py", "softmax"),
    "fused_attention": (dict(args=["bf16[B=1,H=8,S=2048,D=128]"] * 3, static=["causal=True"]),
                        "port_fused_attention_v1.py", "attention"),
}


@pytest.fixture(autouse=True)
def _torch():
    need_module("torch", extra="port")


def _spec(stem: str, **over):
    kw, _, _ = HELD_IN[stem]
    return build_spec(str(SOURCES / f"{stem}.py"), **{**kw, **over})


@pytest.mark.parametrize("stem", sorted(HELD_IN))
def test_held_in_ports_are_proven_equivalent(stem):
    _, port, fn = HELD_IN[stem]
    r = check_port(_spec(stem), PORTS / port, fn)
    assert r.ok and r.equivalent, r.summary
    assert len(r.seeds) == 3 and len(set(r.seeds)) == 3
    assert "float32" in r.dtypes and all(row["ok"] for row in r.per_seed)
    # Every seed in every dtype at the smoke size, and one seed in the first dtype at the drawn check size (and
    # at the full size where it holds at most 4x the smoke size's elements: attention's S=2048).
    assert r.check_size and r.check_size != r.size and r.full_checked == (stem == "fused_attention")
    assert len(r.per_seed) == 3 * len(r.dtypes) + 1 + r.full_checked
    (second,) = [row for row in r.per_seed if row.get("at") == "check size"]
    assert second["dims"] == r.check_size and second["seed"] == r.check_seed and second["dtype"] == r.dtypes[0]


def test_a_wrong_port_is_caught_with_the_mismatch_location():
    # Gemma's (1 + weight) scale in a Llama RMSNorm port: the porter's recorded first try.
    r = check_port(_spec("rmsnorm_module"), PORTS / "port_rmsnorm_module_v1.py", "rmsnorm")
    assert r.ok and not r.equivalent
    m = r.mismatch
    assert m["seed"] in r.seeds and m["dtype"] == "bfloat16" and m["output"] == 0
    assert len(m["worst_index"]) == 2 and m["bad_elements"] > 0 and m["rel_err"] > m["tolerance"]
    assert "NOT EQUIVALENT" in r.summary and str(tuple(m["worst_index"])) in r.summary


def test_hostile_and_sloppy_ports_are_never_equivalent(tmp_path):
    spec = _spec("triton_softmax", smoke=["R=64", "C=128"])
    cases = {
        # Reaching for the original: torch is not a JAX port (refused before anything runs).
        "calls_torch": "import torch\nimport jax.numpy as jnp\n\ndef softmax(x):\n"
                       "    return jnp.asarray(torch.softmax(torch.from_numpy(x), -1))\n",
        # Reading the oracle's outputs from disk.
        "reads_files": "import numpy as np\n\ndef softmax(x):\n    return np.load('out_0.npz')['a0']\n",
        "wrong_dtype": "import jax.numpy as jnp\nimport jax\n\ndef softmax(x):\n"
                       "    return jax.nn.softmax(x, -1).astype(jnp.bfloat16)\n",
        "two_outputs": "import jax\n\ndef softmax(x):\n    return jax.nn.softmax(x, -1), x\n",
        "raises": "def softmax(x):\n    raise RuntimeError('half a file')\n",
    }
    for name, text in cases.items():
        f = tmp_path / f"{name}.py"
        f.write_text(text)
        r = check_port(spec, f, "softmax", seeds=1)
        assert not r.equivalent, (name, r.summary)
        assert r.summary.startswith("NOT EQUIVALENT"), (name, r.summary)


def test_inplace_autograd_and_cuda_oracle_sources(tmp_path):
    src = tmp_path / "ops.py"
    src.write_text(textwrap.dedent('''
        import torch


        def axpy_(y, x, alpha: float = 2.0):
            y.add_(x, alpha=alpha)


        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return 2 * x * g
        '''))
    port = tmp_path / "ports.py"
    port.write_text("def axpy(y, x, alpha=2.0):\n    return y + alpha * x\n\n\ndef square(x):\n    return x * x\n")
    inplace = build_spec(f"{src}:axpy_", ["f32[N=256]", "f32[N=256]"], static=["alpha=3.0"])
    assert check_port(inplace, port, "axpy", seeds=2).equivalent
    wrong = build_spec(f"{src}:axpy_", ["f32[N=256]", "f32[N=256]"], static=["alpha=3.0"])
    wrong.static = {"alpha": 3.0}
    port2 = tmp_path / "ports2.py"
    port2.write_text("def axpy(y, x, alpha=2.0):\n    return y + 2.0 * x\n")
    assert not check_port(wrong, port2, "axpy", seeds=1).equivalent
    r = check_port(build_spec(f"{src}:Square", ["f32[8,128]"]), port, "square", seeds=2)
    assert r.equivalent and r.kind == "autograd"
    cu = tmp_path / "cu_square.py"
    cu.write_text('from torch.utils.cpp_extension import load_inline\n\nCUDA = "__global__ void sq(float* x) {}"\n\n\n'
                  'def square(x):\n    raise RuntimeError("needs an NVIDIA GPU")\n')
    oracle = tmp_path / "oracle.py"
    oracle.write_text("def square(x):\n    return x * x\n")
    r = check_port(build_spec(f"{cu}:square", ["f32[8,128]"], oracle=f"{oracle}:square"), port, "square", seeds=1)
    assert r.equivalent and r.kind == "function"


def test_backward_checks_the_originals_own_gradient(tmp_path):
    """With backward, the original's backward (an autograd.Function's own) is held against jax.vjp of the port:
    a custom backward that disagrees with the forward's math is named, input by input."""
    port = tmp_path / "port.py"
    port.write_text("def square(x):\n    return x * x\n")
    for factor, equivalent in (("2", True), ("3", False)):
        src = tmp_path / f"sq{factor}.py"
        src.write_text(textwrap.dedent(f'''
            import torch


            class Square(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    ctx.save_for_backward(x)
                    return x * x

                @staticmethod
                def backward(ctx, g):
                    (x,) = ctx.saved_tensors
                    return {factor} * x * g
            '''))
        r = check_port(build_spec(f"{src}:Square", ["f32[8,128]"]), port, "square", seeds=2, backward=True)
        assert r.equivalent is equivalent and r.backward, r.summary
        if not equivalent:
            assert r.mismatch["gradient_of_input"] == 0 and "gradient of input 0" in r.summary
    # Without backward the same wrong backward is never run: the forward alone is equivalent.
    assert check_port(build_spec(f"{tmp_path / 'sq3.py'}:Square", ["f32[8,128]"]), port, "square", seeds=1).equivalent


@pytest.mark.gpu
def test_on_an_nvidia_gpu_the_triton_original_runs_as_itself():
    from maxkernel.port.spec import gpu_here

    if not gpu_here():
        pytest.skip("needs an NVIDIA GPU (here the Triton original runs under Triton's CPU interpreter)")
    r = check_port(_spec("triton_softmax"), PORTS / "port_triton_softmax_v1.py", "softmax", seeds=2)
    assert r.equivalent and r.oracle == "the original on an NVIDIA GPU", r.summary


def test_the_oracle_label_follows_what_ran_not_the_declared_kind():
    """Declared as plain torch (--kind torch), the Triton launcher still runs under Triton's CPU interpreter (the job
    sees the import): the report says so, because the label is what the oracle job reports it ran."""
    spec = _spec("triton_softmax", smoke=["R=64", "C=128"], kind="torch")
    assert spec.kind == "torch"
    r = check_port(spec, PORTS / "port_triton_softmax_v1.py", "softmax", seeds=1)
    assert r.equivalent and r.oracle == "the original under Triton's CPU interpreter", r.oracle


def test_backward_covers_a_modules_parameters(tmp_path):
    """A module's parameters are inputs of the backward check too: a port whose forward is right but whose weight
    gradient is cut (stop_gradient on the scale) is named by that input; the honest port is equivalent."""
    honest = PORTS / "port_rmsnorm_module_v2.py"
    spec = _spec("rmsnorm_module", smoke=["T=64", "H=256"])
    r = check_port(spec, honest, "rmsnorm", seeds=1, backward=True)
    assert r.equivalent and r.backward, r.summary
    cut = tmp_path / "cut.py"
    cut.write_text(honest.read_text().replace("* weight", "* lax.stop_gradient(weight)"))
    r = check_port(spec, cut, "rmsnorm", seeds=1, backward=True)
    assert not r.equivalent and r.mismatch["gradient_of_input"] == 1, r.summary  # weight: the trailing input
    assert "gradient of input 1" in r.summary


def test_backward_refuses_an_in_place_original(tmp_path):
    src = tmp_path / "inplace.py"
    src.write_text("def axpy_(y, x, alpha: float = 2.0):\n    y.add_(x, alpha=alpha)\n")
    port = tmp_path / "port.py"
    port.write_text("def axpy(y, x, alpha=2.0):\n    return y + alpha * x\n")
    spec = build_spec(f"{src}:axpy_", ["f32[N=256]", "f32[N=256]"], static=["alpha=3.0"])
    r = check_port(spec, port, "axpy", seeds=1, backward=True)
    assert not r.equivalent and "needs an op that returns its outputs" in (r.error or ""), r.summary
