"""The estimate's arithmetic on profiled points (no libtpu): the fit, the 0-cycle fill, the floors, the bound."""

import pytest

from maxkernel import chips
from maxkernel.harness.estimate.estimator import _fit
from maxkernel.tasks import load_task

pytestmark = pytest.mark.unit

V5E = chips.get("v5e")
GEMM_FLOPS = 2 * 8192 * 8192 * 28672
IO = 2 * (8192 * 8192 + 2 * 8192 * 28672)
BASE = dict(ok=False, program="kernel", chip="v5e", libtpu_flags=[], libtpu="test")


def lines(points, spec_bytes=None, calls=(), trips=None, loops=None):
    head = {"plan": {"shrunk_dims": ["M"], "full_dims": {"M": 8192, "K": 8192, "N": 28672}, "rejected": {}},
            "facts": {"pallas_calls": list(calls), "data_dependent": []},
            "block_traffic": {"bytes": spec_bytes, "notes": []}}
    return [head] + [{"point": {"dims": {"M": 8192 * x}, "x": x, "tiles": None, "ops": ops, "zero_cycle_bytes": zb,
                                "compile_s": 1.0, "trips": trips or {}, "loops": loops or []}}
                     for x, ops, zb in points]


def test_a_line_is_read_at_full_size_and_floored():
    pts = [(x, {"k": int(1000 + 3e7 * x)}, {}) for x in (1 / 64, 1 / 32, 1 / 16)]
    e = _fit(BASE, lines(pts), load_task("8p_GEMM"), V5E, "full", IO)
    assert e.ok and e.fit["cycles_full"] == pytest.approx(1000 + 3e7)
    assert e.static_cycles_ms == pytest.approx((1000 + 3e7) / V5E.clock * 1e3)
    assert e.floors["compute_ms"] == pytest.approx(GEMM_FLOPS / V5E.device_peak_flops * 1e3)
    assert e.floors["memory_ms"] == pytest.approx(IO / V5E.device_hbm_bytes_per_s * 1e3)
    assert e.estimated_ms == pytest.approx(max(e.static_cycles_ms, *e.floors.values()))
    assert e.bound == "compute" and 0 < e.fraction_of_roofline <= 1


def test_cycles_below_the_floor_give_the_floor():
    pts = [(x, {"k": int(10 * x * 64)}, {}) for x in (1 / 64, 1 / 32, 1 / 16)]  # absurdly fast: a forged profile
    e = _fit(BASE, lines(pts), load_task("8p_GEMM"), V5E, "full", IO)
    assert e.estimated_ms == pytest.approx(e.floors["compute_ms"]) and e.fraction_of_roofline == pytest.approx(1.0)
    # ... and says so: a profile below the FLOP floor is a finding, never silently floored
    assert "below the task's FLOP floor" in e.under_priced and any(x.startswith("under-priced") for x in e.limits)


def test_sizes_held_by_a_fixed_cost_are_named_as_too_small_not_as_missing_work():
    """13p's baseline on v6e, profiled at 16, 32 and 64 of 8192 rows: the 1 GB unembedding streamed whole holds every
    size (862 k cycles) and the line adds 2.85 M cycles for the rest, a sixth of the FLOPs at peak. The estimate is
    the FLOP floor, and the reason names the sizes, not a profile that misses work (the forged profile above, with no
    fixed cost, still gets that reason)."""
    v6e = chips.get("v6e")
    task = load_task("13p_Cross_Entropy")
    pts = [(x, {"fusion": int(862_766 + 2_854_766 * x)}, {}) for x in (16 / 8192, 32 / 8192, 64 / 8192)]
    e = _fit({**BASE, "chip": "v6e"}, lines(pts), task, v6e, "full", 1117847552)
    assert e.estimated_ms == pytest.approx(e.floors["compute_ms"])
    assert "too small to be compute-bound" in e.under_priced and "misses work" not in e.under_priced, e.under_priced


