"""What a port is told: the original (FILE.py[:NAME], its kind, an optional PyTorch oracle), the data arguments
(the `task new` specs), constructor arguments of a module (`--init dim=H`), extra named dims (`--dim F=11008`),
and the inputs drawn for a check, seed by seed."""

from __future__ import annotations

import ast
import math
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from maxkernel.tasknew import specs as S

__all__ = ["PortSpec", "parse_source", "build_spec", "draw_inputs", "draw_check_size", "elements", "gpu_here",
           "KINDS", "SpecError"]

SpecError = S.SpecError
KINDS = ("torch", "triton", "cuda")


def parse_source(text: str) -> tuple[Path, str]:
    """'file.py:Name' or 'file.py' (the one public class or function it defines) -> (path, name)."""
    where, sep, name = text.rpartition(":")
    if not sep or not where.endswith(".py"):
        where, name = text, ""
    path = Path(where).expanduser()
    if not where.endswith(".py") or not path.is_file():
        raise SpecError(f"--from {text!r}: no Python file {where} (write FILE.py or FILE.py:NAME)")
    if name and not name.isidentifier():
        raise SpecError(f"--from {text!r}: {name!r} is not a Python name")
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except SyntaxError as exc:
        raise SpecError(f"--from {text!r}: {where} does not parse: {exc.msg} (line {exc.lineno})") from None
    defined = [n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))
               and not n.name.startswith("_") and not _is_kernel(n)]
    if name:
        if name not in defined and not any(isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name
                                           for n in tree.body):
            raise SpecError(f"--from {text!r}: {where} defines no {name!r} (it defines {', '.join(defined) or 'nothing'})")
        return path, name
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef) and n.name in defined]
    pick = classes if len(classes) == 1 else [d for d in defined if d not in classes] if not classes else []
    if len(pick) != 1:
        raise SpecError(f"--from {text!r}: name the operator, FILE.py:NAME (it defines {', '.join(defined) or 'nothing'})")
    return path, pick[0]


def _is_kernel(node) -> bool:
    """A @triton.jit (or @jit) kernel: launched by the operator, never the operator itself."""
    for d in getattr(node, "decorator_list", []):
        target = d.func if isinstance(d, ast.Call) else d
        if (isinstance(target, ast.Attribute) and target.attr in ("jit", "autotune", "heuristics")) or \
                (isinstance(target, ast.Name) and target.id in ("jit", "autotune")):
            return True
    return False


@dataclass
class PortSpec:
    """One operator to port, with everything the oracle and the port are called with."""

    source: Path
    name: str
    kind: str  # torch | triton | cuda (what the user said or the file shows)
    args: list[str]  # the data arguments' specs, as written
    gens: list[str]
    config: dict[str, int]  # every named dim at full size
    smoke: dict[str, int]  # the same dims at the size the oracle runs on
    arg_specs: list[S.ArgSpec]
    init: dict[str, object] = field(default_factory=dict)  # constructor arguments (a str value naming a dim follows it)
    static: dict[str, object] = field(default_factory=dict)
    oracle: tuple[Path, str] | None = None  # a PyTorch reference of a Triton/CUDA kernel's semantics

    def init_at(self, dims: dict[str, int]) -> dict:
        return {k: dims[v] if isinstance(v, str) and v in dims else v for k, v in self.init.items()}

    def as_dict(self) -> dict:
        return {"source": str(self.source), "name": self.name, "kind": self.kind, "args": self.args,
                "gens": self.gens, "config": self.config, "smoke": self.smoke, "init": self.init,
                "static": self.static, "oracle": f"{self.oracle[0]}:{self.oracle[1]}" if self.oracle else None}


def _kind_of(path: Path) -> str:
    text = path.read_text(errors="replace")
    if "import triton" in text or "from triton" in text:
        return "triton"
    if "load_inline" in text or "cpp_extension" in text or "__global__" in text:
        return "cuda"
    return "torch"


