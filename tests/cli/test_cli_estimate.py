"""`maxkernel estimate` through the real entry point: one JSON document with the contract's fields; bad input exits 2;
and `maxkernel evaluate` off a TPU carries the estimate beside the measured CPU speedup, each labelled."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RMS = ["--task", "12p_RMSNorm", "--kernel", str(ROOT / "jaxbench" / "12p_RMSNorm" / "kernel.py")]
FIELDS = {"estimated_ms", "baseline_estimated_ms", "speedup_estimate", "bound", "floors", "static_cycles_ms",
          "fraction_of_roofline", "method", "fit", "chip", "libtpu", "label", "limits"}


def mk(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "maxkernel.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.integration
@pytest.mark.slow
def test_estimate_json_has_the_contracts_fields():
    r = mk("estimate", *RMS, "--chip", "v5e", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert FIELDS <= set(doc) and doc["ok"], doc.get("error")
    assert set(doc["floors"]) == {"compute_ms", "memory_ms"} and doc["bound"] == "memory"
    assert doc["estimated_ms"] >= max(doc["floors"].values()) and doc["chip"] == "v5e"
    assert "static LLO profile" in doc["method"] and "not a measured time" in doc["label"]
    assert doc["fit"]["points"] and doc["programs"]["baseline"]["program"] == "baseline"
    assert "estimating" in r.stderr  # progress goes to stderr, the document alone to stdout


@pytest.mark.unit
@pytest.mark.parametrize("args, says", [
    (["--chip", "h100"], "TPU chip"),
    (["--chip", "v9"], "unknown chip"),
    (["--size", "huge"], "huge"),
])
def test_estimate_bad_input_is_one_line_and_exit_2(args, says):
    r = mk("estimate", *RMS, *args, timeout=120)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.integration
@pytest.mark.slow
def test_evaluate_off_a_tpu_carries_the_estimate_labelled():
    r = mk("evaluate", *RMS, "--json", env={"MAXKERNEL_ESTIMATE": "true"})
    assert r.returncode == 0, r.stderr
    v = json.loads(r.stdout)
    assert v["status"] == "correct" and v["backend"] == "cpu"
    assert "CPU" in v["timing_label"] and v["speedup"] is not None  # the measured figure, labelled as CPU time
    est = v["estimate"]
    assert est["ok"] and est["chip"] == "v5e" and est["speedup_estimate"] > 0 and "not a measured" in est["label"]
    off = mk("evaluate", *RMS, "--json", env={"MAXKERNEL_ESTIMATE": "false"})
    assert json.loads(off.stdout)["estimate"] is None


@pytest.mark.integration
@pytest.mark.slow
def test_estimate_without_a_kernel_prices_the_tasks_baseline_alone():
    r = mk("estimate", "--task", "12p_RMSNorm", "--chip", "v5e", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] and doc["programs"]["kernel"] is None and doc["programs"]["baseline"]["program"] == "baseline"
    assert doc["estimated_ms"] == doc["programs"]["baseline"]["estimated_ms"] and doc["speedup_estimate"] is None
    assert "the 12p_RMSNorm baseline" in r.stderr and "under_priced" in doc


@pytest.mark.unit
def test_estimate_set_without_a_kernel_is_a_usage_error():
    r = mk("estimate", "--task", "12p_RMSNorm", "--set", "block_rows=8", timeout=120)
    assert r.returncode == 2 and "--kernel" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


PROGRAM = '''import jax
import jax.numpy as jnp


def chunked(x, w):
    """tanh(x @ w) in 1024-row blocks through lax.map."""
    parts = x.reshape(-1, 1024, x.shape[-1])
    out = jax.lax.map(lambda p: jnp.tanh(jnp.dot(p, w, preferred_element_type=jnp.float32)).astype(p.dtype), parts)
    return out.reshape(x.shape[0], w.shape[1])
'''


@pytest.mark.unit
@pytest.mark.parametrize("args, says", [
    (["--program", "p.py:chunked", "--arg", "bf16[T=4096,D=1024]", "--arg", "bf16[D,1024]", "--parallel", "B"],
     "not a dim"),
    (["--program", "p.py:chunked", "--task", "12p_RMSNorm"], "without --task"),
    (["--arg", "bf16[8,128]"], "--task T"),
    (["--task", "12p_RMSNorm", "--arg", "bf16[8,128]"], "go with --program"),
    (["--program", "p.py:nope", "--arg", "bf16[8,128]"], "nope"),
])
def test_estimate_program_bad_input_is_one_line_and_exit_2(tmp_path, args, says):
    (tmp_path / "p.py").write_text(PROGRAM)
    r = subprocess.run([sys.executable, "-m", "maxkernel.cli", "estimate", *args], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120, env={**os.environ, "MAXKERNEL_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.integration
@pytest.mark.slow
def test_estimate_program_prices_any_function_with_its_loop_and_caches(tmp_path):
    (tmp_path / "p.py").write_text(PROGRAM)
    env = {**os.environ, "MAXKERNEL_CACHE_DIR": str(tmp_path / "cache")}
    args = ["estimate", "--program", "p.py:chunked", "--arg", "bf16[T=65536,D=1024]", "--arg", "bf16[D,1024]",
            "--parallel", "T", "--chip", "v5e", "--json"]
    run = [sys.executable, "-m", "maxkernel.cli", *args]
    r = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["ok"] and doc["programs"]["kernel"] is None and doc["under_priced"] is None
    # the FLOP floor is the whole program's (XLA's cost analysis alone counts one 1024-row block of 64)
    assert doc["floors"]["compute_ms"] == pytest.approx(2 * 65536 * 1024 * 1024 / 197e12 * 1e3, rel=0.02)
    assert any("once per trip" in x for x in doc["limits"]) and doc["estimated_ms"] >= doc["floors"]["compute_ms"]
    again = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, timeout=600, env=env)
    assert json.loads(again.stdout)["cached"] and json.loads(again.stdout)["estimated_ms"] == doc["estimated_ms"]


@pytest.mark.unit
def test_estimate_program_inputs_are_one_source_of_arguments(tmp_path):
    (tmp_path / "p.py").write_text(PROGRAM + "\n\ndef broken():\n    raise RuntimeError('no inputs today')\n"
                                   "\n\ndef shapes():\n    return (jax.ShapeDtypeStruct((4096, 1024), jnp.bfloat16),"
                                   " jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16))\n")
    env = {**os.environ, "MAXKERNEL_CACHE_DIR": str(tmp_path / "cache")}
    for args, says in ((["--inputs", "p.py:broken", "--arg", "bf16[8,128]"], "once"),
                       (["--inputs", "p.py:broken"], "no inputs today"),
                       (["--inputs", "p.py:shapes", "--parallel", "0.2"], "no axis 2 of argument 0"),
                       (["--inputs", "p.py:shapes", "--parallel", "2.0"], "returns 2 arguments"),
                       (["--arg", "bf16[T=4096,D=1024]", "--arg", "bf16[D,1024]", "--parallel", "0.0"],
                        "goes with --inputs")):
        r = subprocess.run([sys.executable, "-m", "maxkernel.cli", "estimate", "--program", "p.py:chunked", *args],
                           capture_output=True, text=True, cwd=tmp_path, timeout=120, env=env)
        assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.integration
@pytest.mark.slow
def test_estimate_program_takes_a_suite_tasks_own_workload_and_create_inputs():
    base = str(ROOT / "jaxbench" / "12p_RMSNorm" / "baseline.py")
    r = mk("estimate", "--program", f"{base}:workload", "--inputs", f"{base}:create_inputs", "--parallel", "D8",
           "--chip", "v5e", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    task = json.loads(mk("estimate", "--task", "12p_RMSNorm", "--chip", "v5e", "--json").stdout)
    assert doc["ok"] and task["ok"] and "bfloat16[8,4096,8192]" in r.stderr
    assert doc["floors"]["memory_ms"] == pytest.approx(task["floors"]["memory_ms"], rel=0.01)  # the same bytes
    assert doc["estimated_ms"] == pytest.approx(task["estimated_ms"], rel=0.05)  # the same program, priced alike


@pytest.mark.integration
@pytest.mark.slow
def test_an_xla_program_under_priced_at_small_sizes_is_profiled_again_larger(tmp_path):
    """A GEMM whose weight (32 MiB) every shrunk size streams whole: at a 1 GFLOP budget its sizes (16-64 rows) are
    weight-bound, their line falls under the FLOP floor, and the estimate would be the floor, not a priced program.
    Profiled again at sizes planned for a budget 4 times larger (64-256 rows, compute-bound as the full size is), it
    is priced, and it is the estimate a user who raised the budget by hand gets."""
    (tmp_path / "g.py").write_text("import jax.numpy as jnp\n\ndef f(x, w):\n"
                                   "    return jnp.dot(x, w, preferred_element_type=jnp.float32).astype(x.dtype)\n")
    prog = ["estimate", "--program", f"{tmp_path / 'g.py'}:f", "--arg", "bf16[B=8192,4096]", "--arg", "bf16[4096,4096]",
            "--parallel", "B", "--chip", "v5e", "--json"]
    r = mk(*prog, env={"MAXKERNEL_ESTIMATE_MAX_GFLOP": "1", "MAXKERNEL_CACHE_DIR": str(tmp_path / "c1")})
    assert r.returncode == 0, r.stderr
    small = json.loads(r.stdout)
    raised = json.loads(mk(*prog, env={"MAXKERNEL_ESTIMATE_MAX_GFLOP": "4",
                                        "MAXKERNEL_CACHE_DIR": str(tmp_path / "c4")}).stdout)
    grown = [x for x in small["limits"] if x.startswith("profiled again at sizes planned for a budget 4 times")]
    assert small["ok"] and small["under_priced"] is None and grown, small["summary"]
    assert "{'B': 16}" in grown[0] and "below the task's FLOP floor" in grown[0]  # the first sizes, and why
    assert small["estimated_ms"] > small["floors"]["compute_ms"]  # priced by the profile, not stood on the floor
    assert small["estimated_ms"] == pytest.approx(raised["estimated_ms"], rel=0.01)


CONV = """import jax, jax.numpy as jnp
from jax import lax

