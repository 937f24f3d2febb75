"""One-line, actionable hints for the errors a Pallas kernel can get: from the lowering, Mosaic, XLA:TPU via
libtpu, the strict interpreter and the harness. Each names its error family, the cause and a concrete fix.
Bugs no check fails on (a reduction over an axis marked parallel, a store that never runs) are found in the
source by `lint`. benchmarks/hints.py and tests/harness/test_mistakes.py run a catalogue of real mistakes
(maxkernel/evals/mistakes.py) through the real tools and require the right hint for each."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass

from maxkernel import chips as chips_mod
from maxkernel import pysource

__all__ = ["Diagnosis", "diagnose", "hint_for", "lint", "overhang"]


@dataclass(frozen=True)
class Diagnosis:
    family: str  # e.g. renamed_api, block_alignment, vmem_overflow, missing_init
    hint: str  # cause and fix, one line
    line: int | None = None  # the kernel line it points at, when known

_UNIT = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def hint_for(error_text: str, chip=None) -> str | None:
    """A one-line fix for `error_text` on `chip` (a Chip, a chip name, or None), or None if unrecognised."""
    found = diagnose(error_text, chip)
    return found.hint if found else None


def diagnose(error_text: str, chip=None, source: str | None = None) -> Diagnosis | None:
    """The family and hint for an error (compiler, interpreter or harness text); with the kernel's `source`,
    the line it points at, and the source's own lint when the text alone is ambiguous (NaN outputs)."""
    if not error_text:
        return None
    if isinstance(chip, str):
        try:
            chip = chips_mod.get(chip)
        except ValueError:
            chip = None
    for pattern, family, make in _RULES:
        m = re.search(pattern, error_text, re.S)
        if m:
            if family in _SOURCE_CAUSES and source:  # which of the causes this kernel has
                specific = [d for d in lint(source) if d.family in _SOURCE_CAUSES[family]]
                if specific:
                    return specific[0]
            return Diagnosis(family, make(m, chip), _line_of(family, m, source))
    return None


# A failure whose text has several causes: the lint families, read in the kernel's source, that tell them apart.
# A reduction axis marked parallel reads a stale (NaN-initialised) accumulator under the strict interpreter once
# the reduction has several steps (the verdict's check size runs it at its real length).
_SOURCE_CAUSES = {"nan_output": ("missing_init", "store_condition", "dma_sync", "parallel_reduction"),
                  "timeout": ("dma_sync",), "blockspec_order": ("blockspec_order",)}


def _line_of(family: str, m: re.Match, source: str | None) -> int | None:
    """The first kernel line holding the name the error is about (an attribute, a primitive, a ref)."""
    if not source:
        return None
    if family == "renamed_api":
        name = _Swap(m).group(1)
    elif family in ("unsupported_primitive", "smem_vector_load") and m.groups():
        name = m.group(1) if family == "unsupported_primitive" else "SMEM"
    elif family == "index_map_out_of_bounds":
        name = m.group(2)
    else:
        return None
    for n, text in enumerate(source.splitlines(), 1):
        if name and re.search(rf"\b{re.escape(name)}\b", text):
            return n
    return None


# -- lint: kernel bugs no check fails on here ----------------------------------------------------------------
def _program_axis(node, ids: dict[str, int]) -> int | None:
    """N when `node` is pl.program_id(N) or a name bound to it."""
    if isinstance(node, ast.Name):
        return ids.get(node.id)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "program_id"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, int)):
        return node.args[0].value
    return None


def _num_programs_axis(node) -> int | None:
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "num_programs"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, int)):
        return node.args[0].value
    return None


def _semantics(tree) -> tuple[list[str], int] | None:
    """The dimension_semantics literal (lower-cased names) and its line."""
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "dimension_semantics" and \
                isinstance(node.value, (ast.Tuple, ast.List)):
            names = []
            for e in node.value.elts:
                if isinstance(e, ast.Constant) and isinstance(e.value, str):
                    names.append(e.value.lower())
                elif isinstance(e, ast.Attribute):
                    names.append(e.attr.lower())
                else:
                    names.append("?")
            return names, node.value.lineno
    return None


