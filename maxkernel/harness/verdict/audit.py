"""FLOP census of an exported StableHLO module: how much work its live Pallas kernels do versus the XLA around them."""

import base64
import json
import math
import re
import threading

__all__ = ["audit_module", "MAX_LOWERED_BYTES", "AUDIT_TIMEOUT_S"]

MAX_LOWERED_BYTES = 64 << 20  # the candidate's lowering the judge reads for its census
AUDIT_TIMEOUT_S = 90.0  # honest modules take milliseconds unloaded; a hostile nesting can take hours

# Caps keep a hostile module from buying unbounded work in the trusted process.
MAX_TEXT = 64 << 20
MAX_CUSTOM_CALLS = 200
MAX_BODY = 16 << 20
# MLIR's text parser recurses per bracket level: ~10k nested regions overflow the C stack instead of raising.
MAX_NESTING = 256
STACK = 1 << 30

MOSAIC_PREFIX = "stable_mosaic."
ALLOWED_TARGETS = {"tpu_custom_call", "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"}
ELEMENTWISE = {f"stablehlo.{n}" for n in (
    "add subtract multiply divide exponential log tanh logistic sqrt rsqrt maximum minimum negate abs power "
    "select compare and or xor not sine cosine tan clamp remainder floor ceil round_nearest_afz "
    "round_nearest_even sign exponential_minus_one log_plus_one cbrt atan2 is_finite popcnt "
    "count_leading_zeros shift_left shift_right_arithmetic shift_right_logical reduce_precision").split()}
ELEMENTWISE |= {f"chlo.{n}" for n in (
    "erf erfc erf_inv lgamma digamma tan sinh cosh asin acos atan asinh acosh atanh square is_inf is_neg_inf "
    "is_pos_inf next_after polygamma zeta bessel_i1e").split()}
ZERO_FLOP = {f"stablehlo.{n}" for n in (
    "constant broadcast_in_dim broadcast reshape transpose slice dynamic_slice dynamic_update_slice concatenate "
    "pad iota convert bitcast_convert gather scatter reverse copy optimization_barrier get_tuple_element tuple "
    "real imag complex after_all create_token partition_id replica_id get_dimension_size dynamic_broadcast_in_dim "
    "dynamic_reshape dynamic_iota dynamic_pad dynamic_gather real_dynamic_slice return").split()}
ZERO_FLOP |= {"func.return", "sdy.sharding_constraint"}
# Ops whose result i is operand i of each region's terminator.
PER_RESULT = {"stablehlo.case", "stablehlo.if", "scf.if", "scf.for", "scf.index_switch", "scf.execute_region"}
CONTAINERS = {"func.func", "builtin.module"}
# Mosaic casts and constants move or reinterpret data; they are not arithmetic.
MOSAIC_FREE = {f"arith.{n}" for n in (
    "constant extf truncf extsi extui trunci sitofp uitofp fptosi fptoui index_cast index_castui bitcast").split()}
# A cost: outside flops, outside contraction flops, Pallas light, Pallas heavy, contractions + Pallas calls seen.
NOTHING = (0, 0, 0, 0, 0)


class Op:
    __slots__ = ("name", "ir", "operands", "results", "regions", "parent")

    def __init__(self, name, ir_op, operands, parent):
        self.name, self.ir, self.operands, self.parent = name, ir_op, operands, parent

    def attr(self, key):
        attrs = self.ir.attributes
        return str(attrs[key]) if key in attrs else None

    def nested(self):
        for region in self.regions:
            for _, ops in region:
                for op in ops:
                    yield op
                    yield from op.nested()


