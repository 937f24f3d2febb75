"""What `maxkernel task new` is told, parsed: argument specs, generators, statics, dim names and smoke sizes."""

from __future__ import annotations

import pytest

from maxkernel.tasknew import specs as S

pytestmark = pytest.mark.unit


def test_arg_specs_parse_dtype_shape_and_names():
    assert S.parse_arg("bf16[M=8192, 4096]") == ("bfloat16", [("M", 8192), (None, 4096)])
    assert S.parse_arg("i32[]") == ("int32", [])
    for bad, says in [("bf17[8]", "unknown dtype"), ("bf16(8)", r"DTYPE\[DIM"), ("f32[0]", "positive"),
                      ("f32[3.5]", "positive integer"), ("f32[1M=8]", "identifier")]:
        with pytest.raises(S.SpecError, match=says):
            S.parse_arg(bad)


def test_generators_fit_their_dtype():
    assert S.parse_gen("", "bfloat16") == "normal" and S.parse_gen("", "int32") == "int:0:128"
    assert S.parse_gen("", "bool") == "bool" and S.parse_gen("uniform:0.1:1", "float32") == "uniform:0.1:1"
    assert S.parse_gen("int:0:V", "int32") == "int:0:V"
    for gen, dtype in [("normal", "int32"), ("int:0:8", "float32"), ("int:0", "int32"), ("uniform:a b:1", "float32")]:
        with pytest.raises(S.SpecError):
            S.parse_gen(gen, dtype)


def test_statics_are_literals_or_bare_words():
    assert S.parse_static("eps=1e-6") == ("eps", 1e-6)
    assert S.parse_static("block=(8, 128)") == ("block", (8, 128))
    assert S.parse_static("mode=causal") == ("mode", "causal")
    with pytest.raises(S.SpecError):
        S.parse_static("no_value")


def test_equal_unnamed_sizes_share_a_dim_and_names_win():
    parsed = [S.parse_arg("bf16[T=8192,4096]"), S.parse_arg("bf16[8192,4096]"), S.parse_arg("i32[512]")]
    config, specs = S.name_dims(parsed, ["normal", "normal", "int:0:T"])
    assert config == {"T": 8192, "D4096": 4096, "D512": 512}
    assert [s.dims for s in specs] == [("T", "D4096"), ("T", "D4096"), ("D512",)]
    with pytest.raises(S.SpecError, match="two sizes"):
        S.name_dims([S.parse_arg("f32[M=8]"), S.parse_arg("f32[M=16]")], ["normal", "normal"])
    with pytest.raises(S.SpecError, match="not a dim"):
        S.name_dims([S.parse_arg("i32[8]")], ["int:0:E"])


def test_smoke_sizes_keep_alignment_and_structure():
    config = {"V": 32000, "D": 4096, "H": 64, "S": 1000}
    smoke = S.smoke_dims(config, lanes={"D"})
    # V is a row dim: halved while a multiple of 8 (32000 -> 1000); D a lane dim keeps 128s; H is structure;
    # S=1000 stays: 500 would lose the 8-alignment its full size has
    assert smoke == {"V": 1000, "D": 512, "H": 64, "S": 1000}
    assert S.smoke_dims({"V": 32000}, lanes={"V"}) == {"V": 16000}  # 8000 is no multiple of 128
    smaller = S.shrink_further(config, smoke, {"D"})
    assert smaller == {**smoke, "D": 256}  # V and S cannot halve and keep 8-alignment; D can and keep 128
    assert S.smoke_dims({"S": 1002}) == {"S": 501}  # no alignment to keep
    assert S.shrink_further({"H": 64}, {"H": 64}) is None


def test_a_bare_name_reuses_a_dim_another_argument_sizes():
    """`f32[N]` after `bf16[M=64,N=128]` is the same N (it used to be refused as 'not a positive integer')."""
    assert S.parse_arg("f32[N]") == ("float32", [("N", None)])
    config, specs = S.name_dims([S.parse_arg("bf16[M=64,N=128]"), S.parse_arg("f32[N]")], ["normal", "normal"])
    assert config == {"M": 64, "N": 128} and specs[1].dims == ("N",)
    with pytest.raises(S.SpecError, match="K is never given a size"):
        S.name_dims([S.parse_arg("f32[K]")], ["normal"])