def lint(source: str) -> list[Diagnosis]:
    """Bugs the strict interpreter cannot see on a CPU, found in the kernel's source: an accumulation axis
    marked parallel (a race on a TPU with two TensorCores), a store condition that is never true, an
    accumulator that is added to but never initialised. [] when none (or the source does not parse)."""
    try:
        tree = pysource.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    ids = {}
    for node in ast.walk(tree):  # k = pl.program_id(2), and j, k = pl.program_id(1), pl.program_id(2)
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        pairs = (zip(target.elts, value.elts) if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple)
                 and len(target.elts) == len(value.elts) else [(target, value)])
        for t, v in pairs:
            axis = _program_axis(v, {})
            if isinstance(t, ast.Name) and axis is not None:
                ids[t.id] = axis
    found, inits = [], set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)):
            continue
        axis = _program_axis(node.left, ids)
        right = node.comparators[0]
        if axis is None:
            continue
        if isinstance(right, ast.Constant) and right.value == 0:
            inits.add(axis)
        if _num_programs_axis(right) == axis:
            found.append(Diagnosis("store_condition", f"`program_id({axis}) == pl.num_programs({axis})` is never "
                                   f"true (steps run 0 .. num_programs - 1), so what it guards never runs: "
                                   f"compare with pl.num_programs({axis}) - 1", node.lineno))
    semantics = _semantics(tree)
    if semantics:
        names, line = semantics
        for axis in sorted(inits):
            if axis < len(names) and names[axis] == "parallel":
                found.append(Diagnosis("parallel_reduction", f"grid axis {axis} accumulates (its first step "
                                       f"initialises with program_id({axis}) == 0) but dimension_semantics marks "
                                       f"it 'parallel': on a TPU with two TensorCores the steps race; mark it "
                                       f"'arbitrary'", line))
    accumulates = any(isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Subscript) for n in ast.walk(tree))
    scratch = any(isinstance(n, ast.keyword) and n.arg == "scratch_shapes" for n in ast.walk(tree))
    if accumulates and scratch and not inits and not _guarded_fill(tree):
        line = next(n.lineno for n in ast.walk(tree) if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Subscript))
        found.append(Diagnosis("missing_init", "a scratch accumulator is added to (+=) but never initialised: "
                               "zero it on the first step of the reduction axis, "
                               "@pl.when(pl.program_id(k) == 0): acc_ref[...] = jnp.zeros_like(acc_ref)", line))
    found += _dma_pairing(tree)
    found += _blockspec_order(tree) + _interpret_left(tree)
    return sorted(found, key=lambda d: d.line or 0)


def _guarded_fill(tree) -> bool:
    """Whether some `@pl.when(...)` function stores a fill (zeros, a constant) into a ref: an initialisation on a
    first step told otherwise than by `program_id(k) == 0` (a scalar-prefetched table's `kj == 0`, say). Met on the
    15p kernel, whose grid walks (q block, kv block) pairs from a table: the lint called its init missing."""
    fills = ("zeros", "zeros_like", "full", "full_like", "ones", "ones_like")
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef) or not any(
                isinstance(d, ast.Call) and _callee(d) == "when" for d in fn.decorator_list):
            continue
        for node in ast.walk(fn):
            if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Subscript) for t in node.targets)
                    and isinstance(node.value, ast.Call) and _callee(node.value) in fills):
                return True
    return False


def _callee(node) -> str | None:
    """`BlockSpec` for pl.BlockSpec(...) or BlockSpec(...), None for anything but a call."""
    if not isinstance(node, ast.Call):
        return None
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)


def _blockspec_order(tree) -> list[Diagnosis]:
    """pl.BlockSpec(index_map, block_shape): the argument order of early Pallas releases. It fails as "'function'
    object is not iterable", which names neither BlockSpec nor the order."""
    found = []
    for node in ast.walk(tree):
        if _callee(node) != "BlockSpec" or not node.args:
            continue
        first = node.args[0]
        second = node.args[1] if len(node.args) > 1 else None
        if isinstance(first, ast.Lambda) or (isinstance(first, ast.Name) and isinstance(second, (ast.Tuple, ast.List))):
            found.append(Diagnosis("blockspec_order", "pl.BlockSpec takes (block_shape, index_map); this call passes "
                                   "the index map first (the order of early Pallas releases): write "
                                   "pl.BlockSpec(block_shape, index_map), or name both: "
                                   "pl.BlockSpec(block_shape=..., index_map=...)", node.lineno))
    return found