def test_a_convex_profile_is_read_along_its_largest_sizes_slope():
    """19k's baseline on v5e at 128, 256 and 512 of 4096 rows (the profile's own figures): the dot leaves the
    weight-bound regime as it grows (79 k cycles for the second 128 rows, 117 k per 128 for the next 256), so the line
    through all three reads the full size 8 % low, under the FLOP floor. Along the two largest sizes' slope it is
    at the floor's 91 %: not under-priced."""
    task = load_task("19k_Matmul_Subtract_Multiply_ReLU")
    pts = [(x, {"fusion": c}, {}) for x, c in ((1 / 32, 240626), (1 / 16, 319399), (1 / 8, 553768))]
    e = _fit(BASE, lines(pts), task, V5E, "full", 2 * (4096 * 8192 * 2 + 8192 * 8192))
    seg = 553768 + (553768 - 319399) / (1 / 16) * (7 / 8)
    assert e.fit["cycles_full"] == pytest.approx(seg) and "two largest" in e.fit["how"]
    assert e.under_priced is None and e.static_cycles_ms == pytest.approx(seg / V5E.clock * 1e3)
    line = [(x, {"k": int(1000 + 3e7 * x)}, {}) for x in (1 / 64, 1 / 32, 1 / 16)]  # a straight line is read as one
    assert "fitted on 3 sizes" in _fit(BASE, lines(line), load_task("8p_GEMM"), V5E, "full", IO).fit["how"]


def test_an_honest_profile_is_not_under_priced():
    pts = [(x, {"k": int(1000 + 3e7 * x)}, {}) for x in (1 / 64, 1 / 32, 1 / 16)]
    assert _fit(BASE, lines(pts), load_task("8p_GEMM"), V5E, "full", IO).under_priced is None


def test_ops_inside_a_loop_are_priced_once_per_trip():
    # The profile prices the loop's body once (1e5 cycles per tenth of the work); it runs 16 times a point.
    body, outside, fill = 100_000, 5_000, 1 << 20
    pts = [(x, {"body": int(body * 10 * x), "outside": outside, "dus": 0}, {"dus": fill}) for x in (1 / 4, 1 / 2, 1)]
    loops = [{"name": "while", "trip_count": 16, "why": None}]
    e = _fit(BASE, lines(pts, trips={"body": 16, "dus": 16}, loops=loops), load_task("8p_GEMM"), V5E, "full", IO)
    filled = 16 * fill / V5E.device_hbm_bytes_per_s * V5E.clock
    assert e.fit["cycles_full"] == pytest.approx(16 * body * 10 + outside + filled, rel=1e-6)
    assert e.fit["points"][-1]["cycles_once"] == body * 10 + outside
    assert any("once per trip" in x and "16" in x for x in e.limits)


def test_a_loop_of_unknown_count_is_named_when_the_profile_falls_below_the_floor():
    pts = [(x, {"body": int(1e5 * x)}, {}) for x in (1 / 4, 1 / 2, 1)]
    loops = [{"name": "while.3", "trip_count": None, "why": "the loop's condition is not a comparison"}]
    e = _fit(BASE, lines(pts, trips={"body": -1}, loops=loops), load_task("8p_GEMM"), V5E, "full", IO)
    assert e.under_priced and "while.3 (the loop's condition is not a comparison)" in e.under_priced
    assert e.fit["cycles_full"] == pytest.approx(1e5, rel=1e-6)  # priced once, not guessed


def test_zero_cycle_ops_are_filled_with_their_hbm_time():
    fill = 1 << 30
    pts = [(x, {"k": int(3e7 * x), "copy": 0}, {"copy": int(fill * x)}) for x in (1 / 64, 1 / 32, 1 / 16)]
    e = _fit(BASE, lines(pts), load_task("8p_GEMM"), V5E, "full", IO)
    filled = fill / V5E.device_hbm_bytes_per_s * V5E.clock
    assert e.fit["cycles_full"] == pytest.approx(3e7 + filled, rel=1e-3)
    assert e.static_cycles_ms == pytest.approx(3e7 / V5E.clock * 1e3, rel=1e-3)  # the raw profile, without fills
    assert any("0 cycles" in x for x in e.limits)