def f(x, w):
    y = lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                 preferred_element_type=jnp.float32)
    return jnp.mean(jax.nn.gelu(y, approximate=False), axis=(2, 3)).astype(x.dtype)
"""


@pytest.mark.integration
@pytest.mark.slow
def test_a_conv_fusion_the_profiler_prices_at_0_cycles_is_priced_by_xla_s_cost_model(tmp_path):
    """39k's XLA program at 32 images, profiled whole: the conv + GELU fusion writes its 66 MB f32 result to HBM, and
    libtpu's profile prices it at 0 cycles (465 cycles for the whole program). Filled with its bytes alone it read
    0.08 ms, under its FLOP floor; XLA's own cost model prices it (4.7 M cycles, a C_in = 8 conv at a few per cent of
    the MXU), and the estimate stands on that, saying so."""
    (tmp_path / "c.py").write_text(CONV)
    r = mk("estimate", "--program", f"{tmp_path / 'c.py'}:f", "--arg", "bf16[B=32,8,256,256]", "--arg",
           "bf16[64,8,3,3]", "--parallel", "B", "--chip", "v5e", "--json",
           env={"MAXKERNEL_ESTIMATE_MAX_GFLOP": "40", "MAXKERNEL_CACHE_DIR": str(tmp_path / "c")})
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (point,) = doc["fit"]["points"]
    assert point["cycles"] < 0.01 * point["zero_cycle_fill_cycles"]  # the profile itself sees almost nothing
    assert point["zero_cycle_model_ops"] and point["zero_cycle_model_cycles"] > 0.9 * point["zero_cycle_fill_cycles"]
    assert doc["under_priced"] is None and doc["static_cycles_ms"] > 10 * doc["floors"]["compute_ms"]
    assert any("cost model" in x and point["zero_cycle_model_ops"][0] in x for x in doc["limits"]), doc["limits"]
    assert point["zero_cycle_model_dma"] == ["REMOTE"]  # read from libtpu's profile of that op
    # The text report (a cache hit) says the model's share in its uncertainty line.
    text = mk("estimate", "--program", f"{tmp_path / 'c.py'}:f", "--arg", "bf16[B=32,8,256,256]", "--arg",
              "bf16[64,8,3,3]", "--parallel", "B", "--chip", "v5e",
              env={"MAXKERNEL_ESTIMATE_MAX_GFLOP": "40", "MAXKERNEL_CACHE_DIR": str(tmp_path / "c")})
    line = next(x for x in text.stdout.splitlines() if x.startswith("uncertainty:"))
    assert f"(XLA's cost model {doc['uncertainty']['cost_model_share']:.0%})" in line, line


CONV_T = """import jax, jax.numpy as jnp
from jax import lax

