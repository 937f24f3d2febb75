"""Integrity checks on a traced candidate: where its FLOPs run (inside Pallas or in XLA) and forbidden escapes."""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field

__all__ = ["Census", "census", "judge", "judge_lowering", "pallas_kernels", "lowering_disagrees", "fingerprint",
           "fingerprint_differs", "priced_differs", "checked_prints", "eqn_flops", "MIN_PALLAS_SHARE", "MAX_OUTSIDE_CONTRACTION_SHARE",
           "MIN_WORK_RATIO", "MAX_UNKNOWN_ELEMENTS"]

# A candidate must do most of its arithmetic inside pallas_call, and its matmuls/convolutions almost entirely.
MIN_PALLAS_SHARE = 0.5
MAX_OUTSIDE_CONTRACTION_SHARE = 0.2
# A kernel doing less than this share of the baseline's arithmetic is returning precomputed data.
MIN_WORK_RATIO = 0.05
# An XLA op outside Pallas that the census has no FLOP formula for may hide any amount of work; only tiny ones pass.
MAX_UNKNOWN_ELEMENTS = 4096

_ELEMENTWISE = frozenset("""
add sub mul div rem max min neg abs sign exp exp2 log log1p expm1 tanh logistic sin cos tan atan2 sqrt rsqrt cbrt
pow integer_pow erf erfc erf_inv square floor ceil round nextafter select_n clamp eq ne lt le gt ge and or not xor
is_finite asin acos atan sinh cosh asinh acosh atanh
""".split())
_REDUCTIONS = frozenset("""
reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or argmax argmin cumsum cumprod cummax cummin
cumlogsumexp reduce_precision
""".split()) - {"reduce_precision"}
# Host escapes: arbitrary Python or native code that the harness cannot see into.
_FORBIDDEN = frozenset({"pure_callback", "io_callback", "debug_callback", "ffi_call", "custom_call"})


@dataclass
class Census:
    total_flops: float = 0.0
    pallas_flops: float = 0.0
    contraction_flops: float = 0.0
    outside_contraction_flops: float = 0.0
    pallas_calls: int = 0
    forbidden: list = field(default_factory=list)  # names of host-escape primitives found
    opaque_loops: int = 0  # while loops outside Pallas that contain a matmul/conv (trip count unknown)
    out_blocks: list = field(default_factory=list)  # per pallas_call output: {"array": shape, "block": shape}
    overhangs: list = field(default_factory=list)  # operands whose block is larger than the array in a dim (hints)

    @property
    def pallas_share(self) -> float:
        return self.pallas_flops / self.total_flops if self.total_flops else (1.0 if self.pallas_calls else 0.0)

    @classmethod
    def from_dict(cls, d: dict) -> "Census":
        """Read back what as_dict() wrote (e.g. from a sandbox result)."""
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    def as_dict(self) -> dict:
        d = asdict(self)
        d["pallas_share"] = round(self.pallas_share, 4)
        return d


def _size(aval) -> int:
    shape = getattr(aval, "shape", ())
    return int(math.prod(shape)) if shape else 1


def _jaxpr_of(obj):
    """The open Jaxpr inside `obj` (a Jaxpr or ClosedJaxpr), or None."""
    if hasattr(obj, "eqns"):
        return obj
    inner = getattr(obj, "jaxpr", None)
    return inner if inner is not None and hasattr(inner, "eqns") else None