class Graph:
    """A Python copy of one parsed module: ops with integer value ids, so liveness is plain set arithmetic."""

    def __init__(self, module, strip=""):
        self.module = module  # the ops below are only valid while their module is alive
        self.ids, self.values, self.defs, self.ops = {}, [], [], []
        self.top = [self.convert(op, None, strip) for op in module.body.operations]

    def vid(self, value):
        i = self.ids.get(value)
        if i is None:
            i = self.ids[value] = len(self.values)
            self.values.append(value)
            self.defs.append(None)
        return i

    def define(self, values, where):  # defs: ("res", op, i) or ("arg", op, region, i)
        ids = tuple(self.vid(v) for v in values)
        for i, v in enumerate(ids):
            self.defs[v] = (*where, i)
        return ids

    def convert(self, ir_op, parent, strip):
        oper = ir_op.operation
        name = oper.name[len(strip):] if strip and oper.name.startswith(strip) else oper.name
        op = Op(name, oper, tuple(self.vid(v) for v in oper.operands), parent)
        op.results = self.define(oper.results, ("res", op))
        op.regions = [[(self.define(b.arguments, ("arg", op, ri)), [self.convert(o, op, strip) for o in b.operations])
                       for b in region.blocks] for ri, region in enumerate(oper.regions)]
        self.ops.append(op)
        return op

    def shape(self, vid):
        """Dims of a tensor/vector value (dynamic dims as 1), or None for tokens, memrefs, scalars."""
        m = re.match(r"(?:tensor|vector)<((?:(?:\d+|\?)x)*)", str(self.values[vid].type))
        return None if m is None else [int(d) if d != "?" else 1 for d in m.group(1).split("x")[:-1]]

    def elements(self, vid):
        dims = self.shape(vid)
        return 0 if dims is None else math.prod(dims)


def terminators(region):
    return [ops[-1] for _, ops in region if ops and ops[-1].name.endswith(("yield", "return"))]


def int_list(text):
    return [int(t) for t in re.findall(r"-?\d+", text or "")]


def liveness(g, roots, callee_of):
    """Ops whose results reach a root, walking back through branches, loops and (context-free) calls."""
    sites = {}
    for call, func in callee_of.items():
        sites.setdefault(func, []).append(call)
    live_ops, live_vals, work = set(), set(), []

    def mark(is_op, x):
        seen = live_ops if is_op else live_vals
        if x not in seen:
            seen.add(x)
            work.append((is_op, x))

    def carried(op, ri, i):  # operand i of a region's terminator feeds result / iter arg i
        for t in terminators(op.regions[ri]) if ri < len(op.regions) else ():
            if i < len(t.operands):
                mark(False, t.operands[i])

    for r in roots:
        mark(True, r)
    while work:
        is_op, x = work.pop()
        if is_op:
            op, func = x, callee_of.get(x)
            if op.parent is not None:
                mark(True, op.parent)
            if op.name in CONTAINERS:
                continue
            if func is not None:  # only the arguments the callee uses
                args = func.regions[0][0][0] if func.regions and func.regions[0] else ()
                used = [v for a, v in zip(args, op.operands) if a in live_vals]
            elif op.name == "stablehlo.while":  # operands flow in through block arguments; the condition decides
                used = [v for t in terminators(op.regions[0]) for v in t.operands] if op.regions else []
            else:
                used = op.operands[:3] if op.name == "scf.for" else op.operands  # inits flow via iter args
                if op.regions and op.name not in PER_RESULT:  # reducers, scf.while, unknown: all of it
                    for inner in op.nested():
                        mark(True, inner)
            for v in used:
                mark(False, v)
            continue
        d = g.defs[x]
        if d is None:
            continue
        if d[0] == "res":
            op, i = d[1], d[2]
            mark(True, op)
            func = callee_of.get(op)
            if func is not None:
                carried(func, 0, i)
            elif op.name in PER_RESULT:
                for ri in range(len(op.regions)):
                    carried(op, ri, i)
            elif op.name == "stablehlo.while":
                carried(op, 1, i)
            continue
        owner, ai = d[1], d[3]
        if owner.name == "func.func":
            for call in sites.get(owner, ()):
                if call in live_ops and ai < len(call.operands):
                    mark(False, call.operands[ai])
            continue
        mark(True, owner)
        loop = {"stablehlo.while": (0, 1), "scf.for": (1, 0)}.get(owner.name)  # (induction args, body region)
        if loop and ai >= loop[0]:
            k = ai - loop[0]
            init = k + (3 if owner.name == "scf.for" else 0)
            if init < len(owner.operands):
                mark(False, owner.operands[init])
            carried(owner, loop[1], k)
    return live_ops


# ---- inside Pallas: Mosaic kernels ------------------------------------------------------------------

