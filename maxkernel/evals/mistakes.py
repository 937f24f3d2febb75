"""A catalogue of Pallas mistakes, written here as edits to the suite's reference kernels: each is one error
family a model really makes (an API renamed since its training data, a TPU lowering rule, a kernel bug the
strict interpreter catches), with the check that exposes it. The hint tests and benchmarks/hints.py run every
one through the real tools (compile, test, evaluate) with `run` and require a hint naming its cause and fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["Mistake", "MISTAKES", "apply", "base_source", "run"]

BASES = Path(__file__).with_name("bases")


@dataclass(frozen=True)
class Mistake:
    name: str  # unique, e.g. "gemm-renamed-compiler-params"
    family: str  # the error family the hint must name
    task: str  # the suite task whose reference kernel is edited
    check: str  # "compile" (v5e unless chip says), "test" (strict interpreter) or "evaluate" (the verdict)
    edits: tuple[tuple[str, str], ...]  # (old, new) text replacements, each must apply exactly once
    chip: str = "v5e"
    expect: str = ""  # a phrase the hint must contain (the fix), checked by the tests
    base: str = ""  # a correct kernel in maxkernel/evals/bases/ to edit instead of the task's reference kernel
    timeout: float | None = None  # seconds for a check whose failure is a hang


def base_source(mistake: Mistake) -> str:
    """The correct kernel the mistake edits: its own base file, else the task's shipped reference kernel."""
    if mistake.base:
        return (BASES / mistake.base).read_text()
    from maxkernel.tasks import load_task

    return load_task(mistake.task).reference_kernel.read_text()


def apply(mistake: Mistake, source: str) -> str:
    """The reference source with the mistake's edits made; raises ValueError if an edit does not apply once."""
    for old, new in mistake.edits:
        if source.count(old) != 1:
            raise ValueError(f"{mistake.name}: edit {old[:40]!r} matches {source.count(old)} times")
        source = source.replace(old, new)
    return source


_GEMM_PARAMS = 'compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"),'
_GEMM_INIT = '''    @pl.when(k == 0)
    def _init():
        acc_ref[...] = jnp.zeros_like(acc_ref)
'''
_GEMM_STORE = '''    @pl.when(k == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)'''
_RMS_STORE = "    o_ref[...] = (normed * scale_ref[...].astype(jnp.float32)).astype(o_ref.dtype)"