def _interpret_left(tree) -> list[Diagnosis]:
    """pallas_call(..., interpret=True) or interpret=InterpretParams(...) left in: the judge refuses it."""
    for node in ast.walk(tree):
        if _callee(node) != "pallas_call":
            continue
        for kw in node.keywords:
            value = kw.value
            if kw.arg == "interpret" and ((isinstance(value, ast.Constant) and value.value is True)
                                          or (_callee(value) or "").endswith("InterpretParams")):
                return [Diagnosis("interpret_left_in", _interpret(None, None), kw.value.lineno)]
    return []


_COPY_MAKERS = ("make_async_copy", "make_async_remote_copy")


def _called_attr(node) -> str | None:
    """'start' for `<receiver>.start()`, else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args:
        return node.func.attr
    return None


def _dma_pairing(tree) -> list[Diagnosis]:
    """A DMA descriptor bound to a name and started but never waited on (the copy may still be in flight when
    its buffer is read, and never lands under the interpreter), or waited on but never started (the wait never
    returns). Only names used purely as `.start()` / `.wait()` receivers are judged, and only when no other
    receiver in the module (an inline descriptor, a list element, a helper's result) could pair with them."""
    descriptors: dict[str, int] = {}  # name -> line it is bound on
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call)):
            func = node.value.func
            maker = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if maker in _COPY_MAKERS:
                descriptors.setdefault(node.targets[0].id, node.lineno)
    if not descriptors:
        return []
    calls: dict[str, dict[str, int]] = {name: {"start": 0, "wait": 0} for name in descriptors}
    other = {"start": 0, "wait": 0}  # start()/wait() on anything but a judged name
    receivers = set()
    for node in ast.walk(tree):
        attr = _called_attr(node)
        if attr in ("start", "wait"):
            base = node.func.value
            if isinstance(base, ast.Name) and base.id in calls:
                calls[base.id][attr] += 1
                receivers.add(id(base))
            elif not (isinstance(base, ast.Name) and "sem" in base.id.lower()):
                other[attr] += 1
        if isinstance(node, ast.Call):
            func = node.func
            if (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)) == "async_copy":
                other["start"] += 1  # pltpu.async_copy starts the copy it returns
    loads = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in calls and isinstance(node.ctx, ast.Load):
            loads.setdefault(node.id, []).append(id(node) in receivers)
    found = []
    for name, line in descriptors.items():
        if not all(loads.get(name, [True])):
            continue  # handed elsewhere (a list, a helper, a return): its pairing is not visible here
        n = calls[name]
        if n["start"] and not n["wait"] and not other["wait"]:
            found.append(Diagnosis("dma_sync", f"the DMA `{name}` is started but never waited on: the copy may "
                                   f"still be in flight when its destination is read (under the interpreter it "
                                   f"never lands) and the kernel exits with its semaphore signalled; call "
                                   f"{name}.wait() before using the destination", line))
        elif n["wait"] and not n["start"] and not other["start"]:
            found.append(Diagnosis("dma_sync", f"the DMA `{name}` is waited on but never started, so the wait "
                                   f"never returns (the run hangs until it is killed): call {name}.start() "
                                   f"before {name}.wait()", line))
    return found


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _size(num: str, unit: str) -> float:
    return float(num) * _UNIT[unit]


def _chip_label(chip) -> str:
    return chip.name if chip is not None else "this chip"


def _vmem_fix(needed: float | None, chip) -> str:
    """Shrink blocks, or raise the scoped limit as far as the chip's physical VMEM allows."""
    shrink = "shrink the blocks (every pipelined input/output block is double-buffered) or the scratch"
    if chip is None or not chip.vmem_bytes:
        return shrink + ", or raise pltpu.CompilerParams(vmem_limit_bytes=...)"
    if needed is not None and needed > chip.vmem_bytes:
        return f"{shrink}: {chip.name} has only {_mib(chip.vmem_bytes)} of VMEM per core, so no limit can fit it"
    return (f"{shrink}, or pass pltpu.CompilerParams(vmem_limit_bytes=...) up to "
            f"{_mib(chip.vmem_bytes)} ({chip.name}'s VMEM per core)")


