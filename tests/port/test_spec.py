"""What `maxkernel port` is told: the operator picked from the file, specs cross-checked, a module's parameters
named after the dims they follow, inputs drawn per seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from maxkernel.port import SpecError, build_spec
from maxkernel.port.check import param_specs
from maxkernel.port.spec import draw_inputs, gpu_here, parse_source

pytestmark = pytest.mark.unit

SOURCES = Path(__file__).parent / "sources"


def test_the_operator_is_picked_from_the_file_or_named():
    assert parse_source(str(SOURCES / "rmsnorm_module.py"))[1] == "RMSNorm"
    # The @triton.jit kernel is launched by the operator, never the operator itself.
    assert parse_source(str(SOURCES / "triton_softmax.py"))[1] == "softmax"
    assert parse_source(f"{SOURCES / 'fused_attention.py'}:attention")[1] == "attention"
    with pytest.raises(SpecError, match="defines no 'nope'"):
        parse_source(f"{SOURCES / 'fused_attention.py'}:nope")
    with pytest.raises(SpecError, match="no Python file"):
        parse_source("missing.py")


def test_ambiguous_file_asks_for_the_name(tmp_path):
    f = tmp_path / "two.py"
    f.write_text("def a(x):\n    return x\n\n\ndef b(x):\n    return x\n")
    with pytest.raises(SpecError, match="name the operator"):
        parse_source(str(f))


def test_kind_is_read_from_the_source_and_cuda_needs_an_oracle(tmp_path):
    assert build_spec(str(SOURCES / "triton_softmax.py"), ["f32[R=64,C=128]"]).kind == "triton"
    assert build_spec(str(SOURCES / "fused_attention.py"), ["bf16[1,2,64,128]"] * 3).kind == "torch"
    cu = tmp_path / "cu_op.py"
    cu.write_text("from torch.utils.cpp_extension import load_inline\n\n\ndef scale(x):\n    return x\n")
    oracle = tmp_path / "oracle.py"
    oracle.write_text("def scale(x):\n    return x * 2\n")
    spec = build_spec(str(cu), ["f32[64]"], oracle=f"{oracle}:scale")
    assert spec.kind == "cuda" and spec.oracle == (oracle, "scale")


def test_a_cuda_source_needs_an_oracle_off_a_gpu(tmp_path):
    if gpu_here():
        pytest.skip("on an NVIDIA GPU a CUDA original runs as itself and needs no --oracle "
                    "(tests/port/test_check.py's gpu tests cover that path)")
    cu = tmp_path / "cu_op.py"
    cu.write_text("from torch.utils.cpp_extension import load_inline\n\n\ndef scale(x):\n    return x\n")
    with pytest.raises(SpecError, match="--oracle"):
        build_spec(str(cu), ["f32[64]"])


def test_dims_init_and_smoke_sizes():
    spec = build_spec(str(SOURCES / "swiglu_mlp.py"), ["bf16[T=2048,D=1024]"], dims=["F=2816"],
                      init=["dim=D", "hidden=F"])
    assert spec.config == {"T": 2048, "D": 1024, "F": 2816}
    assert spec.smoke["T"] <= 512 and spec.smoke["F"] % 128 == 0
    assert spec.init_at(spec.smoke) == {"dim": spec.smoke["D"], "hidden": spec.smoke["F"]}
    with pytest.raises(SpecError, match="--dim"):
        build_spec(str(SOURCES / "swiglu_mlp.py"), ["bf16[T=2048,D=1024]"], dims=["F=big"])
    with pytest.raises(SpecError, match="two sizes"):
        build_spec(str(SOURCES / "swiglu_mlp.py"), ["bf16[T=2048,D=1024]"], dims=["D=512"])


def test_parameters_follow_the_named_dims_and_a_constant_init_is_spread():
    spec = build_spec(str(SOURCES / "swiglu_mlp.py"), ["bf16[T=2048,D=1024]"], dims=["F=2816"],
                      init=["dim=D", "hidden=F"])
    s, f = spec.smoke, spec.config
    params = [{"name": "up.weight", "shape": [s["F"], s["D"]], "full_shape": [f["F"], f["D"]], "min": -0.04, "max": 0.04},
              {"name": "scale", "shape": [s["D"]], "full_shape": [f["D"]], "min": 1.0, "max": 1.0}]
    (_, up), (_, scale) = param_specs(spec, params, "bfloat16")
    assert up.dims == ("F", "D") and up.gen == "uniform:-0.04:0.04"
    assert scale.gen == "uniform:0.5:1.5"  # ones would let a port that ignores the weight pass
    stray = [{"name": "w", "shape": [7], "full_shape": [9], "min": 0.0, "max": 1.0}]
    with pytest.raises(SpecError, match="no --arg or --dim names"):
        param_specs(spec, stray, "bfloat16")


def test_inputs_are_drawn_per_seed_in_the_dtype_asked():
    spec = build_spec(str(SOURCES / "rmsnorm_module.py"), ["bf16[T=64,H=128]", "i32[T=64]"], gens=["", "int:0:H"])
    a = draw_inputs(spec.arg_specs, spec.smoke, 1)
    b = draw_inputs(spec.arg_specs, spec.smoke, 2)
    assert str(a[0].dtype) == "bfloat16" and a[0].shape == (64, 128)
    assert a[1].dtype == np.int32 and a[1].min() >= 0 and a[1].max() < 128
    assert not np.array_equal(a[0], b[0])
    assert np.array_equal(a[0], draw_inputs(spec.arg_specs, spec.smoke, 1)[0])
    assert str(draw_inputs(spec.arg_specs, spec.smoke, 1, "float32")[0].dtype) == "float32"