def test_a_zero_cycle_fusion_xla_priced_is_filled_with_xla_s_cost_model_not_its_bytes():
    """39k's baseline at batch 4: the profile prices the conv fusion writing to HBM at 0 cycles, and its bytes are a
    fraction of its compute; XLA's cost model (classic) prices it. The fill takes the model's cycles, counts them as
    priced (the program is not under-priced on their account), and says so, naming the op. Where the model is under
    the op's HBM time (a copy), the bytes win and nothing is said of the model."""
    conv, copy = 3e7, 1 << 26
    pts = [(x, {"k": int(1e6 * x), "fusion.1": 0, "copy.5": 0}, {"fusion.1": int(1e6 * x), "copy.5": int(copy * x)})
           for x in (1 / 64, 1 / 32, 1 / 16)]
    ls = lines(pts)
    for ln in ls[1:]:
        ln["point"]["zero_cycle_model"] = {"fusion.1": int(conv * ln["point"]["x"]), "copy.5": 10}
        ln["point"]["zero_cycle_dma"] = {"fusion.1": "REMOTE", "copy.5": "LOCAL"}
    e = _fit(BASE, ls, load_task("8p_GEMM"), V5E, "full", IO)
    by_copy = copy / V5E.device_hbm_bytes_per_s * V5E.clock
    assert e.fit["cycles_full"] == pytest.approx(1e6 + conv + by_copy, rel=1e-3)
    assert e.static_cycles_ms == pytest.approx((1e6 + conv) / V5E.clock * 1e3, rel=1e-3)
    assert e.under_priced is None, e.under_priced
    line = next(x for x in e.limits if "cost model" in x)
    assert "fusion.1" in line and "copy.5" not in line, line
    assert "DMA reaches HBM (REMOTE)" in line, line  # what the profile says of the op filled, read from it
    assert e.fit["points"][-1]["zero_cycle_model_ops"] == ["fusion.1"]
    last = e.fit["points"][-1]
    assert e.uncertainty["cost_model_share"] == pytest.approx(
        last["zero_cycle_model_cycles"] / (last["cycles"] + last["zero_cycle_fill_cycles"]))
    # Where the profile names another DMA type for the op (or none), the line says that, not that it reaches HBM.
    for ln in ls[1:]:
        ln["point"]["zero_cycle_dma"] = {"fusion.1": "LOCAL"}
    local = next(x for x in _fit(BASE, ls, load_task("8p_GEMM"), V5E, "full", IO).limits if "cost model" in x)
    assert "reaches HBM" not in local and "DMA type for them: LOCAL" in local, local
    # Without the model's figures the same profile is under its FLOP floor: the fill is what prices the work.
    bare = _fit(BASE, lines(pts), load_task("8p_GEMM"), V5E, "full", IO)
    assert bare.under_priced and not any("cost model" in x for x in bare.limits)


def test_cycles_that_fall_with_the_work_are_scaled_not_extrapolated():
    pts = [(1 / 64, {"k": 900_000}, {}), (1 / 32, {"k": 500_000}, {}), (1 / 16, {"k": 800_000}, {})]
    e = _fit(BASE, lines(pts), load_task("8p_GEMM"), V5E, "full", IO)
    assert e.fit["cycles_full"] == pytest.approx(800_000 * 16)
    assert e.static_cycles_ms > 0 and any("proportion" in x for x in e.limits)


def test_blockspec_bytes_raise_the_memory_floor_and_a_low_declared_cost_is_named():
    spec = 30 * IO
    call = {"name": "k", "grid": [64, 224, 64], "parallel": [True, True, False], "declared_bytes": 1}
    pts = [(x, {"k": int(3e7 * x)}, {}) for x in (1 / 64, 1 / 32, 1 / 16)]
    e = _fit(BASE, lines(pts, spec_bytes=spec, calls=[call]), load_task("8p_GEMM"), V5E, "full", IO)
    assert e.own_floor_ms == pytest.approx(spec / V5E.device_hbm_bytes_per_s * 1e3)  # floors: the task's (issue 29)
    assert e.fit["hbm_bytes_source"] == "block specs and grid"
    assert any("cost_estimate declares" in x for x in e.limits)
    assert e.bound == "memory"


def test_the_estimate_states_what_its_error_depends_on():
    pts = [(x, {"body": int(1e6 * x), "copy": 0}, {"copy": int((1 << 24) * x)}) for x in (1 / 16, 1 / 8, 1 / 4)]
    loops = [{"name": "while", "trip_count": 4, "why": None}]
    e = _fit(BASE, lines(pts, trips={"body": 4}, loops=loops), load_task("8p_GEMM"), V5E, "full", IO)
    u = e.uncertainty
    assert u["extrapolation"] == pytest.approx(4.0) and u["fit_max_residual"] < 1e-4
    fill = (1 << 22) / V5E.device_hbm_bytes_per_s * V5E.clock
    assert u["zero_cycle_fill_share"] == pytest.approx(fill / (4 * 250_000 + fill), rel=1e-3)
    assert u["loop_trips_share"] == pytest.approx(3 * 250_000 / (4 * 250_000 + fill), rel=1e-3)
    assert u["decided_by"] == "roofline floor"  # 1e6 cycles at full size is far under a 19.5 ms GEMM