def _scoped_oom(m: re.Match, chip) -> str:
    need, limit = _size(m.group(1), m.group(2)), _size(m.group(3), m.group(4))
    return f"Kernel needs {_mib(need)} of scoped VMEM, over the {_mib(limit)} limit on {_chip_label(chip)}: " + _vmem_fix(need, chip)


def _capacity_oom(m: re.Match, chip) -> str:
    need, cap = _size(m.group(1), m.group(2)), _size(m.group(3), m.group(4))
    return (f"Kernel needs {_mib(need)} of VMEM but {_chip_label(chip)} has {_mib(cap)} per core: shrink the blocks, "
            "use pipeline_mode=pl.Buffered(1) for blocks whose index never changes, or trim scratch buffers")


def _allocation_oom(m: re.Match, chip) -> str:
    need, cap = int(m.group(1)), int(m.group(2))
    return (f"A {_mib(need)} VMEM allocation exceeds the {_mib(cap)} on {_chip_label(chip)}: shrink that block or "
            "scratch buffer (or tile the work over more grid steps)")


def _unaligned(m: re.Match, chip) -> str:
    dim, mult = m.group(1), m.group(2)
    return (f"A dynamic offset in dimension {dim} must be provably a multiple of {mult}: build it as i * {mult} "
            f"(or wrap it in pl.multiple_of(start, {mult}) when it truly is), or move the offset into the "
            "BlockSpec index_map so the pipeline does the slicing")


def _tile_offset(m: re.Match, chip) -> str:
    dim, tile = m.group(1), m.group(2)
    return (f"A ref is sliced at a dynamic offset in its tiled dimension {dim}, which Mosaic only takes in whole "
            f"tiles of {tile}: HBM arrays are tiled like VMEM ones, so a DMA of one row at a data-dependent position "
            f"of a 2-D array (a gather) is refused at either end. Slice whole tiles (an offset built as i * {tile}, "
            "or pl.multiple_of(start, " + tile + ") when it truly is one), or lay the data out so the dynamic index "
            "falls on a leading, untiled dim whose slab is whole tiles (as a paged cache does: [pages, page_size, "
            "cols] fetched by a BlockSpec index_map)")


def _matmul_dtype(m: re.Match, chip) -> str:
    dtype = m.group(2)
    where = f"The {chip.name} MXU" if chip is not None else "This chip's MXU"
    fp8 = "f8" in dtype.lower()
    alt = " fp8 matmuls need v5e, v5p, v6e or 7x." if fp8 else ""
    return f"{where} cannot multiply {dtype} operands: cast both operands to bfloat16 before jnp.dot on this chip.{alt}"


def _int8_vector(m: re.Match, chip) -> str:
    return ("TPU vector units do no int8 arithmetic: cast the loaded block to int32 (or float32/bfloat16), "
            "compute, then cast back when storing")


def _f16(m: re.Match, chip) -> str:
    return "float16 is not a TPU vector type: use bfloat16 in the kernel (or cast to float32 outside it)"


def _x64(m: re.Match, chip) -> str:
    return ("TPU kernels have no 64-bit types: keep int32/float32 inside the kernel and give constants and "
            "iotas an explicit 32-bit dtype (x64 mode makes Python scalars 64-bit)")


_PRIMITIVE_FIX = {
    "sort": "sort outside the kernel (jax.lax.sort / lax.top_k) or build a bitonic network from jnp.minimum/maximum",
    "top_k": "take the top-k outside the kernel, or keep a running k-best with jnp.maximum/jnp.where",
    "cumsum": "write the prefix sum as a matmul with a lower-triangular ones mask, or a log-step loop of pltpu.roll + add",
    "cumprod": "use cumulative sums of logs (as a triangular-mask matmul) or move it outside the kernel",
    "argsort": "sort indices outside the kernel",
    "gather": "use jnp.take_along_axis along one axis, a one-hot matmul, or scalar prefetch + index_map",
}