def f(x, w, b):
    y = lax.conv_general_dilated(x, jnp.flip(w, (2, 3, 4)), (1, 1, 1), [(2, 2)] * 3, lhs_dilation=(2, 2, 2),
                                 dimension_numbers=("NCDHW", "IODHW", "NCDHW"), preferred_element_type=jnp.float32)
    y = y + b.astype(jnp.float32)[:, None, None, None]
    y = (y - jnp.mean(y, axis=-1, keepdims=True)) * lax.rsqrt(jnp.var(y, axis=-1, keepdims=True) + 1e-5)
    return y.astype(x.dtype)
"""


@pytest.mark.integration
@pytest.mark.slow
def test_a_shrunk_size_xla_does_not_compile_is_stepped_over(tmp_path):
    """28k's transposed conv + LayerNorm over W: XLA:TPU fails after layout assignment at one image ("Expected
    instruction to have shape equal to f32[4,4,64], actual shape is f32[64,4,4]") and compiles two and more. At a
    0.1 GFLOP budget the sizes are 1, 2 and 4 images; the program is then planned for a budget 4 times larger, 4 and
    8 images, and priced, saying so (before: could not estimate, stage compile)."""
    (tmp_path / "t.py").write_text(CONV_T)
    r = mk("estimate", "--program", f"{tmp_path / 't.py'}:f", "--arg", "bf16[B=8,8,2,2,32]", "--arg",
           "bf16[8,64,4,4,4]", "--arg", "bf16[64]", "--parallel", "B", "--chip", "v5e", "--json",
           env={"MAXKERNEL_ESTIMATE_MAX_GFLOP": "0.1", "MAXKERNEL_CACHE_DIR": str(tmp_path / "c")})
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["ok"], doc.get("error") or r.stderr
    assert sorted(p["dims"]["B"] for p in doc["fit"]["points"]) == [4, 8]  # at 0.1 GFLOP: 1, 2 and 4
    said = [x for x in doc["limits"] if "did not compile the program at the shrunk size" in x]
    assert said and "'B': 1" in said[0] and "4 times larger" in said[0], doc["limits"]


RELAYOUT = """import jax, jax.numpy as jnp
from jax.experimental import pallas as pl

