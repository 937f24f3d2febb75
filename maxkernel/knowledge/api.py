"""The installed Pallas API, introspected: which names exist where (`pl.*`, `pltpu.*`, `plgpu.*`, `plt.*`),
their signatures and first doc lines, and which well-known older spellings are gone.

Models are trained on many JAX versions at once; only the installed one counts. The table is built at first
use and cached per jax version. The renames below are candidates, not facts: each is kept only if, in the
installed jax, the old spelling does not resolve and the new one does (checked every build).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import re
import warnings
from dataclasses import dataclass

from maxkernel.settings import get_settings

__all__ = ["MODULES", "RENAMES", "Rename", "api_table", "lookup", "resolve", "verified_renames", "jax_version"]

# The import aliases the prompts and the house kernels use, and where each points.
MODULES = {
    "pl": "jax.experimental.pallas",
    "pltpu": "jax.experimental.pallas.tpu",
    "plgpu": "jax.experimental.pallas.mosaic_gpu",
    "plt": "jax.experimental.pallas.triton",
    "jnp": "jax.numpy",
    "lax": "jax.lax",
}
IMPORTS = {
    "pl": "from jax.experimental import pallas as pl",
    "pltpu": "from jax.experimental.pallas import tpu as pltpu",
    "plgpu": "from jax.experimental.pallas import mosaic_gpu as plgpu",
    "plt": "from jax.experimental.pallas import triton as plt",
    "jnp": "import jax.numpy as jnp",
    "lax": "from jax import lax",
}
_TABLED = ("pl", "pltpu", "plgpu", "plt")  # jnp and lax are looked up live, not tabled (thousands of names)
# Spellings people write for the same modules.
_ALIASES = {"pallas": "pl", "tpu": "pltpu", "mosaic_gpu": "plgpu", "gpu": "plgpu", "triton": "plt",
            "numpy": "jnp", "np": "jnp", "jax.numpy": "jnp", "jax.lax": "lax",
            **{k: k for k in MODULES}, **{v: k for k, v in MODULES.items()}}


@dataclass(frozen=True)
class Rename:
    old: str  # alias.name as older JAX (or a model's memory) spells it
    new: str  # alias.name in newer JAX
    note: str = ""


# Older spellings seen in kernels written from memory; each is checked against the installed jax.
RENAMES = (
    Rename("pltpu.TPUCompilerParams", "pltpu.CompilerParams"),
    Rename("pltpu.TPUMemorySpace", "pltpu.MemorySpace"),
    Rename("pltpu.ANY", "pl.ANY", "the any-memory space (HBM, left to the pipeline) lives in pl"),
    Rename("pltpu.TPUInterpretParams", "pltpu.InterpretParams"),
    Rename("pltpu.repeat", "jnp.repeat", "inside a kernel use jnp.repeat / jnp.tile / jnp.broadcast_to"),
    Rename("pltpu.semaphore_signal", "pl.semaphore_signal"),
    Rename("pltpu.semaphore_wait", "pl.semaphore_wait"),
    Rename("pltpu.semaphore_read", "pl.semaphore_read"),
    Rename("pltpu.delay", "pl.delay"),
    Rename("pltpu.run_scoped", "pl.run_scoped"),
    Rename("pltpu.DeviceIdType", "pl.DeviceIdType"),
    Rename("pl.load", "pltpu.load", "prefer plain ref indexing: x = x_ref[...] (pl.ds slices for dynamic ranges)"),
    Rename("pl.store", "pltpu.store", "prefer plain ref indexing: o_ref[...] = y"),
    Rename("pl.atomic_add", "plt.atomic_add", "atomics are Triton (plt) or Mosaic GPU (plgpu) only"),
    Rename("pl.dot", "plt.dot", "on TPU write jnp.dot / lax.dot_general with preferred_element_type"),
    Rename("pl.TPUCompilerParams", "pltpu.CompilerParams"),
    Rename("pltpu.TritonCompilerParams", "plt.CompilerParams"),
    Rename("pl.GPUCompilerParams", "plgpu.CompilerParams"),
    Rename("pltpu.emit_pipeline_with_scratch", "pltpu.emit_pipeline_with_allocations"),
)


_FORMAT = 2  # bump when the table's layout changes: older cache files are rebuilt


def jax_version() -> str:
    import jax

    return jax.__version__


def _split(name: str) -> tuple[str | None, str]:
    """("pltpu", "CompilerParams") from "pltpu.CompilerParams", "tpu.CompilerParams",
    "jax.experimental.pallas.tpu.CompilerParams"; (None, name) without a known prefix."""
    name = name.strip().strip("`").removesuffix("()")
    for prefix in sorted(_ALIASES, key=len, reverse=True):
        if name.startswith(prefix + "."):
            return _ALIASES[prefix], name[len(prefix) + 1:]
    return None, name


def resolve(spelling: str):
    """The object `alias.attr[.attr]` names in the installed jax, or None (never raises)."""
    alias, rest = _split(spelling)
    if alias is None:
        return None
    try:
        obj = importlib.import_module(MODULES[alias])
    except Exception:  # noqa: BLE001 - a backend module that does not import here
        return None
    for part in rest.split("."):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a deprecated name still resolves; deprecations() reports it
                obj = getattr(obj, part)
        except Exception:  # noqa: BLE001 - AttributeError, or a lazy module that fails to load
            return None
    return obj


_USE = re.compile(r"\buse (?:jax\.experimental\.pallas\.)?((?:pl|pltpu|plgpu|plt|jnp|lax|triton|tpu)\.[\w.]*\w)")


def deprecations() -> list[dict]:
    """What the installed jax itself marks deprecated or removed in the Pallas modules (their `_deprecations`
    tables), with the replacement its message names: {"old", "new", "note", "status"}."""
    out = []
    for alias in _TABLED:
        try:
            mod = importlib.import_module(MODULES[alias])
        except Exception:  # noqa: BLE001
            continue
        table = getattr(mod, "_deprecations", None)
        if not isinstance(table, dict):
            continue
        for name, value in sorted(table.items()):
            try:
                message, obj = value
            except (TypeError, ValueError):
                continue
            m = _USE.search(str(message))
            new = ""
            if m:
                new_alias, new_name = _split(m.group(1))
                new = f"{new_alias}.{new_name}" if new_alias else ""
            if not new and "moved to jax.experimental.pallas.triton" in str(message):
                new = f"plt.{name}"
            if new and resolve(new) is None:
                new = ""
            out.append({"old": f"{alias}.{name}", "new": new, "note": str(message)[:300],
                        "status": "removed" if obj is None else "deprecated"})
    return out


def _entry(obj) -> dict:
    import enum

    if inspect.isclass(obj) and issubclass(obj, enum.Enum):
        return {"kind": "enum", "signature": "", "doc": "members: " + ", ".join(obj.__members__)}
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        sig = ""
    kind = ("class" if inspect.isclass(obj) else "module" if inspect.ismodule(obj)
            else "function" if callable(obj) else "value")
    doc = (inspect.getdoc(obj) or "").strip() if kind != "value" else ""
    if kind == "value":
        doc = repr(obj)[:120]
    return {"kind": kind, "signature": sig, "doc": doc.split("\n\n")[0][:400]}


def _build() -> dict:
    table: dict = {"jax": jax_version(), "format": _FORMAT, "modules": {}}
    for alias in _TABLED:
        try:
            mod = importlib.import_module(MODULES[alias])
        except Exception:  # noqa: BLE001
            continue
        names = {}
        for n in sorted(dir(mod)):
            if n.startswith("_"):
                continue
            try:
                names[n] = _entry(getattr(mod, n))
            except Exception:  # noqa: BLE001 - a lazy attribute that fails on access
                continue
        table["modules"][alias] = names
    renames = [{"old": r.old, "new": r.new, "note": r.note, "status": "removed"} for r in RENAMES
               if resolve(r.old) is None and resolve(r.new) is not None]
    known = {r["old"] for r in renames}
    renames += [d for d in deprecations() if d["new"] and d["old"] not in known]
    table["renames"] = renames
    return table


@functools.lru_cache(maxsize=1)
def api_table() -> dict:
    """The table for the installed jax: read from the cache (one file per jax version), built on a miss."""
    path = get_settings().cache_dir / "knowledge" / f"pallas-api-jax-{jax_version()}.json"
    try:
        table = json.loads(path.read_text())
        if table.get("jax") == jax_version() and table.get("format") == _FORMAT:
            return table
    except (OSError, ValueError):
        pass
    table = _build()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(table))
        tmp.replace(path)  # whole or not at all: a crash never leaves half a table
    except OSError:
        pass  # a read-only cache: the table still answers from memory
    return table


def verified_renames() -> list[dict]:
    """The renames that hold in the installed jax: old spelling gone, new spelling present."""
    return list(api_table()["renames"])


def _answer(alias: str, name: str, entry: dict, asked: str) -> dict:
    out = {"name": f"{alias}.{name}", "import": IMPORTS[alias], "kind": entry["kind"],
           "signature": entry["signature"], "doc": entry["doc"], "jax": jax_version()}
    if asked and asked != out["name"]:
        out["note"] = f"the installed spelling is {alias}.{name} (you asked for {asked})"
    return out


def _live(alias: str, name: str) -> dict | None:
    obj = resolve(f"{alias}.{name}")
    return None if obj is None else _entry(obj)


def lookup(name: str) -> dict:
    """What the installed jax has under `name`: signature, import line, and "renamed from" for an old spelling;
    a name under the wrong prefix is answered with the right one. {"error", "candidates"} when nothing fits."""
    if not isinstance(name, str) or not name.strip():
        return {"error": "give a name, e.g. pallas_call, pltpu.CompilerParams, pl.BlockSpec"}
    table = api_table()
    alias, short = _split(name)
    asked = f"{alias}.{short}" if alias else short
    for r in table["renames"]:
        if asked == r["old"] or (alias is None and short == r["old"].split(".", 1)[1]
                                 and _find(table, short) is None):
            new_alias, new_name = r["new"].split(".", 1)
            entry = table["modules"].get(new_alias, {}).get(new_name) or _live(new_alias, new_name) or {}
            out = _answer(new_alias, new_name, {"kind": "", "signature": "", "doc": "", **entry}, "")
            gone = ("does not exist in" if r.get("status", "removed") == "removed" else "is deprecated in")
            out.update(renamed_from=r["old"], note=f"{r['old']} {gone} jax {jax_version()}: use {r['new']}"
                       + (f" ({r['note']})" if r["note"] else ""))
            return out
    head = short.split(".")[0]
    if alias is not None:
        entry = table["modules"].get(alias, {}).get(head) if alias in table["modules"] else _live(alias, head)
        if entry is not None and "." not in short:
            return _answer(alias, short, entry, asked)
        if "." in short and resolve(f"{alias}.{short}") is not None:
            return _answer(alias, short, _entry(resolve(f"{alias}.{short}")), asked)
    found = _find(table, head)
    if found is not None:
        where, entry = found
        if "." in short:
            obj = resolve(f"{where}.{short}")
            if obj is None:
                return _missing(table, short)
            entry = _entry(obj)
        return _answer(where, short, entry, asked)
    return _missing(table, short)


def _find(table: dict, name: str) -> tuple[str, dict] | None:
    """The module that has `name`: pltpu first when several do (a TPU kernel wants pltpu.CompilerParams, not
    the generic pl.CompilerParams), then pl, plgpu, plt, then jnp, lax."""
    for alias in ("pltpu", "pl", "plgpu", "plt"):
        entry = table["modules"].get(alias, {}).get(name)
        if entry is not None:
            return alias, entry
    for alias in ("jnp", "lax"):
        entry = _live(alias, name)
        if entry is not None:
            return alias, entry
    return None


def _missing(table: dict, short: str) -> dict:
    key = short.split(".")[-1].lower()
    cands = sorted(f"{a}.{n}" for a in _TABLED for n in table["modules"].get(a, {}) if key in n.lower())
    return {"error": f"{short!r} is not in the installed jax {jax_version()}", "candidates": cands[:20]}