def mosaic_const(g, v, depth=0):
    """Integer value of a scalar built from constants by add/sub/mul/casts, else None."""
    d = g.defs[v]
    if d is None or d[0] != "res" or depth > 64:
        return None
    op = d[1]
    if op.name == "arith.constant":
        m = re.fullmatch(r"(-?\d+) : (?:i\d+|index)", op.attr("value") or "")
        return int(m.group(1)) if m else None
    if op.name in ("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui") and op.operands:
        return mosaic_const(g, op.operands[0], depth + 1)
    if op.name in ("arith.addi", "arith.subi", "arith.muli") and len(op.operands) == 2:
        a, b = (mosaic_const(g, u, depth + 1) for u in op.operands)
        if a is None or b is None:
            return None
        return a + b if op.name == "arith.addi" else a - b if op.name == "arith.subi" else a * b
    return None


def mosaic_op_flops(g, op):
    n = op.name
    if n == "tpu.matmul" and len(op.operands) >= 2 and op.results:
        lhs = g.shape(op.operands[0]) or []
        m = re.match(r"#tpu\.dot_dimension_numbers<\[([^\]]*)\]", op.attr("dimension_numbers") or "")
        dims = int_list(m.group(1)) if m else []
        if not dims and lhs:  # no dimension numbers: the old form contracts lhs's last dim (first if transposed)
            dims = [0 if op.attr("transpose_lhs") == "true" else len(lhs) - 1]
        return 2 * g.elements(op.results[0]) * math.prod(lhs[d] for d in dims if 0 <= d < len(lhs))
    if n in ("vector.multi_reduction", "vector.reduction") and op.operands:
        return g.elements(op.operands[0])
    if not op.results or not str(g.values[op.results[0]].type).startswith("vector<"):
        return 0  # scalars are index math
    if n == "vector.fma":
        return 2 * g.elements(op.results[0])
    return g.elements(op.results[0]) if n.startswith(("arith.", "math.")) and n not in MOSAIC_FREE else 0