def eqn_flops(eqn) -> tuple[float, float]:
    """(all FLOPs, contraction FLOPs) of one primitive application, not counting sub-jaxprs."""
    name = eqn.primitive.name
    out = _size(eqn.outvars[0].aval) if eqn.outvars else 0
    if name == "dot_general":
        (lc, _), _ = eqn.params["dimension_numbers"]
        lhs_shape = eqn.invars[0].aval.shape
        k = math.prod(lhs_shape[d] for d in lc) if lc else 1
        f = 2.0 * out * k
        return f, f
    if name == "ragged_dot_general":  # each row of lhs meets one group's matrix: a dot of its own shape
        (lc, _), _ = eqn.params["ragged_dot_dimension_numbers"].dot_dimension_numbers
        lhs_shape = eqn.invars[0].aval.shape
        f = 2.0 * out * (math.prod(lhs_shape[d] for d in lc) if lc else 1)
        return f, f
    if name == "conv_general_dilated":
        rhs = eqn.invars[1].aval.shape
        out_feature_dim = eqn.params["dimension_numbers"].rhs_spec[0]
        f = 2.0 * out * math.prod(rhs) / max(rhs[out_feature_dim], 1)
        return f, f
    if name in _ELEMENTWISE:
        return float(out), 0.0
    if name in _REDUCTIONS:
        return float(_size(eqn.invars[0].aval)), 0.0
    if name == "top_k":  # a selection: about log2(k) comparisons per input element
        from maxkernel.harness.verdict.audit import top_k_depth

        return float(_size(eqn.invars[0].aval) * top_k_depth(int(eqn.params.get("k") or 1))), 0.0
    return 0.0, 0.0


def _walk(jaxpr, c: Census, scale: float, in_pallas: bool) -> tuple[float, float]:
    """Add the FLOPs of `jaxpr` (times `scale`) to `c`; returns (flops, contraction flops) of this jaxpr."""
    total = contraction = 0.0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in _FORBIDDEN or name.endswith("_callback"):
            c.forbidden.append(name)
        if name == "pallas_call":
            c.pallas_calls += 1
            body = _jaxpr_of(eqn.params["jaxpr"])
            gm = eqn.params["grid_mapping"]
            grid = tuple(getattr(gm, "grid", ()) or ())
            c.out_blocks += _out_blocks(gm)
            c.overhangs += _overhangs(gm, eqn.params["jaxpr"])
            steps = math.prod(g for g in grid if isinstance(g, int)) if grid else 1
            f, k = _walk(body, c, scale * steps, True)
        elif name == "cond":
            parts = [_walk_probe(_jaxpr_of(b)) for b in eqn.params["branches"]]
            best = max(range(len(parts)), key=lambda i: parts[i][0])
            f, k = _walk(_jaxpr_of(eqn.params["branches"][best]), c, scale, in_pallas)
        elif name == "scan":
            f, k = _walk(_jaxpr_of(eqn.params["jaxpr"]), c, scale * eqn.params["length"], in_pallas)
        elif name == "while":
            f, k = _walk(_jaxpr_of(eqn.params["body_jaxpr"]), c, scale, in_pallas)
            f2, k2 = _walk(_jaxpr_of(eqn.params["cond_jaxpr"]), c, scale, in_pallas)
            f, k = f + f2, k + k2
            if k and not in_pallas:
                c.opaque_loops += 1
        else:
            f, k = eqn_flops(eqn)
            f, k = f * scale, k * scale
            for value in eqn.params.values():
                for sub in (value if isinstance(value, (tuple, list)) else (value,)):
                    inner = _jaxpr_of(sub)
                    if inner is not None:
                        sf, sk = _walk(inner, c, scale, in_pallas)
                        f, k = f + sf, k + sk
            # Leaf primitives are added here; sub-jaxpr calls were added by the recursive _walk.
            own_f, own_k = eqn_flops(eqn)
            c.total_flops += own_f * scale
            c.contraction_flops += own_k * scale
            if in_pallas:
                c.pallas_flops += own_f * scale
            else:
                c.outside_contraction_flops += own_k * scale
        total += f
        contraction += k
    return total, contraction


def _out_blocks(gm) -> list[dict]:
    """Array and block shapes of a pallas_call's outputs, to say which grid block an error sits in."""
    try:
        outs = gm.block_mappings[gm.num_inputs:gm.num_inputs + gm.num_outputs]
        return [{"array": [int(d) for d in bm.array_aval.shape], "block": [int(d) for d in bm.block_aval.shape]}
                for bm in outs]
    except (AttributeError, TypeError):
        return []


