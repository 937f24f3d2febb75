"""The baseline.py `maxkernel task new` writes: the public JAXBench layout (CONFIG, SIZES, create_inputs,
workload, get_flops), self-contained (jax and numpy only), its facts as data at the top."""

from __future__ import annotations

import pprint

__all__ = ["render"]

_BODY = '''

def _function():
    """The user's reference function: from the file copied beside this one, else from its installed module."""
    global _FN
    if _FN is None:
        if SOURCE["file"]:
            path = pathlib.Path(__file__).with_name(SOURCE["file"])
            spec = importlib.util.spec_from_file_location(f"_task_source_{abs(hash(str(path)))}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(SOURCE["module"])
        _FN = getattr(module, SOURCE["function"])
    return _FN


_FN = None


def _dims(size):
    """CONFIG, then SIZES[SIZE], then for "SIZE@NAME" CONFIGS[NAME] and SIZES["SIZE@NAME"]."""
    base, _, name = size.partition("@")
    if base != "full" and base not in SIZES:
        raise ValueError(f"unknown size {size!r}; this task has 'full' and {sorted(k for k in SIZES if '@' not in k)}")
    out = {**CONFIG, **(SIZES[base] if base != "full" else {})}
    if name:
        if name not in CONFIGS:
            raise ValueError(f"unknown config {name!r}; this task has {sorted(CONFIGS)}")
        out.update(CONFIGS[name])
        out.update(SIZES.get(size, {}))
    return out


def _bound(value, d):
    return d[value] if value in d else float(value)


def _draw(key, arg, d, seed, dtype):
    """One input: floats mixed-sign (the seed picks normal, uniform or heavy-tailed), integers uniform in
    [LO, HI), booleans fair coins."""
    _, kind_dtype, names, gen = arg
    shape = tuple(d[n] for n in names)
    kind, *bounds = gen.split(":")
    if kind == "int":
        lo, hi = (int(_bound(b, d)) for b in bounds)
        return jax.random.randint(key, shape, lo, hi, jnp.int32).astype(kind_dtype)
    if kind == "bool":
        return jax.random.bernoulli(key, 0.5, shape)
    out_dtype = dtype or kind_dtype
    if kind == "uniform":
        lo, hi = (_bound(b, d) for b in bounds) if bounds else (0.0, 1.0)
        return jax.random.uniform(key, shape, jnp.float32, lo, hi).astype(out_dtype)
    flat = (math.prod(shape),)
    pick = seed % 3
    if pick == 0:
        x = jax.random.normal(key, flat, jnp.float32)
    elif pick == 1:
        x = jax.random.uniform(key, flat, jnp.float32, -math.sqrt(3.0), math.sqrt(3.0))
    else:  # Student-t, 4 degrees of freedom, unit variance
        kz, k1, k2 = jax.random.split(key, 3)
        u = jax.random.uniform(k1, flat, jnp.float32, 1e-7, 1.0) * jax.random.uniform(k2, flat, jnp.float32, 1e-7, 1.0)
        x = jax.random.normal(kz, flat, jnp.float32) / jnp.sqrt(-0.5 * jnp.log(u)) / math.sqrt(2.0)
    return x.reshape(shape).astype(out_dtype)


def create_inputs(dtype=None, *, size="full", seed=42):
    """The function's positional arguments at `size` for `seed` (dtype, if given, replaces the float dtypes)."""
    d = _dims(size)
    keys = jax.random.split(jax.random.PRNGKey(seed), len(ARGS))
    return tuple(_draw(k, arg, d, seed, dtype) for k, arg in zip(keys, ARGS))


def workload(*args):
    """The user's function with its static arguments bound."""
    return _function()(*args, **STATIC)


def get_flops(size="full"):
    return FLOPS.get(size)
'''


def _literal(name: str, value, comment: str = "") -> str:
    text = pprint.pformat(value, width=100, sort_dicts=False)
    return (f"# {comment}\n" if comment else "") + f"{name} = {text}\n"


def render(*, name: str, doc: str, config: dict, sizes: dict, args: list, source: dict, static: dict,
           tolerance: dict, flops: dict, bytes_accessed: dict, configs: dict | None = None,
           parallel_dims: tuple = ()) -> str:
    """baseline.py's text. `args`: [(arg name, dtype, dim names, generator)] in call order."""
    head = (f'"""{name}: {doc}"""\n\n'
            "import importlib\nimport importlib.util\nimport math\nimport pathlib\n\n"
            "import jax\nimport jax.numpy as jnp\n\n")
    facts = [
        _literal("CONFIG", config, "Full size: the shapes the user gave."),
        _literal("CONFIGS", configs or {}, "Named configs (overrides of CONFIG, the first the default); each is "
                                           "judged, speedup is the geomean."),
        _literal("SIZES", sizes, "CPU-sized, derived (each dim halved while it keeps its (8, 128) alignment) and "
                                 "confirmed to run in seconds."),
        _literal("ARGS", [tuple(a) for a in args], "(argument, dtype, dims, generator) in call order."),
        _literal("STATIC", static, "Keyword arguments bound on every call."),
        _literal("SOURCE", source, "Where the reference function lives."),
        _literal("TOLERANCE", tolerance, "Calibrated: the function's own low-precision error against its f32 run, "
                                         "x3, never below the harness default; integers exact."),
        _literal("FLOPS", flops, "From XLA's cost analysis (or the user's --flops)."),
        _literal("BYTES_ACCESSED", bytes_accessed, "From XLA's cost analysis."),
    ]
    if parallel_dims:
        facts.append(_literal("PARALLEL_DIMS", tuple(parallel_dims)))
    return head + "\n".join(facts) + _BODY