def _primitive(m: re.Match, chip) -> str:
    prim = m.group(1)
    fix = next((v for k, v in _PRIMITIVE_FIX.items() if prim.startswith(k)), "rewrite it with supported ops or move it out of the kernel")
    return f"`{prim}` has no Pallas TPU lowering: {fix}"


def _gather(m: re.Match, chip) -> str:
    return f"Fancy indexing is not lowerable in a TPU kernel: {_PRIMITIVE_FIX['gather']}"


def _smem_vector(m: re.Match, chip) -> str:
    return ("SMEM holds scalars: read one element at a time (ref[i]) or keep the array in VMEM "
            "(the default BlockSpec memory space) to load vectors")


def _block_shape(m: re.Match, chip) -> str:
    return ("Each block's last two dims must be multiples of 8 and 128 (16 rows for bf16, 32 for 8-bit types are "
            "better still) or equal the array's dims: pick block sizes that divide the array, e.g. (256, 512)")


def _dim_semantics(m: re.Match, chip) -> str:
    return "Give dimension_semantics exactly one entry per grid axis ('parallel' or 'arbitrary')"


def _buffering(m: re.Match, chip) -> str:
    return "TPU pipelines take pl.Buffered(1) or pl.Buffered(2) only; deeper prefetch needs a manual DMA pipeline"


def _shape_cast(m: re.Match, chip) -> str:
    return ("Mosaic cannot reshape across the (8, 128) tile: reshape only leading dims, keep the last dim a multiple "
            "of 128, or reshape outside the kernel")


def _triton_pow2(m: re.Match, chip) -> str:
    return ("Triton needs power-of-two sizes for every array in the kernel: use power-of-two block shapes and "
            "mask the tail (pl.cdiv grid with masked loads/stores)")


def _gpu_smem(m: re.Match, chip) -> str:
    limit = chip.shared_mem_bytes_per_block if chip is not None and chip.shared_mem_bytes_per_block else 227 * 1024
    return (f"The kernel's blocks exceed the {limit // 1024} KiB of shared memory a GPU block may use: use smaller "
            "blocks or fewer pipeline stages (num_stages)")


def _tpu_params_on_gpu(m: re.Match, chip) -> str:
    return (f"This is a TPU kernel (pltpu.CompilerParams) and cannot target {_chip_label(chip)}: compile it for a TPU "
            "chip, or write a GPU variant with GPU compiler params")


def _device_kind(m: re.Match, chip) -> str:
    return "The kernel queries the TPU it runs on: compile it for a named chip (--chip v5e, ...) on a CPU host"


def _renamed(m: re.Match, chip) -> str:
    from maxkernel.knowledge import lookup

    module, name = m.group(2), m.group(1)
    alias = {"jax.experimental.pallas": "pl", "jax.experimental.pallas.tpu": "pltpu",
             "jax.experimental.pallas.mosaic_gpu": "plgpu", "jax.experimental.pallas.triton": "plt"}.get(module)
    asked = f"{alias}.{name}" if alias else name
    got = lookup(asked)
    if "renamed_from" in got:
        return got["note"]
    if "name" in got:
        return f"{asked} is not in the installed jax; it is {got['name']} ({got['import']})"
    close = ", ".join(got.get("candidates", [])[:5])
    return f"{asked} is not in the installed jax" + (f"; close names: {close}" if close else "") + \
        " (look names up with pallas_api)"


def _traced_bool(m: re.Match, chip) -> str:
    return ("Python if/and/or/while on a traced value (pl.program_id, a loaded element) inside a kernel: use "
            "@pl.when(cond) for a step that only some grid steps run, jnp.where / lax.select for values, "
            "lax.fori_loop / lax.cond for control flow")


def _contracting(m: re.Match, chip) -> str:
    return (f"The matmul contracts a dimension of size {m.group(1)} with one of size {m.group(2)}: jnp.dot(a, b) "
            "contracts a's last dim with b's first; check both blocks agree on K and pass dimension_numbers "
            "(((1,), (0,)), ((), ())) unless you mean a transpose")