def _overhangs(gm, body) -> list[dict]:
    """The pallas_call's operands whose block is larger than the array in some dim: legal (the block is padded),
    but what the kernel reads there is padding (NaN under the strict interpreter), so a NaN output's hint names
    them. Blocks of the array's rank only (a squeezed dim is never larger)."""
    try:
        info = getattr(body, "debug_info", None)
        names = list(getattr(info, "arg_names", None) or ())[gm.num_index_operands:]
        found = []
        for i, bm in enumerate(gm.block_mappings[:gm.num_inputs + gm.num_outputs]):
            array = [int(d) for d in bm.array_aval.shape]
            block = [int(d) for d in bm.block_aval.shape]
            if len(array) == len(block) and any(b > a for a, b in zip(array, block)):
                found.append({"operand": names[i] if i < len(names) else f"operand {i}",
                              "kind": "input" if i < gm.num_inputs else "output", "array": array, "block": block})
        return found
    except (AttributeError, TypeError):
        return []


def _walk_probe(jaxpr) -> tuple[float, float]:
    """FLOPs of `jaxpr` without recording anything (to pick the heaviest cond branch)."""
    return _walk(jaxpr, Census(), 1.0, False) if jaxpr is not None else (0.0, 0.0)


def census(closed_jaxpr) -> Census:
    """Count where the FLOPs of a traced function run."""
    c = Census()
    _walk(_jaxpr_of(closed_jaxpr), c, 1.0, False)
    return c


def judge(c: Census, baseline_flops: float | None = None) -> str | None:
    """Why the candidate must be rejected, or None if its measured path does its work in Pallas."""
    if c.forbidden:
        return (f"host callbacks in the measured path ({', '.join(sorted(set(c.forbidden)))}): the work must be "
                f"visible to the harness; remove jax.debug/pure_callback/io_callback/FFI calls")
    if c.pallas_calls == 0:
        return "no pallas_call in the measured path: the kernel must be written with Pallas"
    if c.opaque_loops:
        return "a matmul/convolution inside an XLA while loop outside Pallas: move the loop into the kernel"
    if c.contraction_flops and c.outside_contraction_flops > MAX_OUTSIDE_CONTRACTION_SHARE * c.contraction_flops:
        share = c.outside_contraction_flops / c.contraction_flops
        return (f"{share:.0%} of matmul/convolution FLOPs run in XLA outside pallas_call "
                f"(at most {MAX_OUTSIDE_CONTRACTION_SHARE:.0%} allowed)")
    if c.pallas_share < MIN_PALLAS_SHARE:
        return (f"only {c.pallas_share:.0%} of the FLOPs run inside pallas_call (at least {MIN_PALLAS_SHARE:.0%} "
                f"required): a thin Pallas wrapper around XLA work is not a kernel")
    if baseline_flops and c.total_flops < MIN_WORK_RATIO * baseline_flops:
        return (f"the kernel does {c.total_flops:.3g} FLOPs where the task needs about {baseline_flops:.3g}: "
                f"outputs that are not computed from the inputs are not accepted")
    return None


