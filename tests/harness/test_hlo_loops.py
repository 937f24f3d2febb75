"""Trip counts read from compiled HLO text: each op inside a while loop runs once per trip (hlo_loops)."""

import pytest

from maxkernel.harness.estimate import hlo_loops

pytestmark = pytest.mark.unit

# The shape of what libtpu prints for lax.map over 16 blocks: the counter copied in, stepped by an add of a
# constant, compared LT with a constant; no known_trip_count in the backend config.
MAP16 = """HloModule jit_workload

%body.1 (arg.0: (s32[], f32[16,8])) -> (s32[], f32[16,8]) {
  %one = s32[]{:T(128)} constant(1)
  %arg.0 = (s32[]{:T(128)}, f32[16,8]{1,0}) parameter(0)
  %gte.1 = s32[]{:T(128)} get-tuple-element(%arg.0), index=0
  %copy.4 = s32[]{:T(128)S(6)} copy(%gte.1), backend_config={"flag_configs":[]}
  %next = s32[]{:T(128)} add(%copy.4, %one), metadata={op_name="jit(workload)/while/body/add"}
  %gte.2 = f32[16,8]{1,0} get-tuple-element(%arg.0), index=1
  %fusion.28 = f32[16,8]{1,0} fusion(%gte.2, %copy.4), kind=kOutput, calls=%fused.3
  ROOT %tuple.14 = (s32[]{:T(128)}, f32[16,8]{1,0}) tuple(%next, %fusion.28)
}

%cond.2 (arg.3: (s32[], f32[16,8])) -> pred[] {
  %limit = s32[]{:T(128)} constant(16)
  %arg.3 = (s32[]{:T(128)}, f32[16,8]{1,0}) parameter(0)
  %gte.3 = s32[]{:T(128)} get-tuple-element(%arg.3), index=0
  ROOT %lt.2 = pred[]{:T(512)} compare(%gte.3, %limit), direction=LT, metadata={op_name="jit(workload)/while/cond/lt"}
}

ENTRY %main.9 (x.1: f32[16,8]) -> f32[16,8] {
  %zero = s32[]{:T(128)} constant(0)
  %x.1 = f32[16,8]{1,0} parameter(0)
  %copy.2 = s32[]{:T(128)} copy(%zero)
  %tuple.12 = (s32[]{:T(128)}, f32[16,8]{1,0}) tuple(%copy.2, %x.1)
  %while = (s32[]{:T(128)}, f32[16,8]{1,0}) while(%tuple.12), condition=%cond.2, body=%body.1, metadata={op_name="jit(workload)/while"}
  %out = f32[16,8]{1,0} get-tuple-element(%while), index=1
  ROOT %copy = f32[16,8]{1,0} copy(%out)
}
"""


def test_a_counter_loop_multiplies_the_ops_of_its_body_only():
    trips, loops = hlo_loops.op_trips(MAP16)
    assert [(lp["name"], lp["trip_count"]) for lp in loops] == [("while", 16)]
    assert trips["fusion.28"] == 16 and trips["next"] == 16
    assert "copy" not in trips and "copy.2" not in trips  # the entry's ops run once


def test_a_count_down_written_constant_first_is_read():
    text = (MAP16.replace("%limit = s32[]{:T(128)} constant(16)", "%limit = s32[]{:T(128)} constant(3)")
            .replace("compare(%gte.3, %limit), direction=LT", "compare(%limit, %gte.3), direction=LT")
            .replace("constant(1)\n", "constant(-2)\n").replace("%zero = s32[]{:T(128)} constant(0)",
                                                                "%zero = s32[]{:T(128)} constant(13)"))
    # 3 < i, i from 13 down by 2: 13, 11, 9, 7, 5 -> five trips
    assert hlo_loops.op_trips(text)[1][0]["trip_count"] == 5


def test_a_known_trip_count_in_the_backend_config_wins():
    text = MAP16.replace('body=%body.1, metadata', 'body=%body.1, backend_config={"known_trip_count":{"n":"7"}}, '
                                                   'metadata')
    assert hlo_loops.op_trips(text)[0]["fusion.28"] == 7


def test_nested_loops_multiply():
    inner = (MAP16.replace("%body.1", "%ibody").replace("%cond.2", "%icond").replace("%main.9", "%outer_body")
             .replace("ENTRY ", "").replace("constant(16)", "constant(5)"))
    # the outer loop's body is the inner program (its "entry" with a parameter tuple of its own); rename its ops
    for name in ("fusion.28", "next", "gte.1", "gte.2", "gte.3", "copy.4", "tuple.14", "lt.2", "limit", "one",
                 "arg.0", "arg.3", "zero", "x.1", "copy.2", "tuple.12", "out", "copy", "while"):
        inner = inner.replace(f"%{name} ", f"%i_{name} ").replace(f"%{name},", f"%i_{name},") \
            .replace(f"%{name})", f"%i_{name})")
    inner = inner.split("HloModule jit_workload\n", 1)[1]
    outer = MAP16.replace("%fusion.28 = f32[16,8]{1,0} fusion(%gte.2, %copy.4), kind=kOutput, calls=%fused.3",
                          "%fusion.28 = f32[16,8]{1,0} call(%gte.2), to_apply=%outer_body")
    outer = outer.replace("constant(16)", "constant(3)")
    trips, loops = hlo_loops.op_trips(outer + inner)
    assert sorted(lp["trip_count"] for lp in loops) == [3, 5]
    # the inner loop sits in a computation the outer loop's body calls: its body runs 5 times per call, 3 calls
    assert trips["i_fusion.28"] == 15 and trips["fusion.28"] == 3 and trips["i_copy.2"] == 3


def test_a_loop_whose_count_depends_on_data_is_named_not_guessed():
    text = MAP16.replace("%limit = s32[]{:T(128)} constant(16)",
                         "%limit = s32[]{:T(128)} get-tuple-element(%arg.3), index=1")
    trips, loops = hlo_loops.op_trips(text)
    assert loops[0]["trip_count"] is None and "constant" in loops[0]["why"]
    assert trips["fusion.28"] == -1  # inside a loop of unknown count: the caller must say so