def build_spec(source: str, args: list[str], *, kind: str | None = None, gens: list[str] | None = None,
               init: list[str] | None = None, dims: list[str] | None = None, static: list[str] | None = None,
               smoke: list[str] | None = None, oracle: str | None = None) -> PortSpec:
    """Parse and cross-check everything; SpecError (a usage error) says what would be accepted."""
    path, name = parse_source(source)
    kind = kind or _kind_of(path)
    if kind not in KINDS:
        raise SpecError(f"--kind {kind!r}: one of {', '.join(KINDS)}")
    if not args:
        raise SpecError("give at least one --arg DTYPE[DIMS] (the operator's tensor arguments, in order)")
    gens = list(gens or [])
    if len(gens) > len(args):
        raise SpecError(f"{len(gens)} --arg-gen for {len(args)} --arg (one per argument, in order)")
    parsed = [S.parse_arg(a) for a in args]
    gen_specs = [S.parse_gen(gens[i] if i < len(gens) else "", dtype) for i, (dtype, _) in enumerate(parsed)]
    extra = []
    for item in dims or []:
        dim, value = S.parse_static(item)
        if not isinstance(value, int) or value <= 0:
            raise SpecError(f"--dim {item!r}: write NAME=INT, e.g. F=11008 (a size a constructor argument names)")
        extra.append((dim, value))
    # Extra dims ride along as a scalar-free pseudo argument so name_dims checks them against the --arg dims.
    config, arg_specs = S.name_dims(parsed + ([("float32", extra)] if extra else []), gen_specs + (["normal"] if extra else []))
    arg_specs = arg_specs[:len(parsed)]
    lanes = S.lane_dims(arg_specs) | {d for d, _ in extra}
    small = S.smoke_dims(config, lanes)
    for item in smoke or []:
        dim, value = S.parse_static(item)
        if dim not in config or not isinstance(value, int) or value <= 0:
            raise SpecError(f"--smoke {item!r}: write DIM=INT for one of the dims ({', '.join(config)})")
        small[dim] = value
    inits = dict(S.parse_static(i) for i in init or [])
    statics = dict(S.parse_static(s) for s in static or [])
    found_oracle = None
    if oracle:
        found_oracle = parse_source(oracle)
    elif kind == "cuda" and not gpu_here():
        raise SpecError("a CUDA source cannot run here (no NVIDIA GPU): give --oracle FILE.py:FN, a PyTorch "
                        "function with the kernel's semantics, which becomes the oracle")
    return PortSpec(path, name, kind, list(args), gen_specs, config, small, arg_specs, inits, statics, found_oracle)


def gpu_here() -> bool:
    """An NVIDIA GPU's device nodes on this machine: there a Triton or CUDA original runs as itself."""
    return Path("/dev/nvidiactl").exists() and any(Path("/dev").glob("nvidia[0-9]*"))


def _bound(value: str, dims: dict) -> float:
    return dims[value] if value in dims else float(value)


def _draw(rng: np.random.Generator, spec: S.ArgSpec, dims: dict, seed: int, dtype: str | None) -> np.ndarray:
    """Like a task's own create_inputs: floats mixed-sign, the seed picking normal, uniform or heavy-tailed."""
    import ml_dtypes  # noqa: F401  (bfloat16 by name)

    from maxkernel.harness.verdict.arrays import _dtype

    shape = tuple(dims[n] if isinstance(n, str) else int(n) for n in spec.dims)
    kind, *bounds = spec.gen.split(":")
    if kind == "int":
        lo, hi = (int(_bound(b, dims)) for b in bounds)
        return rng.integers(lo, hi, size=shape).astype(_dtype(spec.dtype))
    if kind == "bool":
        return rng.random(shape) < 0.5
    out = _dtype(dtype or spec.dtype)
    if kind == "uniform":
        lo, hi = (_bound(b, dims) for b in bounds) if bounds else (0.0, 1.0)
        return rng.uniform(lo, hi, size=shape).astype(np.float32).astype(out)
    pick = seed % 3
    if pick == 0:
        x = rng.standard_normal(shape)
    elif pick == 1:
        x = rng.uniform(-math.sqrt(3.0), math.sqrt(3.0), size=shape)
    else:
        x = rng.standard_t(4, size=shape) / math.sqrt(2.0)
    return x.astype(np.float32).astype(out)