def _store_dtype(m: re.Match, chip) -> str:
    return (f"A store writes {m.group(2)} into a {m.group(1)} ref: cast the value first, "
            "o_ref[...] = y.astype(o_ref.dtype)")


def _oob_block(m: re.Match, chip) -> str:
    return (f"The index_map of {m.group(2)} returns block index {m.group(1)}, past the end of the array: index maps "
            "return block indices (element offset // block size), each below pl.cdiv(dim, block), for every grid step")


def _nan_output(m: re.Match, chip) -> str:
    return ("The output holds NaN: a scratch accumulator was never initialised (zero it under "
            "@pl.when(pl.program_id(k) == 0)) or an output block is never written (the last step of axis k is "
            "pl.num_programs(k) - 1)")


def overhang(overhangs: list[dict], operand: str | None = None) -> Diagnosis | None:
    """A NaN output's (or an out-of-bounds block index's, on `operand`) hint when a pallas_call operand's block is
    larger than its array (the census lists them): the padding past the array's end is what reads as NaN, and an
    index map stepping by that block leaves the array, most often because the operand's dims are taken in the wrong
    order. None when there is none (on that operand)."""
    found = [o for o in overhangs or [] if operand is None or o.get("operand") == operand]
    if not found:
        return None
    o = found[0]
    dims = [i for i, (a, b) in enumerate(zip(o["array"], o["block"])) if b > a]
    return Diagnosis("block_past_array", (
        f"The {o['kind']} {o['operand']} has block {tuple(o['block'])}, larger than its array {tuple(o['array'])} in "
        f"dim {', '.join(map(str, dims))}: what the kernel reads past the array's end is padding (NaN under the "
        "strict interpreter, garbage on a TPU). Check which dim of the operand is which (a torch Linear weight is "
        "[out_features, in_features]) and the block shape's order; if both are right, zero the accumulator on the "
        "first step of the reduction and write every output block"))


def _output_decl(m: re.Match, chip) -> str:
    return (f"workload returned {m.group(1)} but the task declares {m.group(2)}: return exactly those arrays, "
            "cast to the declared dtype (out_shape=jax.ShapeDtypeStruct(shape, x.dtype), or .astype(x.dtype))")


def _interpret(m: re.Match, chip) -> str:
    return ("interpret=True is left in the kernel: delete it (or pass interpret=False); the harness runs the strict "
            "TPU interpreter on CPU itself and compiles for the TPU elsewhere")


def _blockspec_text(m: re.Match, chip) -> str:
    return ("A function was used where a shape was expected: pl.BlockSpec takes (block_shape, index_map) (index_map "
            "first was the order of early Pallas releases), so BlockSpec(index_map, block_shape) fails this way; "
            "swap them or name both (block_shape=..., index_map=...)")


def _timeout(m: re.Match, chip) -> str:
    if "judge had not made its inputs" in m.string:  # the kernel never ran: nothing in it is to blame yet
        return ("The kernel never ran: the judge had not finished making its inputs from the reference when the time "
                "limit came, so the machine was too busy (or the reference too slow at this size). Run it again on a "
                "quieter machine, or give it longer (--timeout SECONDS); a .wait() that never returns is not what "
                "this shows")
    return ("The run was killed at its time limit: a .wait() on a DMA or semaphore that nothing signals never "
            "returns (start every copy before waiting on it); otherwise the grid is too large for the interpreter "
            "at this size (test with --size smoke)")


def _multi_step(m: re.Match, chip) -> str:
    return ("Right with the default blocks but wrong with the smaller ones it declares: state carried from one grid "
            "step to the next along a reduction or sequence axis (an online softmax's running max and sum, a "
            "scan's carry, an accumulator) is not initialised, rescaled or carried the way every step needs; at "
            "the checked size the defaults take fewer steps on that axis than at full size. Run it "
            f"with {m.group(1)} and fix the step-to-step update")


def _f16_cast(m: re.Match, chip) -> str:
    return "float16 is not a TPU vector type: use bfloat16 in the kernel (or cast to float32 outside it)"