def mosaic_cost(g, ops, live, heavy):
    total = 0
    for op in (op for op in ops if op in live):
        if not op.regions:
            total += mosaic_op_flops(g, op)
            continue
        costs = [sum(mosaic_cost(g, body, live, heavy) for _, body in region) for region in op.regions]
        if op.name in ("scf.if", "scf.index_switch"):  # one branch runs: light for credit, heavy for the bound
            total += max(costs) if heavy else min(costs)
        elif op.name == "scf.for":  # a trip count that is not a constant counts once
            lb, ub, step = (mosaic_const(g, v) for v in op.operands[:3]) if len(op.operands) >= 3 else (None,) * 3
            trips = 1 if None in (lb, ub, step) or step <= 0 else max(0, -(-(ub - lb) // step))
            total += trips * costs[0]
        elif op.name == "scf.while" and not heavy:  # the after region may never run
            total += costs[0]
        else:
            total += sum(costs)
    return total


def kernel_flops(body, ctx, ir):
    """(light, heavy) FLOPs of one serialized Mosaic module: its entry func's body times its grid."""
    with ctx:
        g = Graph(ir.Module.parse(body), MOSAIC_PREFIX)
    roots = [op for op in g.ops if op.name == "func.return" or "atomic" in op.name or (
        not op.results and not op.regions and op.name not in ("scf.yield", "scf.condition"))]
    live = liveness(g, roots, {})
    funcs = [op for op in g.top if op.name == "func.func"]
    # Index-map funcs have no iteration_bounds; if several funcs claim a grid, credit the smallest.
    entries = [f for f in funcs if f.attr("iteration_bounds") is not None] or funcs
    light, heavy, facts = [0], [0], []
    for f in entries:
        bounds = int_list((f.attr("iteration_bounds") or "").partition(":")[2])
        grid = math.prod(b if b >= 0 else 1 for b in bounds)
        body_ops = [op for _, ops in (f.regions[0] if f.regions else []) for op in ops]
        light.append(grid * mosaic_cost(g, body_ops, live, False))
        heavy.append(grid * mosaic_cost(g, body_ops, live, True))
        blocks = [int_list(w) for w in re.findall(r"window_bounds = array<i64(?::\s*([^>]*))?>", f.attr("window_params") or "")]
        facts.append({"name": (f.attr("sym_name") or "").strip('"'), "grid": bounds, "blocks": blocks})
    return min(light[1:] or light), max(heavy), facts


# ---- outside Pallas: the StableHLO around the custom calls -------------------------------------------

class Census:
    def __init__(self, g, ctx, ir):
        self.g, self.ctx, self.ir = g, ctx, ir
        self.funcs = {self.string(op, "sym_name"): op for op in g.top if op.name == "func.func"}
        self.callee_of = {}
        for op in g.ops:
            key = {"func.call": "callee", "stablehlo.composite": "decomposition"}.get(op.name)
            if key and not (op.name == "stablehlo.composite" and self.string(op, "name") in ELEMENTWISE):
                self.callee_of[op] = self.funcs[ir.FlatSymbolRefAttr(op.ir.attributes[key]).value]
        self.live, self.unknown, self.opaque, self.pallas = set(), {}, set(), set()
        self.func_memo, self.kernel_memo, self.busy = {}, {}, set()

    def string(self, op, key):
        return self.ir.StringAttr(op.ir.attributes[key]).value if key in op.ir.attributes else ""

    def note_unknown(self, op, name):
        self.unknown.setdefault(op, {"op": name, "elements": sum(self.g.elements(v) for v in op.results)})

    def kernel(self, op):
        raw = self.ir.StringAttr(op.ir.attributes["backend_config"]).value_bytes
        body = json.loads(raw)["custom_call_config"]["body"]
        if len(body) > MAX_BODY * 4 // 3 + 4:
            raise ValueError("a Mosaic body is over 16 MiB")
        if body not in self.kernel_memo:
            self.kernel_memo[body] = kernel_flops(base64.b64decode(body, validate=True), self.ctx, self.ir)
        return self.kernel_memo[body][:2]

    def kernel_facts(self, op):
        """Name, grid and block shapes of each entry func of the Mosaic module a custom call carries."""
        self.kernel(op)
        body = json.loads(self.ir.StringAttr(op.ir.attributes["backend_config"]).value_bytes)["custom_call_config"]["body"]
        return self.kernel_memo[body][2]

    def func_cost(self, func):  # a callee counts as if inlined at each call, computed once
        if func in self.busy:
            raise ValueError("recursive function calls")
        if func not in self.func_memo:
            self.busy.add(func)
            self.func_memo[func] = self.region_cost(func.regions[0]) if func.regions else NOTHING
            self.busy.discard(func)
        return self.func_memo[func]

    def region_cost(self, region):
        total = NOTHING
        for op in (op for _, ops in region for op in ops if op in self.live):
            total = tuple(a + b for a, b in zip(total, self.op_cost(op)))
        return total

    def op_cost(self, op):
        g, n = self.g, self.string(op, "name") if op.name == "stablehlo.composite" else op.name
        if op.name in ("stablehlo.case", "stablehlo.if", "stablehlo.while"):
            costs = [self.region_cost(r) for r in op.regions] or [NOTHING]
            if op.name != "stablehlo.while":
                # One branch runs: an attacker would hide XLA work in the heavy one, Pallas work in the light one.
                return tuple((min if k == 2 else max)(c[k] for c in costs) for k in range(5))
            total = tuple(map(sum, zip(*costs)))  # trip count unknown here: counted once, flagged if it hides work
            if total[4]:
                self.opaque.add(op)
            return total
        func = self.callee_of.get(op)
        if n == "chlo.top_k" and op.operands and (op.name == "chlo.top_k" or func is not None and _plain_top_k(func)):
            # A selection: each input meets about log2(k) comparisons. The CHLO op itself (what .lower() prints),
            # or its composite form (jax.export) where the decomposition is the plain sort-and-slice one: a
            # composite is named by whoever lowered it, and XLA runs what it decomposes to.
            m = re.search(r"\bk = (\d+)", op.attr("composite_attributes") or op.attr("k") or "") or \
                re.match(r"\s*(\d+)", op.attr("k") or "")
            if m:
                return (g.elements(op.operands[0]) * top_k_depth(int(m.group(1))), 0, 0, 0, 0)
        if func is not None:
            if op.name == "stablehlo.composite":  # e.g. chlo.ragged_dot: no formula, its decomposition as a bound
                self.note_unknown(op, n)
            return self.func_cost(func)
        if op.name == "stablehlo.custom_call":
            if self.string(op, "call_target_name") != "tpu_custom_call":
                return NOTHING  # allow-listed no-ops; anything else is reported as forbidden
            self.pallas.add(op)
            return (0, 0, *self.kernel(op), 1)
        for inner in op.nested():  # reducer / comparator bodies must be plain scalar math
            if inner.name not in ELEMENTWISE and inner.name not in ZERO_FLOP:
                self.note_unknown(op, f"{op.name}/{inner.name}")
        out = g.elements(op.results[0]) if op.results else 0
        if op.name in ("stablehlo.dot_general", "stablehlo.dot") and len(op.operands) == 2:
            lhs = g.shape(op.operands[0]) or []
            m = re.search(r"lhs_contracting_dimensions = \[([^\]]*)\]", op.attr("dot_dimension_numbers") or "")
            dims = int_list(m.group(1)) if m else [len(lhs) - 1] if op.name == "stablehlo.dot" and lhs else []
            f = 2 * out * math.prod(lhs[d] for d in dims if 0 <= d < len(lhs))
            return (f, f, 0, 0, 1)
        if op.name == "stablehlo.convolution" and len(op.operands) == 2:
            kernel = g.shape(op.operands[1]) or [1]
            m = re.search(r"\]x\[([^\]]*)\]", op.attr("dimension_numbers") or "")
            spec = [s.strip() for s in m.group(1).split(",")] if m else []
            features = kernel[spec.index("o")] if "o" in spec and len(spec) == len(kernel) else kernel[-1]
            f = 2 * out * math.prod(kernel) // max(features, 1)
            return (f, f, 0, 0, 1)
        if n in ELEMENTWISE or (n.startswith("chlo.broadcast_") and "stablehlo." + n[15:] in ELEMENTWISE):
            return (out, 0, 0, 0, 0)
        if op.name == "stablehlo.reduce":  # inputs then as many init values; the body is the reducer
            return (sum(g.elements(v) for v in op.operands[: len(op.operands) // 2]), 0, 0, 0, 0)
        if op.name not in ZERO_FLOP:
            self.note_unknown(op, n)
        return NOTHING


_TOP_K_OPS = {"stablehlo.iota", "stablehlo.sort", "stablehlo.slice", "stablehlo.compare", "stablehlo.return",
              "func.return"}


def _plain_top_k(func) -> bool:
    """Whether a top_k composite's decomposition is what JAX lowers it to: an iota, one sort whose comparator only
    compares, and slices."""
    for region in func.regions:
        for _, ops in region:
            for op in ops:
                if op.name not in _TOP_K_OPS or any(inner.name not in _TOP_K_OPS for inner in op.nested()):
                    return False
    return True


def top_k_depth(k: int) -> int:
    """Comparisons per input element a top-k selection is counted at: log2(k), rounded up (at least one). Counted,
    not refused: a task whose answer is a top-k (rw_lightning_indexer) may leave the selection to XLA, and the
    comparisons weigh against the kernel's share like any other work outside it."""
    return max(1, math.ceil(math.log2(max(k, 1))))


def max_nesting(text):
    """The largest net rise of bracket depth over any stretch: an upper bound on how deep the parser recurses."""
    import numpy as np

    step = np.zeros(256, np.int8)
    step[list(b"{[(<")] = 1
    step[list(b"}])>")] = -1
    data = np.frombuffer(text.encode("utf-8", "replace"), np.uint8)
    worst, level, low = 0, 0, 0
    for start in range(0, len(data), 1 << 22):
        depth = np.cumsum(step[data[start:start + (1 << 22)]], dtype=np.int64) + level
        lows = np.minimum(np.minimum.accumulate(depth), low)
        worst = max(worst, int((depth - lows).max()))
        level, low = int(depth[-1]), int(lows[-1])
    return worst


def audit(text):
    if not isinstance(text, str):
        raise TypeError("module text must be a str")
    if len(text) > MAX_TEXT:
        raise ValueError("module text is over 64 MiB")
    if max_nesting(text) > MAX_NESTING:
        raise ValueError(f"brackets nest deeper than {MAX_NESTING}")
    # Imported here so that importing this module stays cheap for the parent process.
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib import tpu
    from jax._src.lib.mlir import ir

    ctx = jmlir.make_ir_context()
    tpu.register_dialect(ctx)  # serialized Mosaic memrefs carry #tpu memory spaces that must be registered
    ctx.allow_unregistered_dialects = True
    with ctx:
        g = Graph(ir.Module.parse(text))
    census = Census(g, ctx, ir)
    calls = [op for op in g.ops if op.name == "stablehlo.custom_call"]
    if len(calls) > MAX_CUSTOM_CALLS:
        raise ValueError(f"{len(calls)} custom calls, over {MAX_CUSTOM_CALLS}")
    targets = [census.string(op, "call_target_name") for op in calls]
    main = census.funcs.get("main")
    if main is None:
        raise ValueError("no @main function")
    # Side effects run even when nothing reads them, so what feeds them is live work (a Pallas call's own
    # has_side_effect does not make it count: its output is what the census credits).
    effects = [op for op, t in zip(calls, targets) if t != "tpu_custom_call" and op.attr("has_side_effect") == "true"]
    effects += [op for op in g.ops if op.name in ("stablehlo.outfeed", "stablehlo.send")]
    roots = [t for r in main.regions for t in terminators(r)] + effects
    census.live = liveness(g, roots, census.callee_of)
    flops, contraction, light, heavy, _ = census.func_cost(main)
    total = light + flops
    kernels = [k for op, t in zip(calls, targets) if t == "tpu_custom_call" for k in census.kernel_facts(op)]
    return {
        # What the candidate's own trace must agree with (integrity.lowering_disagrees): every kernel, live or dead,
        # and the program's signature, which the judge holds against the task's inputs and outputs.
        "kernels": kernels,
        "signature": signature(main.attr("function_type") or ""),
        "pallas_calls": len(census.pallas),
        "dead_pallas_calls": sum(t == "tpu_custom_call" and op not in census.live for op, t in zip(calls, targets)),
        "pallas_flops": light,
        "pallas_flops_max": heavy,
        "outside_flops": flops,
        "outside_contraction_flops": contraction,
        "opaque_loops": len(census.opaque),
        "unknown_ops": list(census.unknown.values()),
        # A host callback or FFI target is forbidden wherever it sits, live or not: it may run for its effects.
        "forbidden": sorted({t for t in targets if t not in ALLOWED_TARGETS}),
        "total_flops": total,
        "pallas_share": round(light / total if total else 1.0 if census.pallas else 0.0, 4),
    }


def signature(function_type: str) -> dict:
    """{"inputs": [[dims..., dtype]...], "outputs": [...]} of an MLIR function type such as
    "(tensor<256x512xbf16>) -> tensor<256x384xbf16>"."""
    args, _, results = function_type.partition(") -> ")

    def tensors(text):
        return [[*(int(d) for d in dims.split("x") if d), dtype]
                for dims, dtype in re.findall(r"tensor<((?:\d+x)*)([^,>]+)", text)]

    return {"inputs": tensors(args), "outputs": tensors(results)}


def audit_or_error(text, box):
    try:
        box["result"] = audit(text)
    except Exception as e:  # hostile or malformed input is a verdict, not a crash
        box["result"] = {"error": " ".join(f"{type(e).__name__}: {e}".split())[:500]}


def audit_module(text: str, timeout: float | None = None) -> dict:
    """The FLOP census of exported StableHLO `text`, or {"error": ...}; never raises, whatever the text holds.

    With `timeout`, a census still running after that many seconds is an error (MLIR's time to free a deeply
    nested module grows with the square of its depth; the caller's process exits and takes the thread with it).
    """
    # MLIR frees a module recursively: a few hundred KiB of deeply nested Mosaic bytecode overflow an 8 MiB stack.
    # The census runs, and drops every IR object, on a thread with room for a 16 MiB body of it.
    box = {}
    try:
        old = threading.stack_size(STACK)
        try:
            worker = threading.Thread(target=audit_or_error, args=(text, box), name="audit_module", daemon=True)
            worker.start()
        finally:
            threading.stack_size(old)
        worker.join(timeout)
        if worker.is_alive():
            return {"error": f"the census took longer than {timeout:g} s", "timed_out": True}
    except Exception:  # no thread to be had (address-space limits): the same census on this stack
        box.clear()
        audit_or_error(text, box)
    return box.get("result") or {"error": "the census thread died"}