def judge_lowering(audit: dict, meta: dict) -> str | None:
    """Why the candidate must be rejected, judged on the census of its TPU lowering (harness/verdict/audit.py), or None.

    Outside work is held against the task's own FLOPs (the baseline's), so Pallas work that never runs or whose
    result is thrown away buys nothing: the rules below do not depend on how much Pallas work is claimed.
    """
    base = float(meta.get("baseline_flops") or 0.0)
    base_k = float(meta.get("baseline_contraction_flops") or 0.0)
    if audit.get("forbidden"):
        return (f"host callbacks or foreign calls in the measured path ({', '.join(sorted(set(audit['forbidden'])))}): "
                "the work must be visible to the harness; remove jax.debug/pure_callback/io_callback/FFI calls")
    if not audit.get("pallas_calls"):
        if audit.get("dead_pallas_calls"):
            return (f"its {audit['dead_pallas_calls']} pallas_call(s) produce nothing that reaches an output (the "
                    "compiler removes them): the kernel must be written with Pallas")
        return "no pallas_call in the measured path: the kernel must be written with Pallas"
    if audit.get("opaque_loops"):
        return "a matmul/convolution inside an XLA while loop outside Pallas: move the loop into the kernel"
    heavy = [u for u in audit.get("unknown_ops") or [] if u.get("elements", 0) > MAX_UNKNOWN_ELEMENTS]
    if heavy:
        names = ", ".join(sorted({str(u.get("op")) for u in heavy}))
        return (f"XLA ops outside pallas_call whose work the census cannot count ({names}): do that work inside "
                "the kernel")
    outside_k = float(audit.get("outside_contraction_flops") or 0.0)
    limit_k = MAX_OUTSIDE_CONTRACTION_SHARE * (base_k or base)
    if outside_k > limit_k:
        share = outside_k / (base_k or base) if (base_k or base) else float("inf")
        return (f"matmul/convolution FLOPs outside pallas_call come to {share:.0%} of the task's "
                f"(at most {MAX_OUTSIDE_CONTRACTION_SHARE:.0%} allowed)")
    outside = float(audit.get("outside_flops") or 0.0)
    if base and outside > (1 - MIN_PALLAS_SHARE) * base:
        return (f"XLA outside pallas_call does {outside / base:.0%} of the task's FLOPs (at most "
                f"{1 - MIN_PALLAS_SHARE:.0%}): a thin Pallas wrapper around XLA work is not a kernel")
    done = float(audit.get("pallas_flops_max") or 0.0) + outside
    if base and done < MIN_WORK_RATIO * base:
        return (f"the kernel does {done:.3g} FLOPs where the task needs about {base:.3g}: "
                f"outputs that are not computed from the inputs are not accepted")
    return None


def _block(shape) -> list[int]:
    """A block shape with squeezed and element dims as 1 and unit dims dropped (Mosaic pads and prints them)."""
    return [int(d) for d in shape if isinstance(d, int) and not isinstance(d, bool) and d != 1]


def pallas_kernels(closed_jaxpr) -> list[dict]:
    """Every pallas_call of a traced program, in every branch and loop body: {name, grid, blocks}. What the
    kernels of its TPU lowering must be (lowering_disagrees)."""
    out: list[dict] = []

    def walk(jaxpr) -> None:
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "pallas_call":
                gm = eqn.params["grid_mapping"]
                debug = getattr(eqn.params.get("jaxpr"), "debug_info", None)
                blocks = [_block(getattr(d, "block_size", d) for d in (getattr(bm, "block_shape", ()) or ()))
                          for bm in getattr(gm, "block_mappings", ())]
                out.append({"name": str(getattr(debug, "func_src_info", "") or "").split(" at ")[0],
                            "grid": [int(g) if isinstance(g, int) else -1 for g in (getattr(gm, "grid", ()) or ())],
                            "blocks": blocks})
                continue
            for value in eqn.params.values():
                for sub in (value if isinstance(value, (tuple, list)) else (value,)):
                    inner = _jaxpr_of(sub)
                    if inner is not None:
                        walk(inner)

    walk(_jaxpr_of(closed_jaxpr))
    return out


def interpreted_calls(closed_jaxpr) -> list[str]:
    """The pallas_calls of a program traced outside the harness's interpreter context that still ask to be
    interpreted (their `interpret` is set): the kernel chose an interpreter, which lowers no Mosaic kernel for the
    TPU and runs unchecked by the strict one. A flag passed through from a parameter (idioms.py) ends up here."""
    out: list[str] = []

    def walk(jaxpr) -> None:
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "pallas_call":
                value = eqn.params.get("interpret")
                if value is not None and value is not False:
                    out.append(str(value)[:80])
                continue
            for value in eqn.params.values():
                for sub in (value if isinstance(value, (tuple, list)) else (value,)):
                    inner = _jaxpr_of(sub)
                    if inner is not None:
                        walk(inner)

    walk(_jaxpr_of(closed_jaxpr))
    return out


