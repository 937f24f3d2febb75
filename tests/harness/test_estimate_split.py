"""A kernel priced in parts: where no size of the task shrinks the whole program (3p's six pallas_calls: num_heads is
the output projection's reduction, emb_dim the down-projections', seq_len quadratic in attention), each pallas_call
is profiled alone on its full-size operands with its grid cut along parallel axes, the XLA around the kernels priced at
its roofline floor (each operation's bytes or FLOPs), and the parts summed."""

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from maxkernel.harness.jobs import estimate_job as ej


def _scale(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2


def _two_calls(x, y):
    """Call A: grid (16, 4), both axes parallel; call B: grid (3,), odd, so never cut; XLA between them."""
    a = pl.pallas_call(_scale, grid=(16, 4), in_specs=[pl.BlockSpec((8, 128), lambda i, j: (i, j))],
                       out_specs=pl.BlockSpec((8, 128), lambda i, j: (i, j)),
                       out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                       compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel")))(x)
    b = pl.pallas_call(_scale, grid=(3,), in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
                       out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
                       out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype),
                       compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",)))(jnp.tanh(y))
    return a.sum() + b.sum()


def _closed():
    return jax.jit(_two_calls).trace(jax.ShapeDtypeStruct((128, 512), jnp.float32),
                                     jax.ShapeDtypeStruct((24, 128), jnp.float32)).jaxpr


@pytest.mark.unit
def test_grids_halve_along_parallel_axes_leading_first_and_never_a_reduction():
    assert ej.halvings([16, 4], [True, True])[-3:] == [(1, 4), (1, 2), (1, 1)]
    assert ej.halvings([4, 8, 6], [True, False, True]) == [(4, 8, 6), (2, 8, 6), (1, 8, 6), (1, 8, 3)]
    assert ej.halvings([3], [True]) == [(3,)] and ej.halvings([-1, 8], [True, True]) == [(-1, 8)]


@pytest.mark.unit
def test_the_split_cuts_each_call_to_a_few_tiles_and_keeps_an_odd_one_whole():
    points = ej.split_plan(_closed())
    a = [p for p in points if p["part"] == 0]
    assert [(p["grid"], p["tiles"], p["x"]) for p in a] == [([2, 4], 8, 8 / 64), ([4, 4], 16, 16 / 64)]
    assert [(p["grid"], p["x"]) for p in points if p["part"] == 1] == [([3], 1.0)]
    assert len(points) == 3
    glue = ej.glue_work(_closed())  # tanh of y (in and out), the two sums, the add; no pallas_call counted
    assert glue["bytes"] == 2 * 24 * 128 * 4 + 128 * 512 * 4 + 4 + 24 * 128 * 4 + 4 + 3 * 4 and glue["ops"] == 4
    assert glue["flops"] == 24 * 128 + 128 * 512 + 24 * 128 + 1 and len(glue["work"]) == 4


def _matmul_between(x, y, w):
    """Two kernels with a matmul left to XLA between them (the verdict allows some of a task's matmul FLOPs
    outside Pallas), and a scan of elementwise work run 5 times."""
    a = _two_calls(x, y)
    z = jnp.dot(w, w, preferred_element_type=jnp.float32)
    z, _ = jax.lax.scan(lambda c, _: (jnp.sin(c), None), z, None, length=5)
    return a + z.sum()


@pytest.mark.unit
def test_a_matmul_left_in_the_xla_between_kernels_is_priced_by_its_flops_not_its_bytes():
    """Attack: a kernel priced in parts moves a matmul out of Pallas into the XLA around its kernels, priced only
    by the bytes it reads and writes (3 x 2 MiB: 8 us on a v5e), where its 2 x 1024^3 FLOPs need 11 us at peak."""
    from maxkernel import chips
    from maxkernel.harness.estimate import estimator as est
    from maxkernel.tasks import load_task

    closed = jax.jit(_matmul_between).trace(jax.ShapeDtypeStruct((128, 512), jnp.float32),
                                            jax.ShapeDtypeStruct((24, 128), jnp.float32),
                                            jax.ShapeDtypeStruct((1024, 1024), jnp.float32)).jaxpr
    glue = ej.glue_work(closed)
    mm = 2 * 1024**3
    assert [3 * 1024 * 1024 * 4, mm] in glue["work"]  # the dot: w twice in, z out, at its FLOPs
    assert glue["flops"] >= mm + 5 * 1024 * 1024  # the scan's sin counted at each of its 5 trips
    chip = chips.get("v5e")
    base = dict(ok=False, program="kernel", chip="v5e", libtpu_flags=[], libtpu="test")
    lines = _split_lines({0: [(1.0, 1_000)]})
    lines[0]["plan"]["glue"] = glue
    got = est._fit_split(base, lines, load_task("8p_GEMM"), chip, "full", 0)
    floor = sum(max(b / chip.device_hbm_bytes_per_s, f / chip.device_peak_flops) for b, f in glue["work"])
    assert got.fit["glue_cycles"] == round(floor * chip.clock)
    assert got.fit["glue_cycles"] >= mm / chip.device_peak_flops * chip.clock  # the matmul at peak, at least
    assert "work" not in got.fit["glue"] and "FLOPs) each operation at its roofline floor" in got.limits[0]


@pytest.mark.unit
def test_the_last_parallel_axis_is_cut_only_while_many_tiles_remain(monkeypatch):
    """3p's causal attention, grid (batch 4, head pairs 64, query blocks 4, key blocks 4): batch and heads are cut to
    1, never the query blocks (the first ones see fewer keys: 34 k cycles at 2 of them, 83 k at all 4)."""
    monkeypatch.setattr(ej, "pallas_facts", lambda closed: {"pallas_calls": [
        {"grid": [4, 64, 4, 4], "parallel": [True, True, True, False]},
        {"grid": [1024], "parallel": [True]}, {"grid": [2, 64, 4], "parallel": [True, True, False]}]})
    monkeypatch.setattr(ej, "tile_flops", lambda closed: [0.7e9, 1e6, 2.1e9])
    points = ej.split_plan(None, budget_flops=20e9)
    assert [p["grid"] for p in points if p["part"] == 0] == [[1, 1, 4, 4], [1, 2, 4, 4]]
    assert [p["grid"] for p in points if p["part"] == 1] == [[64], [128]]  # the only axis: cut while it is wide
    # 8p-like GEMM tiles of 2.1 GFLOP: with its columns whole the larger point (128 tiles) does 13 times the budget,
    # so the last axis (column tiles, which cost alike) is cut too, down to 8 tiles.
    assert [p["grid"] for p in points if p["part"] == 2] == [[1, 2, 4], [1, 4, 4]]


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.timeout(1200)
def test_a_gemm_priced_in_parts_agrees_with_its_shrunk_estimate(monkeypatch, tmp_path):
    """8p's one-call GEMM kernel on v5e, by the ordinary shrink and in parts (forced): the same figure within 15 %.
    (Its tiles are 2.1 GFLOP each: in parts it is cut along its column tiles too, to 8 and 16 tiles.)"""
    from _extras import need_module

    need_module("libtpu", extra="tpu")
    from maxkernel import chips
    from maxkernel.harness.estimate import estimator as est
    from maxkernel.settings import get_settings
    from maxkernel.tasks import load_task

    monkeypatch.setenv("MAXKERNEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MAXKERNEL_ESTIMATE_TIMEOUT_S", "900")  # a loaded 2-core machine took 567 s and more
    task, chip = load_task("8p_GEMM"), chips.get("v5e")
    kernel = str(task.baseline_file.parent / "kernel.py")
    get_settings.cache_clear()
    whole = est.estimate_program(task, kernel, chip)
    monkeypatch.setenv("MAXKERNEL_ESTIMATE_IN_PARTS", "true")
    get_settings.cache_clear()
    try:
        parts = est.estimate_program(task, kernel, chip)
    finally:
        get_settings.cache_clear()
    assert whole.ok and parts.ok, (whole.error, parts.error)
    assert parts.fit["how"].startswith(est.SPLIT) and len(parts.fit["parts"]) == 1
    assert parts.limits[0].startswith(est.SPLIT) and not whole.fit.get("parts")
    assert parts.fit["fingerprints"] and parts.fit["fingerprints"][0] == whole.fit["fingerprints"][0]
    assert parts.static_cycles_ms == pytest.approx(whole.static_cycles_ms, rel=0.15)


@pytest.mark.unit
def test_the_profile_job_profiles_every_split_point_even_where_two_share_an_x(tmp_path, monkeypatch):
    """17p's second call ends at 1/32 of its tiles and its third starts there: the job's early stop on three points
    in line divided by the zero between two parts' equal x and the whole estimate died (ZeroDivisionError)."""
    from maxkernel.harness.jobs import compile_job
    from maxkernel.harness.jobs import estimate_compile_job as cj

    cuts = [((3, 1 / 32), (6, 1 / 16)), ((2, 1 / 64), (4, 1 / 32)), ((3, 1 / 32), (6, 1 / 16))]  # 17p's plan
    points = [{"part": i, "grid": [g], "x": x, "tiles": g, "dims": {"N": 1536}, "file": f"{i}_{g}.mlir"}
              for i, pair in enumerate(cuts) for g, x in pair]
    for p in points:
        (tmp_path / p["file"]).write_text("")
    monkeypatch.setattr(compile_job, "_topology_device", lambda chip: object())
    # The job sets LIBTPU_INIT_ARGS (its LLO profile dump) for its own process; run here, it must not outlive the
    # test: every later sandboxed compile of this process inherited it, dumped profiles, and ran out of memory.
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "")
    monkeypatch.setattr(cj, "profiled_compile", lambda text, device, dump: {"ops": {"k": 100}, "zero_cycle_bytes": {},
                                                                              "compile_s": 0.0, "kernel_ops": ["k"]})
    assert cj.run({"chip": "v5e", "points": points}, tmp_path)["status"] == "ok"
    done = [ln for ln in (tmp_path / cj.PROGRESS_FILE).read_text().splitlines() if '"point"' in ln]
    assert len(done) == 6


def _split_lines(cycles: dict, planned: list[int] | None = None) -> list[dict]:
    """A split profile's lines as the trusted job writes them: part -> [(x, kernel op cycles)]; the plan split
    `planned` parts (default: those profiled)."""
    split = [{"part": i, "grid": [1], "x": 1.0} for i in (cycles if planned is None else planned)]
    head = {"plan": {"full_dims": {"M": 8192}, "shrunk_dims": [], "split": split, "glue": {"bytes": 0, "ops": 0}},
            "facts": {"pallas_calls": [], "data_dependent": []}, "block_traffic": {"bytes": None, "notes": []}}
    points = [{"point": {"part": i, "grid": [1], "x": x, "dims": {"M": 8192}, "ops": {"k": c, "copy": 999},
                         "kernel_ops": ["k"], "zero_cycle_bytes": {"k": 10**9} if c == 0 else {}, "trips": {},
                         "compile_s": 1.0}} for i, pts in cycles.items() for x, c in pts]
    return [head, *points]


@pytest.mark.unit
def test_the_parts_are_read_at_their_full_grids_and_summed():
    from maxkernel import chips
    from maxkernel.harness.estimate import estimator as est
    from maxkernel.tasks import load_task

    chip = chips.get("v5e")
    base = dict(ok=False, program="kernel", chip="v5e", libtpu_flags=[], libtpu="test")
    # part 0: 1000 cycles of fill plus 100k per 1/8 of its tiles; part 1 profiled whole; the lone call's copy ignored
    got = est._fit_split(base, _split_lines({0: [(1 / 8, 101_000), (1 / 4, 201_000)], 1: [(1.0, 5_000_000)]}),
                         load_task("8p_GEMM"), chip, "full", 0)
    assert got.ok and got.fit["parts"][0]["cycles_full"] == 801_000 and got.fit["parts"][1]["cycles_full"] == 5_000_000
    assert got.static_cycles_ms == pytest.approx(5_801_000 / chip.clock * 1e3)
    assert got.uncertainty["extrapolation"] == 4


@pytest.mark.unit
def test_a_part_the_profiler_prices_at_zero_is_a_named_failure_not_its_bytes():
    """17p's projections: the kernel's op at 0 cycles at both cuts, its full-size operands' bytes as the only cost,
    the same at each cut; scaled in proportion that read 53 M cycles a part."""
    from maxkernel import chips
    from maxkernel.harness.estimate import estimator as est
    from maxkernel.tasks import load_task

    base = dict(ok=False, program="kernel", chip="v5e", libtpu_flags=[], libtpu="test")
    got = est._fit_split(base, _split_lines({0: [(1 / 32, 0), (1 / 16, 0)], 1: [(1.0, 5_000)]}),
                         load_task("8p_GEMM"), chips.get("v5e"), "full", 0)
    assert not got.ok and got.stage == "unpriced" and "pallas_call 0 of 2 at 0 cycles" in got.error
    assert "unpriced" in est._DETERMINISTIC  # cached, and not profiled again with the VMEM flag


@pytest.mark.unit
def test_a_part_the_plan_split_but_the_profile_left_out_is_no_estimate():
    """Three pallas_calls planned, two profiled: summed, the third's work would be missing from the kernel's time."""
    from maxkernel import chips
    from maxkernel.harness.estimate import estimator as est
    from maxkernel.tasks import load_task

    base = dict(ok=False, program="kernel", chip="v5e", libtpu_flags=[], libtpu="test")
    got = est._fit_split(base, _split_lines({0: [(1.0, 5_000)], 1: [(1.0, 5_000)]}, planned=[0, 1, 2]),
                         load_task("8p_GEMM"), chips.get("v5e"), "full", 0)
    assert not got.ok and got.stage == "sandbox" and "where the plan split [0, 1, 2]" in got.error


@pytest.mark.unit
def test_the_profile_job_profiles_the_glue_after_the_sizes_it_stops_at(tmp_path, monkeypatch):
    """The glue point (the program around the kernels at full size, for its sorts) comes last in the plan; the job's
    early stop at three sizes on one line skips the larger sizes, never the glue, and names it when it starts (the
    parent reads a failed glue profile from that line)."""
    import json

    from maxkernel.harness.jobs import compile_job
    from maxkernel.harness.jobs import estimate_compile_job as cj

    points = [{"dims": {"B": b}, "x": b / 32, "tiles": b, "file": f"{b}.mlir"} for b in (2, 4, 8, 16, 32)]
    points.append({"glue": True, "dims": {"B": 32}, "x": 1.0, "tiles": None, "file": "glue.mlir"})
    for p in points:
        (tmp_path / p["file"]).write_text(p["file"])
    monkeypatch.setattr(compile_job, "_topology_device", lambda chip: object())
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "")
    monkeypatch.setattr(cj, "profiled_compile", lambda text, device, dump: {
        "ops": {"k": 100 * int(text.split(".")[0]) if text[0].isdigit() else 0, "sort.1": 7}, "sort_ops": ["sort.1"],
        "zero_cycle_bytes": {}, "compile_s": 0.0, "kernel_ops": ["k"]})
    assert cj.run({"chip": "v5e", "points": points}, tmp_path)["status"] == "ok"
    lines = [json.loads(ln) for ln in (tmp_path / cj.PROGRESS_FILE).read_text().splitlines()]
    done = [ln["point"] for ln in lines if "point" in ln]
    assert [p.get("glue", False) for p in done] == [False, False, False, True]
    assert [ln["starting"] for ln in lines if "starting" in ln][-1] == {"glue": {"B": 32}}