def elements(dims: dict[str, int], specs: list[S.ArgSpec]) -> int:
    """How many elements `specs` hold at `dims` (a bare number in a shape is its own size)."""
    return sum(math.prod(dims[d] if isinstance(d, str) else int(d) for d in s.dims) for s in specs)


def _step(name: str, smoke: int, lanes: set[str]) -> int:
    """The alignment a drawn size keeps: the smoke size's own (128 for a lane dim, 8 for a row, else none)."""
    if name in lanes and smoke % 128 == 0:
        return 128
    return 8 if smoke % 8 == 0 else 1


def _range(smoke: int, full: int, step: int) -> tuple[int, int]:
    """The multiples of `step` a dim is drawn from: above the smoke size up to twice it (never past the full size)
    where the smoke size shrank it, so a port right only up to the smoke size is always caught; half to twice
    the smoke size otherwise."""
    lo, hi = smoke // step + 1, min(2 * smoke, full) // step
    if smoke >= full or hi < lo:
        lo, hi = max(1, -(-smoke // 2 // step)), max(1, 2 * smoke // step)
    return lo, hi


def draw_check_size(spec: PortSpec, extra: list[S.ArgSpec] = (), *, bound: float = 4.0,
                    rng: secrets.SystemRandom | None = None) -> dict[str, int] | None:
    """The second size of a check, drawn per check and never announced. Free dims (those the smoke size shrank,
    and any above 128) are drawn as multiples of their smoke alignment (see _range); structure dims (at most 128
    and at full size already: heads, head dim, experts), and a full-size dim whose size a parameter carries as a
    bare number, stay fixed. Never the smoke size; the arguments and `extra` (a module's parameters) hold at most
    `bound` times the smoke size's elements. None when every dim is fixed."""
    rng = rng or secrets.SystemRandom()
    specs = list(spec.arg_specs) + list(extra)
    named = {d for s in spec.arg_specs for d in s.dims if isinstance(d, str)}
    lanes = S.lane_dims(spec.arg_specs) | (set(spec.config) - named)  # --dim extras are lanes (as build_spec has it)
    bare = {int(d) for s in extra for d in s.dims if not isinstance(d, str)}
    free = [d for d, v in spec.smoke.items()
            if (v != spec.config[d] or v > 128) and not (v == spec.config[d] and v in bare)]
    if not free:
        return None
    smoke, limit = dict(spec.smoke), bound * elements(spec.smoke, specs)
    steps = {d: _step(d, smoke[d], lanes) for d in free}
    for _ in range(200):
        size = dict(smoke)
        for d in free:
            size[d] = steps[d] * rng.randint(*_range(smoke[d], spec.config[d], steps[d]))
        if size != smoke and elements(size, specs) <= limit:
            return size
    # Only parameters of rank 3 or more in free dims outgrow the bound often: one dim one step up (or down).
    near = [{**smoke, d: smoke[d] + k * steps[d]} for d in free for k in (1, -1) if smoke[d] + k * steps[d] > 0]
    return next((s for s in sorted(near, key=lambda s: elements(s, specs)) if elements(s, specs) <= limit), None)


def draw_inputs(specs: list[S.ArgSpec], dims: dict[str, int], seed: int, dtype: str | None = None) -> list[np.ndarray]:
    """One seed's arguments at `dims`; `dtype` replaces every floating dtype (the dtype sweep)."""
    rng = np.random.default_rng(seed)
    return [_draw(rng, s, dims, seed, dtype if s.is_float else None) for s in specs]