def lowering_disagrees(traced: list[dict], lowered: list[dict]) -> str | None:
    """Why the kernels of a TPU lowering are not the kernels of the program the candidate traced and ran, or None.

    Both lists come from the candidate's process (its trace, and the lowering it handed over), so a lowering swapped
    for another program's must also forge the trace's census to agree: the census the verdict counts is the
    lowering's, and this makes the two accounts one story or a rejection.
    """
    def key(k: dict) -> tuple:  # names are only shown: Mosaic may spell a lambda's or a partial's differently
        # A grid extent known only at run time (megablox's gmm: the tiles its group sizes need) is -1 in the trace
        # and MLIR's dynamic size (the least int64) in the lowering: both say "dynamic".
        return (tuple(-1 if g < 0 else g for g in k.get("grid") or [] if g != 1),)

    a = sorted(key(k) for k in traced)
    b = sorted(key(k) for k in lowered)
    if a != b:
        return (f"the TPU lowering handed to the judge holds {len(b)} kernel(s) {_names(lowered)}, but the program "
                f"the candidate traced and ran holds {len(a)} {_names(traced)}: the lowering is not the program that ran")
    blocks_a = sorted((key(k), tuple(map(tuple, (_block(x) for x in k.get("blocks") or [])))) for k in traced)
    blocks_b = sorted((key(k), tuple(map(tuple, (_block(x) for x in k.get("blocks") or [])))) for k in lowered)
    for (ka, ba), (kb, bb) in zip(blocks_a, blocks_b):
        if len(ba) == len(bb) and ba != bb:  # operands in HBM (memory_space ANY) have no window: counts may differ
            return (f"a kernel with grid {list(ka[0]) or '()'} runs with blocks {list(map(list, ba))} in the candidate's trace but "
                    f"{list(map(list, bb))} in the TPU lowering handed to the judge: the lowering is not the program "
                    "that ran")
    return None


def _names(kernels: list[dict]) -> str:
    return "(" + ", ".join(f"{k.get('name') or '?'} grid {list(k.get('grid') or []) or '()'}" for k in kernels) + ")"


_INTERPRET_PARAM = re.compile(r"interpret=(?:False|None|True|InterpretParams\([^\n]*?\))(?=[,\s\]])")


_NUMBER = re.compile(r"(?<![A-Za-z_])\d+(?:\.\d*)?(?:e[-+]?\d+)?")


def _shapeless(text: str) -> str:
    """A jaxpr's text with the interpreter choice and every number blanked (shapes, shape parameters, literals such
    as a mean's 1/N, loop lengths): a kernel whose tiles follow the array's size prints the same at every size,
    and what is left is the program's structure, which a kernel that swaps programs with the size cannot keep."""
    return _NUMBER.sub("#", _INTERPRET_PARAM.sub("interpret=*", text))


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # a function's address in a parameter's repr says nothing of the program


def program_text(jaxpr) -> str:
    """One jaxpr as text, the same for two traces of one program: variables numbered in order of appearance, every
    inner jaxpr written out in place with its own numbering, functions' addresses dropped. (jax's printer hoists an
    inner jaxpr used twice into a named `let` and names variables by object, and which uses are one object depends
    on what the trace caches held: the same program printed two ways in two traces, or at two sizes.)"""
    from jax.extend import core as jex_core

    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    names: dict = {}

    def var(v) -> str:
        if isinstance(v, jex_core.Literal):
            return f"{v.val!r}:{v.aval.str_short()}"
        if v not in names:
            names[v] = f"v{len(names)}:{v.aval.str_short()}"
        return names[v]

    def param(value) -> str:
        if isinstance(value, (jex_core.Jaxpr, jex_core.ClosedJaxpr)):
            return "{ " + program_text(value) + " }"
        if isinstance(value, (tuple, list)):
            return "(" + ", ".join(param(x) for x in value) + ")"
        return str(value)

    lines = ["in " + " ".join(var(v) for v in [*jaxpr.constvars, *jaxpr.invars])]
    for eqn in jaxpr.eqns:
        params = " ".join(f"{k}={param(v)}" for k, v in sorted(eqn.params.items()))
        lines.append(f"{' '.join(var(v) for v in eqn.outvars)} = {eqn.primitive.name}[{params}] "
                     + " ".join(var(v) for v in eqn.invars))
    lines.append("out " + " ".join(var(v) for v in jaxpr.outvars))
    return _ADDRESS.sub("", "\n".join(lines))