def test_a_crash_without_a_fatal_line_names_its_signal_not_the_crash_handlers_noise():
    """11p's baseline: libtpu dies with only its crash handler's lines on stderr. The error names the signal."""
    from maxkernel.harness.estimate.estimator import _crash
    from maxkernel.settings import get_settings

    stderr = ("E1205 08:27:48.623791      41 coredump_hook.cc:415] RAW: Cannot send fingerprint to Coroner: "
              "[NOT_FOUND] stat failed on crash reporting socket\n"
              "E1205 08:27:48.623793      41 coredump_hook.cc:467] RAW: Dumping core locally.\n"
              "E1205 08:27:49.205308      41 process_state.cc:708] RAW: Raising signal 11 with default behavior\n")
    e = _crash(BASE, stderr, [{"starting": {"M": 8}}], get_settings())
    assert e.stage == "abort" and "killed by signal 11 (SIGSEGV" in e.error and "no message from libtpu" in e.error
    assert "Coroner" not in e.error and "while profiling {'M': 8}" in e.error


def test_the_same_cycles_at_every_size_are_a_fixed_cost_not_scaled_by_one_over_x():
    """rw_fused_linear_cross_entropy's baseline on v6e at 4, 8 and 16 of 8192 tokens: 2.88 M cycles each (the
    1 GB head streamed forward and back). Scaled in proportion that was 512x: 841 ms. Kept as a fixed cost, the FLOP
    floor decides, and under_priced says the sizes were too small."""
    v6e = chips.get("v6e")
    task = load_task("rw_fused_linear_cross_entropy")
    pts = [(x, {"f": c}, {}) for x, c in ((4 / 8192, 2880804), (8 / 8192, 2875839), (16 / 8192, 2876607))]
    e = _fit({**BASE, "chip": "v6e"}, lines(pts), task, v6e, "full", 1 << 30)
    assert e.fit["cycles_full"] == 2876607 and "fixed cost" in e.fit["how"]
    assert e.estimated_ms == pytest.approx(e.floors["compute_ms"]) and e.estimated_ms < 100
    assert "too small to be compute-bound" in e.under_priced


def test_a_convex_profile_under_the_floor_names_its_rising_cost():
    """19k's baseline on v6e: each added 128 rows still costs more at 512 than at 256 (the 4x wider MXU needs more
    rows to be busy), so the sizes are too small, not a profile that misses work."""
    v6e = chips.get("v6e")
    task = load_task("19k_Matmul_Subtract_Multiply_ReLU")
    pts = [(x, {"f": c}, {}) for x, c in ((1 / 32, 20000), (1 / 16, 30000), (1 / 8, 60000))]
    e = _fit({**BASE, "chip": "v6e"}, lines(pts), task, v6e, "full", 2 * (4096 * 8192 * 2 + 8192 * 8192))
    assert "two largest" in e.fit["how"] and "still rising" in e.under_priced, e.under_priced


def _with_sorts(pts, sort_cycles):
    """`lines` whose points each hold a sort op of the given cycles beside their kernel op."""
    out = lines(pts)
    for ln, s in zip(out[1:], sort_cycles):
        ln["point"]["ops"]["sort.3"] = s
        ln["point"]["sort_ops"] = ["sort.3"]
    return out


def test_a_sort_outside_the_kernels_is_priced_at_full_size_not_extrapolated():
    """rw_lightning_indexer's decode kernel on v5e: its top-k stays XLA's. Profiled at 2, 4 and 8 of 32 sequences and
    8192 of 65536 keys, the sort's cycles rode the line up 128 times (9.8 ms), where the same sort profiled at full
    size is 1.65 ms. With the program around the kernels profiled at full size (the glue point), the shrunk sizes'
    sorts leave the line and the full-size sort is added once."""
    xs = (1 / 64, 1 / 32, 1 / 16)
    pts = [(x, {"k": int(1000 + 3e7 * x)}, {}) for x in xs]
    sorts = [int(2e6 * x * 64) for x in xs]  # a sort extrapolated with the rest: 128 M cycles at x = 1
    glue = {"point": {"glue": True, "dims": "full", "x": 1.0, "tiles": None, "ops": {"sort.1": 2_479_593, "copy": 5},
                      "sort_ops": ["sort.1"], "zero_cycle_bytes": {}, "compile_s": 1.0, "trips": {}, "loops": []}}
    task = load_task("8p_GEMM")
    apart = _fit(BASE, _with_sorts(pts, sorts) + [glue], task, V5E, "full", IO)
    assert apart.fit["cycles_full"] == pytest.approx(1000 + 3e7 + 2_479_593)
    assert any("sort(s) outside the kernels priced once at full size" in x for x in apart.limits)
    assert len(apart.fit["points"]) == 3  # the glue is not a size on the line
    # without the glue point (a pallas_call inside a loop, or the glue failed) the sorts stay on the line
    along = _fit(BASE, _with_sorts(pts, sorts), task, V5E, "full", IO)
    assert along.fit["cycles_full"] == pytest.approx(1000 + 3e7 + 2e6 * 64, rel=1e-6)


