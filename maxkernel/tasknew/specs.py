"""Parsing what `maxkernel task new` is told: argument specs (`bf16[M=8192,4096]`), input generators
(`normal`, `uniform:-1:1`, `int:0:E`, `bool`), static arguments (`eps=1e-6`), and the smoke size derived from
the full one."""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass

__all__ = ["ArgSpec", "SpecError", "DTYPES", "elements", "lane_dims", "parse_arg", "parse_config", "parse_gen", "parse_static", "name_dims", "smoke_dims",
           "shrink_further"]

DTYPES = {
    "bf16": "bfloat16", "bfloat16": "bfloat16", "f16": "float16", "float16": "float16", "f32": "float32",
    "float32": "float32", "fp8": "float8_e4m3fn", "f8e4m3": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
    "i8": "int8", "int8": "int8", "u8": "uint8", "uint8": "uint8", "i16": "int16", "int16": "int16",
    "i32": "int32", "int32": "int32", "u32": "uint32", "uint32": "uint32", "bool": "bool", "pred": "bool",
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


class SpecError(ValueError):
    """A spec the user wrote that cannot be understood; the message says what would be accepted."""


@dataclass(frozen=True)
class ArgSpec:
    dtype: str  # numpy name: bfloat16, int32, ...
    dims: tuple[str | int, ...]  # a dim name (sizes from the task's CONFIG) or, before naming, a number
    gen: str  # normal | uniform[:LO:HI] | int:LO:HI | bool  (LO/HI may be dim names)

    @property
    def is_float(self) -> bool:
        return self.dtype.startswith(("float", "bfloat"))


def parse_arg(text: str) -> tuple[str, list[tuple[str | None, int]]]:
    """'bf16[M=8192,4096]' -> ('bfloat16', [('M', 8192), (None, 4096)]); 'f32[]' is a scalar; a bare name ('f32[M]')
    is a dim another argument sizes: ('M', None), resolved by name_dims."""
    m = re.fullmatch(r"\s*([A-Za-z0-9_]+)\s*\[(.*)\]\s*", text)
    if not m:
        raise SpecError(f"--arg {text!r}: write DTYPE[DIM,...], e.g. 'bf16[8192,4096]' or 'f32[M=4096]'")
    dtype = DTYPES.get(m.group(1).lower())
    if dtype is None:
        raise SpecError(f"--arg {text!r}: unknown dtype {m.group(1)!r} (one of {', '.join(sorted(set(DTYPES)))})")
    dims: list[tuple[str | None, int]] = []
    for part in filter(None, (p.strip() for p in m.group(2).split(","))):
        name, _, value = part.rpartition("=")
        name = name.strip() or None
        if name is None and _NAME.match(value.strip()) and not value.strip().isdigit():
            dims.append((value.strip(), None))  # a named dim given its size elsewhere
            continue
        if name is not None and not _NAME.match(name):
            raise SpecError(f"--arg {text!r}: dim name {name!r} must be an identifier")
        try:
            size = int(value)
        except ValueError:
            raise SpecError(f"--arg {text!r}: dim {part!r} is not a positive integer (or NAME=INT)") from None
        if size <= 0:
            raise SpecError(f"--arg {text!r}: dim {part!r} must be positive")
        dims.append((name, size))
    return dtype, dims


def parse_gen(text: str, dtype: str) -> str:
    """A generator checked against the dtype; '' picks the dtype's default (normal, int:0:128, bool)."""
    text = (text or "").strip()
    if not text:
        return "bool" if dtype == "bool" else ("normal" if dtype.startswith(("float", "bfloat")) else "int:0:128")
    kind, *rest = text.split(":")
    floating = dtype.startswith(("float", "bfloat"))
    if kind == "normal" and not rest and floating:
        return text
    if kind == "uniform" and floating and len(rest) in (0, 2):
        for r in rest:
            _bound(r, text)
        return text
    if kind == "int" and len(rest) == 2 and not floating and dtype != "bool":
        for r in rest:
            _bound(r, text)
        return text
    if kind == "bool" and not rest and dtype == "bool":
        return text
    raise SpecError(f"--arg-gen {text!r} does not fit {dtype}: floats take normal or uniform[:LO:HI], integers "
                    f"int:LO:HI (HI exclusive; LO/HI may be a dim name), bool takes bool")


def _bound(value: str, text: str) -> None:
    if _NAME.match(value):
        return
    try:
        float(value)
    except ValueError:
        raise SpecError(f"--arg-gen {text!r}: bound {value!r} is neither a number nor a dim name") from None


def parse_config(text: str, config: dict[str, int], first: bool) -> tuple[str, dict[str, int]]:
    """'decode:T=1,H=512' -> ('decode', {'T': 1, 'H': 512}); the first config is the --arg shapes, named alone."""
    name, _, rest = text.partition(":")
    name = name.strip()
    if not _NAME.match(name):
        raise SpecError(f"--config {text!r}: write NAME (the first, the --arg shapes) or NAME:DIM=INT[,DIM=INT]")
    overrides = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        dim, _, value = part.partition("=")
        if dim not in config:
            raise SpecError(f"--config {text!r}: {dim!r} is not a dim (dims: {', '.join(config)})")
        try:
            overrides[dim] = int(value)
        except ValueError:
            raise SpecError(f"--config {text!r}: {part!r} is not DIM=INT") from None
        if overrides[dim] <= 0:
            raise SpecError(f"--config {text!r}: {part!r} must be positive")
    if first and overrides:
        raise SpecError(f"--config {text!r}: the first config is the shapes the --arg give; name it alone ({name})")
    return name, overrides


def parse_static(text: str) -> tuple[str, object]:
    """'eps=1e-6' -> ('eps', 1e-06): a Python literal (number, string, tuple, bool, None)."""
    name, sep, value = text.partition("=")
    if not sep or not _NAME.match(name.strip()):
        raise SpecError(f"--static {text!r}: write NAME=VALUE with a Python literal value, e.g. eps=1e-6")
    try:
        return name.strip(), ast.literal_eval(value.strip())
    except (ValueError, SyntaxError):
        return name.strip(), value.strip()  # a bare word is a string: mode=causal


def name_dims(parsed: list[tuple[str, list[tuple[str | None, int | None]]]], gens: list[str]) -> tuple[dict, list[ArgSpec]]:
    """Every dim gets a name: the user's, else one per distinct size (equal sizes share a name, so dims that
    must agree keep agreeing when the size shrinks); a bare name takes the size another argument gives it.
    Returns (CONFIG dims, ArgSpecs)."""
    config: dict[str, int] = {}
    by_size: dict[int, str] = {}
    for _, dims in parsed:
        for name, size in dims:
            if name is not None and size is not None:
                if config.get(name, size) != size:
                    raise SpecError(f"dim {name} is given two sizes: {config[name]} and {size}")
                config[name] = size
    for name, size in list(config.items()):
        by_size.setdefault(size, name)
    specs = []
    for (dtype, dims), gen in zip(parsed, gens):
        names = []
        for name, size in dims:
            if size is None and name not in config:
                sized = ", ".join(config) or "none"
                raise SpecError(f"dim {name} is never given a size: write {name}=INT in one --arg (sized dims: {sized})")
            if name is None:
                name = by_size.get(size) or f"D{size}"
                by_size.setdefault(size, name)
                config[name] = size
            names.append(name)
        specs.append(ArgSpec(dtype, tuple(names), gen))
    for spec in specs:  # a generator bound naming a dim must name a real one
        for part in spec.gen.split(":")[1:]:
            if _NAME.match(part) and part not in config:
                raise SpecError(f"--arg-gen {spec.gen!r}: {part!r} is not a dim (dims: {', '.join(config)})")
    return config, specs


def lane_dims(specs: list[ArgSpec]) -> set[str]:
    """Dims that are some argument's last (lane) dim: they keep a 128 alignment, the others 8."""
    return {s.dims[-1] for s in specs if s.dims}


def _align(size: int, lane: bool) -> int:
    step = 128 if lane else 8
    return step if size % step == 0 else (8 if size % 8 == 0 else 1)


def _halvable(s: int, full: int, lane: bool) -> bool:
    return s > 128 and s % 2 == 0 and (s // 2) % _align(full, lane) == 0


def smoke_dims(config: dict[str, int], lanes: set[str] = frozenset(), cap: int = 512) -> dict[str, int]:
    """Each dim above `cap` halved while it keeps its alignment (128 for a lane dim, 8 otherwise, when the full
    size had it); dims at or below 128 are structure (heads, experts, top-k) and kept."""
    out = {}
    for name, size in config.items():
        s = size
        while s > cap and _halvable(s, size, name in lanes):
            s //= 2
        out[name] = s
    return out


def shrink_further(full: dict[str, int], smoke: dict[str, int], lanes: set[str] = frozenset()) -> dict[str, int] | None:
    """The next smaller smoke size (the largest shrinkable dim halved), or None when nothing can shrink."""
    for name in sorted(smoke, key=lambda n: -smoke[n]):
        if _halvable(smoke[name], full[name], name in lanes):
            return {**smoke, name: smoke[name] // 2}
    return None


def elements(config: dict[str, int], specs: list[ArgSpec]) -> int:
    return sum(math.prod(config[d] for d in s.dims) for s in specs)


def parse_specs(args: list[str], gens: list[str] | None, static: list[str] | None) -> tuple[dict, dict, list]:
    """--arg, --arg-gen and --static as given: (static keyword arguments, CONFIG dims, ArgSpecs); SpecError for
    input that cannot be understood."""
    if not args:
        raise SpecError("give at least one --arg DTYPE[DIMS]")
    gens = list(gens or [])
    if len(gens) > len(args):
        raise SpecError(f"{len(gens)} --arg-gen for {len(args)} --arg (one per argument, in order)")
    statics = dict(parse_static(s) for s in static or [])
    parsed = [parse_arg(a) for a in args]
    gen_specs = [parse_gen(gens[i] if i < len(gens) else "", dtype) for i, (dtype, _) in enumerate(parsed)]
    config, arg_specs = name_dims(parsed, gen_specs)
    return statics, config, arg_specs