def fingerprint(closed_jaxpr) -> dict:
    """The program up to its grid extents and array shapes: each pallas_call's body, block shapes, index maps and
    dimension semantics, and the primitives around them. Two sizes of one honest kernel print the same; a kernel
    that runs another program at another size does not (what is priced must be what was checked)."""
    kernels: list[str] = []
    parts: list[dict] = []  # per kernel, which part is which: so a difference can be named, not only found
    unwrapped: list[str] = []  # the same as `kernels`, blind to where the printer wrapped its lines
    spanned: list[str] = []  # the same, also blind to a slice that spans its whole dim at one size (`:` for `:#`)
    outside: list[str] = []

    def walk(jaxpr) -> None:
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name == "pallas_call":
                gm = eqn.params["grid_mapping"]
                body = _shapeless(program_text(eqn.params["jaxpr"]))
                maps = [_shapeless(program_text(bm.index_map_jaxpr) if getattr(bm, "index_map_jaxpr", None) is not None
                                   else "") for bm in getattr(gm, "block_mappings", ())]
                params = eqn.params.get("compiler_params") or {}
                semantics = [str(getattr(p, "dimension_semantics", "")) for p in
                             (params.values() if isinstance(params, dict) else [params])]
                text = json.dumps([body, maps, semantics, len(getattr(gm, "grid", ()) or ()),
                                   getattr(gm, "num_scalar_prefetch", 0)], default=str)
                kernels.append(hashlib.sha256(text.encode()).hexdigest()[:16])
                body, maps = _unwrapped(body), [_unwrapped(m) for m in maps]
                text = json.dumps([body, maps, semantics, len(getattr(gm, "grid", ()) or ()),
                                   getattr(gm, "num_scalar_prefetch", 0)], default=str)
                unwrapped.append(hashlib.sha256(text.encode()).hexdigest()[:16])
                body, maps = _spanned(body), [_spanned(m) for m in maps]
                text = json.dumps([body, maps, semantics, len(getattr(gm, "grid", ()) or ()),
                                   getattr(gm, "num_scalar_prefetch", 0)], default=str)
                spanned.append(hashlib.sha256(text.encode()).hexdigest()[:16])
                inner = _jaxpr_of(eqn.params["jaxpr"])
                parts.append({"body": _digest(body), "body_ops": len(inner.eqns) if inner is not None else None,
                              "index_maps": _digest(json.dumps(maps)), "semantics": _digest(json.dumps(semantics)),
                              "grid_rank": len(getattr(gm, "grid", ()) or ())})
                outside.append("pallas_call")
                continue
            outside.append(name)
            for value in eqn.params.values():
                for sub in (value if isinstance(value, (tuple, list)) else (value,)):
                    inner = _jaxpr_of(sub)
                    if inner is not None:
                        walk(inner)

    walk(_jaxpr_of(closed_jaxpr))
    return {"kernels": kernels, "kernels_unwrapped": unwrapped, "kernels_spanned": spanned, "parts": parts,
            "outside": hashlib.sha256(" ".join(outside).encode()).hexdigest()[:16]}


def _unwrapped(text: str) -> str:
    """A jaxpr's text without its line breaks and indents: the printer wraps an equation whose line grows past its
    width, and a shape's digits (blanked after printing) decide that, so one honest program printed at two sizes
    wrapped its `convert_element_type[...]` differently (32k, 37k, 47k were refused as size-dependent for it)."""
    return re.sub(r"\s*([\[\](),=])\s*", r"\1", re.sub(r"\s+", " ", text))