MISTAKES: tuple[Mistake, ...] = (
    Mistake("gemm-renamed-compiler-params", "renamed_api", "8p_GEMM", "compile",
            ((_GEMM_PARAMS, _GEMM_PARAMS.replace("pltpu.CompilerParams", "pltpu.TPUCompilerParams")),),
            expect="pltpu.CompilerParams"),
    Mistake("rmsnorm-renamed-memory-space", "renamed_api", "12p_RMSNorm", "compile",
            (("pl.BlockSpec((1, emb), lambda i: (0, 0)),",
              "pl.BlockSpec((1, emb), lambda i: (0, 0), memory_space=pltpu.TPUMemorySpace.VMEM),"),),
            expect="pltpu.MemorySpace"),
    Mistake("gemm-removed-pl-load", "renamed_api", "8p_GEMM", "compile",
            (("jnp.dot(a_ref[...], b_ref[...],", "jnp.dot(pl.load(a_ref, (slice(None), slice(None))), b_ref[...],"),),
            expect="ref[...]"),
    Mistake("rmsnorm-block-unaligned", "block_alignment", "12p_RMSNorm", "compile",
            (("    bs = BlockSizes.fit(rows, block_rows=block_rows)\n", "    bs = BlockSizes(block_rows)\n"),
             ("block_rows: int = 128,", "block_rows: int = 100,")),
            expect="multiples of 8 and 128"),
    Mistake("rmsnorm-vmem-overflow", "vmem_overflow", "12p_RMSNorm", "compile",
            (("block_rows: int = 128,", "block_rows: int = 1024,"),), expect="Shrink x_ref"),
    Mistake("gemm-fp8-on-v4", "dtype_per_chip", "8p_GEMM", "compile",
            (("jnp.dot(a_ref[...], b_ref[...],",
              "jnp.dot(a_ref[...].astype(jnp.float8_e4m3fn), b_ref[...].astype(jnp.float8_e4m3fn),"),),
            chip="v4", expect="bfloat16"),
    Mistake("rmsnorm-int8-vector-math", "dtype_per_chip", "12p_RMSNorm", "compile",
            (("    x = x_ref[...].astype(jnp.float32)\n",
              "    x = (x_ref[...].astype(jnp.int8) + jnp.int8(1)).astype(jnp.float32)\n"),),
            expect="int32"),
    Mistake("gemm-triple-buffering", "buffer_depth", "8p_GEMM", "compile",
            (("pl.BlockSpec((bs.block_k, bs.block_n), lambda i, j, kk: (kk, j)),",
              "pl.BlockSpec((bs.block_k, bs.block_n), lambda i, j, kk: (kk, j), pipeline_mode=pl.Buffered(3)),"),),
            expect="Buffered(2)"),
    Mistake("gemm-reduction-axis-parallel", "parallel_reduction", "8p_GEMM", "test",
            ((_GEMM_PARAMS, _GEMM_PARAMS.replace('"parallel", "parallel", "arbitrary"',
                                                  '"parallel", "parallel", "parallel"')),),
            expect="arbitrary"),
    Mistake("gemm-missing-accumulator-init", "missing_init", "8p_GEMM", "test", ((_GEMM_INIT, ""),),
            expect="pl.when"),
    Mistake("gemm-python-if-on-program-id", "traced_control_flow", "8p_GEMM", "test",
            ((_GEMM_STORE, '''    if k == pl.num_programs(2) - 1:
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)'''),), expect="pl.when"),
    Mistake("rmsnorm-vector-load-from-smem", "smem_vector_load", "12p_RMSNorm", "compile",
            (("pl.BlockSpec((1, emb), lambda i: (0, 0)),",
              "pl.BlockSpec((1, emb), lambda i: (0, 0), memory_space=pltpu.SMEM),"),), expect="VMEM"),
    Mistake("gemm-index-map-past-the-end", "index_map_out_of_bounds", "8p_GEMM", "test",
            (("pl.BlockSpec((bs.block_m, bs.block_k), lambda i, j, kk: (i, kk)),",
              "pl.BlockSpec((bs.block_m, bs.block_k), lambda i, j, kk: (i, kk + 1)),"),),
            expect="block index"),
    Mistake("gemm-wrong-output-dtype", "output_dtype", "8p_GEMM", "evaluate",
            (("    out_dtype = a.dtype\n", "    out_dtype = jnp.float32\n"),), expect="dtype"),
    Mistake("rmsnorm-interpret-left-in", "interpret_left_in", "12p_RMSNorm", "evaluate",
            (("        interpret=False,\n", "        interpret=True,\n"),), expect="interpret"),
    Mistake("gemm-wrong-contracting-dims", "contracting_dims", "8p_GEMM", "test",
            (("jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)",
              "jax.lax.dot_general(a_ref[...], b_ref[...], (((0,), (0,)), ((), ())), "
              "preferred_element_type=jnp.float32)"),), expect="contract"),
    Mistake("rmsnorm-store-wrong-dtype", "store_dtype", "12p_RMSNorm", "test",
            ((_RMS_STORE, "    o_ref[...] = normed * scale_ref[...].astype(jnp.float32)"),), expect=".astype(o_ref.dtype)"),
    Mistake("gemm-store-never-runs", "store_condition", "8p_GEMM", "test",
            (("    @pl.when(k == pl.num_programs(2) - 1)\n", "    @pl.when(k == pl.num_programs(2))\n"),),
            expect="num_programs(2) - 1"),
    Mistake("gemm-unimplemented-cumsum", "unsupported_primitive", "8p_GEMM", "compile",
            (("    acc_ref[...] += jnp.dot(", "    acc_ref[...] += jnp.cumsum(a_ref[...], axis=0)[:, :1] * 0 + jnp.dot("),),
            expect="triangular"),
    Mistake("rmsnorm-float16-math", "dtype_per_chip", "12p_RMSNorm", "compile",
            (("    x = x_ref[...].astype(jnp.float32)\n", "    x = x_ref[...].astype(jnp.float16).astype(jnp.float32)\n"),),
            expect="bfloat16"),
    Mistake("gemm-semantics-length", "dimension_semantics", "8p_GEMM", "compile",
            ((_GEMM_PARAMS, _GEMM_PARAMS.replace('"parallel", "parallel", "arbitrary"', '"parallel", "arbitrary"')),),
            expect="one entry per grid axis"),
    Mistake("rmsnorm-blockspec-old-order", "blockspec_order", "12p_RMSNorm", "compile",
            (("pl.BlockSpec((1, emb), lambda i: (0, 0)),", "pl.BlockSpec(lambda i: (0, 0), (1, emb)),"),),
            expect="(block_shape, index_map)"),
    Mistake("flash-running-sum-not-rescaled", "multi_step_state", "1p_Flash_Attention", "test",
            (("l_ref[...] = alpha * l_ref[...] + jnp.sum(p, axis=-1, keepdims=True)",
              "l_ref[...] = l_ref[...] + jnp.sum(p, axis=-1, keepdims=True)"),),
            expect="smaller ones it declares"),
    Mistake("gemm-epilogue-weight-layout", "block_past_array", "41k_Gemm_Add_ReLU", "test",
            (("pl.BlockSpec((bs.block_n, bs.block_k), lambda i, j, kk: (j, kk)),",
              "pl.BlockSpec((bs.block_k, bs.block_n), lambda i, j, kk: (kk, j)),"),
             ("lax.dot_general(x_ref[...], w_ref[...], _CONTRACT_LAST, preferred_element_type=jnp.float32)",
              "jnp.dot(x_ref[...], w_ref[...], preferred_element_type=jnp.float32)")),
            expect="[out_features, in_features]"),
    Mistake("rmsnorm-dma-started-never-waited", "dma_sync", "12p_RMSNorm", "test",
            (("    copy.wait()\n", ""),), base="rmsnorm_manual_dma.py", expect="copy.wait()"),
    Mistake("rmsnorm-dma-waited-never-started", "dma_sync", "12p_RMSNorm", "test",
            (("    copy.start()\n", ""),), base="rmsnorm_manual_dma.py", expect="copy.start()", timeout=20),
)