def test_xla_around_the_kernel_is_named_with_its_layout_copies():
    """rw_mhc_stream_mixing's first kernel on v5e at 64 of 4096 tokens (the profile's figures): it viewed the
    [tokens, 4, C] streams as [tokens, 4C], and XLA's relayouts of the streams in and out (copy.3, reshape.6) with
    phi's preparation cost more than the kernel (name.1) itself. The estimate names them; a kernel whose XLA is a
    sliver gets no such line."""
    ops = {"name.1": 31023, "reshape.6": 20578, "copy.2": 7560, "pad.4": 5352, "slice.0": 5329, "copy.3": 2251,
           "bitcast.8": 0}
    pts = [(x, {n: int(c * x * 64) for n, c in ops.items()}, {}) for x in (1 / 64, 1 / 32, 1 / 16)]
    body = lines(pts, calls=[{"name": "pallas_call", "grid": [64], "parallel": [True]}])
    for ln in body[1:]:
        ln["point"]["kernel_ops"] = ["name.1"]
    e = _fit(BASE, body, load_task("8p_GEMM"), V5E, "full", IO)
    out = e.fit["outside_kernels"]
    assert out["share"] == pytest.approx(1 - 31023 / sum(ops.values()), rel=1e-3)
    assert [n for n, _ in out["ops"]] == ["reshape.6", "copy.2", "pad.4", "slice.0", "copy.3"]
    line = next(x for x in e.limits if "outside its pallas_calls" in x)
    assert "reshape.6 29%" in line and "relayout" in line and "reshape.6, copy.2, copy.3 move data" in line
    slim = [(x, {"name.1": int(1e6 * x * 64), "fusion": int(1e4 * x * 64)}, {}) for x in (1 / 64, 1 / 32, 1 / 16)]
    body = lines(slim, calls=[{"name": "pallas_call", "grid": [64], "parallel": [True]}])
    for ln in body[1:]:
        ln["point"]["kernel_ops"] = ["name.1"]
    e = _fit(BASE, body, load_task("8p_GEMM"), V5E, "full", IO)
    assert e.fit["outside_kernels"]["share"] < 0.02 and not any("outside its pallas_calls" in x for x in e.limits)


def test_a_program_profiled_whole_says_why_it_was_not_shrunk():
    pts = [(1.0, {"fusion": int(1.5e8)}, {})]
    body = lines(pts)
    body[0]["plan"]["whole"] = "cannot shrink the program below the profiling budget: seq_len: a dot contracts it"
    e = _fit(BASE, body, load_task("8p_GEMM"), V5E, "full", IO)
    assert e.ok and e.fit["how"] == "profiled at full size" and e.fit["cycles_full"] == 1.5e8
    assert "profiled whole at full size, not shrunk (cannot shrink the program below the profiling budget: seq_len" \
        in " | ".join(e.limits)


@pytest.mark.parametrize("share, calls, grows", [
    (0.95, (), True),  # within the under-priced margin: not under_priced, yet the floor decided it
    (0.5, (), True),  # under-priced
    (1.05, (), False),  # the profile decided: nothing to re-profile
    (0.95, ({"name": "k", "grid": [8], "parallel": [True]},), False),  # a kernel: its tiles are its steady state
])
def test_an_xla_program_under_its_floor_is_profiled_again_at_larger_sizes(share, calls, grows):
    """_grows decides the second profile at sizes GROW times larger (the integration test in test_cli_estimate.py
    runs it): an XLA program fitted on shrunk sizes whose profile reads under the FLOP floor, by any margin."""
    from maxkernel.harness.estimate.estimator import _grows

    task = load_task("8p_GEMM")
    probe = _fit(BASE, lines([(x, {"k": int(3e7 * x)}, {}) for x in (1 / 64, 1 / 32, 1 / 16)]), task, V5E, "full", IO)
    cycles = share * probe.floors["compute_ms"] / 1e3 * V5E.clock
    pts = [(x, {"k": int(cycles * x)}, {}) for x in (1 / 64, 1 / 32, 1 / 16)]
    e = _fit({**BASE, "program": "baseline"}, lines(pts, calls=calls), task, V5E, "full", IO)
    assert e.ok and (e.under_priced is not None) == (share < 0.9)
    assert _grows(e) is grows
    assert not _grows(e.model_copy(update={"data_dependent": True}))  # the declared work floors it: size cannot help