def _k(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2

def nchw(x):
    n, c, h, w = x.shape
    spec = pl.BlockSpec((1, c, h, w), lambda i: (i, 0, 0, 0))
    return pl.pallas_call(_k, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(n,), in_specs=[spec],
                          out_specs=spec)(x)

def hwnc(x):
    xt = jnp.transpose(x, (2, 3, 0, 1))
    h, w, n, c = xt.shape
    spec = pl.BlockSpec((1, w, n, c), lambda i: (i, 0, 0, 0))
    o = pl.pallas_call(_k, out_shape=jax.ShapeDtypeStruct(xt.shape, x.dtype), grid=(h,), in_specs=[spec],
                       out_specs=spec)(xt)
    return jnp.transpose(o, (2, 3, 0, 1))
"""


@pytest.mark.integration
@pytest.mark.slow
def test_the_xla_copies_around_a_kernel_are_named_with_their_layouts(tmp_path):
    """XLA holds bf16[16,128,14,14] with its dims ordered {1,0,3,2} (channels fastest), not row-major: a kernel over
    NCHW blocks gets its argument copied in and its output copied out (88 % of the program's cycles), and the limit
    says which array each copy moves, from which layout into which, so a user sees that the same kernel over
    [h, w, n, c] (jnp.transpose'd outside: bitcasts) is not copied; that one's estimate names no copy, and is lower."""
    (tmp_path / "k.py").write_text(RELAYOUT)
    docs = {}
    for fn in ("nchw", "hwnc"):
        r = mk("estimate", "--program", f"{tmp_path / 'k.py'}:{fn}", "--arg", "bf16[B=16,128,14,14]", "--parallel", "B",
               "--chip", "v5e", "--json", env={"MAXKERNEL_CACHE_DIR": str(tmp_path / "c")})
        assert r.returncode == 0, r.stderr
        docs[fn] = json.loads(r.stdout)
    said = " ".join(docs["nchw"]["limits"])
    assert "copies the kernel's output bf16[16,128,14,14] from the layout it writes, {3,2,1,0" in said, said
    assert "into {1,0,3,2" in said and "copies argument 0 bf16[16,128,14,14]" in said, said
    assert "copies" not in " ".join(docs["hwnc"]["limits"]), docs["hwnc"]["limits"]
    assert docs["hwnc"]["estimated_ms"] < docs["nchw"]["estimated_ms"]


@pytest.mark.integration
@pytest.mark.slow
def test_estimate_program_parallel_axes_keep_a_same_sized_dim_whole():
    """8p_GEMM's K is 8192 wide like its M: --parallel D8192 shrinks both and the fit falls under the FLOP floor
    (said as under_priced); --parallel 0.0 --parallel 1.1 (x's rows, w's columns) shrinks M and N alone, and the
    program is priced as its task prices it."""
    base = str(ROOT / "jaxbench" / "8p_GEMM" / "baseline.py")
    prog = ["estimate", "--program", f"{base}:workload", "--inputs", f"{base}:create_inputs", "--chip", "v5e", "--json"]
    merged = json.loads(mk(*prog, "--parallel", "D8192").stdout)
    r = mk(*prog, "--parallel", "0.0", "--parallel", "1.1")
    assert r.returncode == 0, r.stderr
    apart = json.loads(r.stdout)
    task = json.loads(mk("estimate", "--task", "8p_GEMM", "--chip", "v5e", "--json").stdout)
    assert merged["ok"] and merged["under_priced"], merged["summary"]
    assert apart["ok"] and not apart["under_priced"] and "P8192=8192" in apart["limits"][0], apart["summary"]
    assert apart["estimated_ms"] == pytest.approx(task["estimated_ms"], rel=0.05)


@pytest.mark.integration
@pytest.mark.slow
def test_estimate_program_no_dim_shrinks_is_profiled_whole(tmp_path):
    """A matmul whose arguments lead with different dims (so no dim is taken as parallel) and whose dims are all
    narrow, above a budget lowered to force it: no shrink plan, so XLA's program is profiled whole at full size and
    the limit says why (was: could not estimate, "cannot shrink the program below the profiling budget")."""
    (tmp_path / "p.py").write_text("def mm(a, b):\n    return a @ b\n")
    env = {**os.environ, "MAXKERNEL_CACHE_DIR": str(tmp_path / "cache"), "MAXKERNEL_ESTIMATE_MAX_GFLOP": "0.01"}
    run = [sys.executable, "-m", "maxkernel.cli", "estimate", "--program", "p.py:mm", "--arg", "bf16[512,1024]",
           "--arg", "bf16[1024,512]", "--chip", "v5e", "--json"]
    r = subprocess.run(run, capture_output=True, text=True, cwd=tmp_path, timeout=600, env=env)
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["ok"], (doc.get("error"), r.stderr[-2000:])
    assert doc["fit"]["how"] == "profiled at full size" and doc["fit"]["points"][0]["x"] == 1.0
    assert any(x.startswith("profiled whole at full size, not shrunk (cannot shrink") for x in doc["limits"])
    assert doc["estimated_ms"] >= doc["floors"]["compute_ms"] > 0