def run(mistake: Mistake, folder: Path) -> dict:
    """Write the mistake's kernel into `folder` and put it through its check with the real tool; returns
    {"name", "family", "check", "hint", "hint_family", "text"} (text: what the tool said, for a reader)."""
    from maxkernel.harness.verdict.evaluate import shared_evaluator
    from maxkernel.tools.compile_pallas import compile_pallas
    from maxkernel.tools.run_tests import run_tests

    folder.mkdir(parents=True, exist_ok=True)
    kernel = folder / "kernel.py"
    kernel.write_text(apply(mistake, base_source(mistake)))
    if mistake.check == "compile":
        r = compile_pallas(mistake.task, str(kernel), mistake.chip)
        hint, family, text = r.hint, r.hint_family, r.error or r.summary
    elif mistake.check == "test":
        r = run_tests(mistake.task, str(kernel), seeds=1, timeout=mistake.timeout)
        hint, family, text = r.hint, r.hint_family, r.summary
    else:
        v = shared_evaluator().evaluate(mistake.task, kernel, size="smoke", estimate=False)
        hint, family, text = v.hint, v.hint_family, f"{v.status}: {v.reason}"
    return {"name": mistake.name, "family": mistake.family, "check": mistake.check, "hint": hint or "",
            "hint_family": family or "", "text": (text or "")[:600]}