def _spanned(text: str) -> str:
    """An unwrapped jaxpr's text with each slice bound dropped: a slice's bounds are sizes, blanked to `#` like every
    number, but one that covers its whole dim prints no bound at all (`x[:,:#]` at one size, `x[:,:]` where the
    bound equals the dim), so 46k's honest store of an image row into a 128-lane scratch, 18 lanes at the check size
    and all 128 at full size, read as another program."""
    return re.sub(r":#(?=[\],])", ":", re.sub(r"(?<=[\[,])#:", ":", text))


def _compared(checked: dict, priced: dict) -> str:
    """The finest key both fingerprints carry that is blind to how the printer laid the program out (fingerprints
    from before a key was added, such as cached estimates', are compared by the keys they have)."""
    for key in ("kernels_spanned", "kernels_unwrapped"):
        if key in checked and key in priced:
            return key
    return "kernels"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _what_changed(checked: dict, priced: dict) -> str:
    """Which part of which kernel differs between two fingerprints with the same number of kernels."""
    key = _compared(checked, priced)
    pairs = zip(checked.get(key) or [], priced.get(key) or [],
                checked.get("parts") or [], priced.get("parts") or [])
    for i, (a, b, pa, pb) in enumerate(pairs, 1):
        if a == b:
            continue
        said = []
        if pa.get("body") != pb.get("body"):
            if pa.get("body_ops") != pb.get("body_ops") and pa.get("body_ops") is not None:
                said.append(f"its body ({pa['body_ops']} operations checked, {pb['body_ops']} priced): a Python loop "
                            "or branch on a size inside the kernel, or a fori_loop unrolled over a count that follows "
                            "the size; loop with lax.fori_loop over the same count at every size")
            else:
                said.append("its body (as many operations, not the same ones): a choice made from a size, such as a "
                            "piece width or a dtype picked when a block does not divide, changed an operation")
        if pa.get("index_maps") != pb.get("index_maps"):
            said.append("its index maps")
        if pa.get("semantics") != pb.get("semantics") or pa.get("grid_rank") != pb.get("grid_rank"):
            said.append("its grid's rank or dimension semantics")
        return (f"kernel {i} of {len(checked.get('kernels') or [])} changed with the size: "
                + "; ".join(said or ["its scalar-prefetch operands"]))
    return "bodies, blocks or index maps changed with the size"


def fingerprint_differs(checked: dict, priced: dict) -> str | None:
    """Why a program priced at another size is not the program checked (fingerprint), or None."""
    key = _compared(checked, priced)
    if checked.get(key) != priced.get(key):
        n, m = len(checked.get("kernels") or []), len(priced.get("kernels") or [])
        return (f"its kernels differ ({_what_changed(checked, priced)})"
                if n == m else f"it runs {m} kernel(s) where the checked program ran {n}")
    if checked.get("outside") != priced.get("outside"):
        return "the XLA operations around its kernels changed with the size"
    return None


def checked_prints(integrity: dict, size: str) -> dict:
    """The fingerprints a verdict checked for `size`: a task with configs is judged on each, and a size naming one
    (full@decode) is tied to that config's program, not the first config's (a decode kernel is another program than
    the prefill one, and compared with it, every decode estimate read as "not the program checked")."""
    by_config = (integrity or {}).get("fingerprints_by_config") or {}
    name = size.split("@", 1)[1] if "@" in size else None
    if name is not None and name in by_config:
        return by_config[name] or {}
    return (integrity or {}).get("fingerprints") or {}


def priced_differs(prints: dict, priced: list) -> str | None:
    """Why the programs an estimate priced (their fingerprints) are not the program a verdict checked (its
    integrity["fingerprints"]: the check size's, else the checked size's), or None when every one is."""
    checked = (prints or {}).get("check") or (prints or {}).get("checked")
    if not checked or not priced:
        return "the priced program's fingerprint is missing, so it cannot be tied to the checked one"
    for fp in priced:
        why = fingerprint_differs(checked, fp)
        if why:
            return why
    return None