_N = r"([\d.]+)([KMG])"
_RULES: list[tuple[str, str, Callable[[re.Match, object], str]]] = [
    (rf"Scoped allocation with size {_N}\S* and limit {_N}", "vmem_overflow", _scoped_oom),
    (rf"Used {_N}\S* of {_N}\S* vmem", "vmem_overflow", _capacity_oom),
    (r"Allocation \(size=(\d+)\) would exceed memory \(size=(\d+)\).*?space=vmem", "vmem_overflow", _allocation_oom),
    (r"cannot statically prove that index in dimension (\d+) is a multiple of (\d+)", "unaligned_offset", _unaligned),
    # Met writing rw_topk_sparse_attention_sink: one DMA per selected key row, into and out of 2-D refs.
    (r"index at dimension (\d+) is divisible by the tile dimension (\d+)", "unaligned_offset", _tile_offset),
    (r"Unsupported matmul (LHS|RHS) type on target: vector<[\dx]*x(\w+)>", "dtype_per_chip", _matmul_dtype),
    (r"Only vector<i16> and vector<i32> are supported, but got 'i8'", "dtype_per_chip", _int8_vector),
    (r"Invalid vector type for load.*?xf16>|float16 is not supported|\bf16\b.*not supported", "dtype_per_chip", _f16),
    (r"64-bit types are not supported", "x64", _x64),
    (r"Unimplemented primitive in Pallas TPU lowering for \w+: (\w+)", "unsupported_primitive", _primitive),
    (r"Only take_along_axis-like gathers supported", "unsupported_primitive", _gather),
    (r"Can only load scalars from SMEM", "smem_vector_load", _smem_vector),
    (r"block shape are divisible by 8 and 128", "block_alignment", _block_shape),
    (r"Length of grid does not match length of dimension semantics", "dimension_semantics", _dim_semantics),
    (r"Only single \(1\) and double \(2\) buffering", "buffer_depth", _buffering),
    (r"(?i)unsupported shape cast|not implemented: .*shape_cast", "shape_cast", _shape_cast),
    (r"whose size is a power of 2", "gpu_block_shape", _triton_pow2),
    (r"exceeds available shared memory|Shared memory size limit exceeded", "gpu_shared_memory", _gpu_smem),
    (r"Compiler params for platform tpu cannot be used for gpu", "wrong_platform", _tpu_params_on_gpu),
    (r"Unsupported TPU device kind", "wrong_platform", _device_kind),
    (r"has no attribute '(\w+)'.*?module '([\w.]+)'|module '([\w.]+)' has no attribute '(\w+)'", "renamed_api",
     lambda m, c: _renamed(_Swap(m), c)),
    (r"TracerBoolConversionError|Attempted boolean conversion of traced array", "traced_control_flow", _traced_bool),
    (r"dot_general requires contracting dimensions to have the same shape, got \((\d+),?\) and \((\d+),?\)",
     "contracting_dims", _contracting),
    (r"Invalid dtype for `swap`\. Ref dtype: (\w+)\. Value dtype: (\w+)", "store_dtype", _store_dtype),
    (r"Out-of-bounds block index (\([\d, ]+\)) for (?:input|output) \"(\w+)\"", "index_map_out_of_bounds", _oob_block),
    (r"workload returned arrays (\[.*?\)\]); the task declares (\[.*?\)\])", "output_dtype", _output_decl),
    (r"interpret= must be False or None", "interpret_left_in", _interpret),
    (r"'function' object is not iterable", "blockspec_order", _blockspec_text),
    (r"Unsupported cast: \w+ -> float16", "dtype_per_chip", _f16_cast),
    (r"with its smallest declared tunables \(([^:]*):", "multi_step_state", _multi_step),
    (r"NaN/Inf values", "nan_output", _nan_output),
    (r"the candidate did not finish within [\d.]+ ?s", "timeout", _timeout),
]


class _Swap:
    """The AttributeError match with (name, module) in groups 1 and 2 whichever way the message read."""

    def __init__(self, m: re.Match):
        self._g = (m.group(4), m.group(3)) if m.group(3) else (m.group(1), m.group(2))

    def group(self, i: int) -> str:
        return self._g[i - 1]
