"""The second size a verdict checks a kernel at: drawn by the parent for each verdict, announced to no one.

Correctness at the smoke size alone can be bought by a kernel that runs an honest program only at the smoke shapes,
and precision calibrated there misses an accumulator whose error grows with the reduction length. So each verdict
also checks one input set at a size drawn here: the smoke size with the task's non-parallel dimensions (its
reduction lengths) grown toward their full values and its parallel dimensions grown or kept at random, as far as a
work budget allows the interpreter, never the smoke size itself. Grown values are the smoke value times a power of
two, or the full value, so a kernel whose blocks divide the smoke size (or the full size) divides this one too.

Both jobs learn the size from the job they are given (the dims are injected into the task module's SIZES under
CHECK_SIZE); the candidate only sees its shapes when it is traced.
"""

from __future__ import annotations

import contextlib
import random
import secrets
import threading

__all__ = ["CHECK_SIZE", "WORK_BUDGET", "check_name", "dims_at", "draw", "injected", "inject"]

CHECK_SIZE = "__check__"
# The check size may do this many times the smoke size's work (FLOPs, and input bytes): at most a few interpreter
# seconds for the suite's kernels, and enough for the full reduction length of most tasks (8p_GEMM's K reaches 4096
# of 8192, where a bfloat16 accumulator's error is already past the calibrated bound).
WORK_BUDGET = 8.0
_DEFAULT_PARALLEL = ("batch", "batch_size", "batch_tokens", "num_seqs")
_LOCK = threading.RLock()  # the parent injects into a shared module: one verdict's draw at a time
_MEMO: dict = {}  # (task, digest, size, dims) -> (FLOPs, bytes) or the validity of a size: tracing costs up to 1 s


def check_name(size: str) -> str:
    """The check size's name for a verdict at `size` ("smoke@decode" -> "__check__@decode")."""
    return CHECK_SIZE + (size[size.index("@"):] if "@" in size else "")


def _full_name(size: str) -> str:
    return "full" + (size[size.index("@"):] if "@" in size else "")


def dims_at(task, size: str) -> dict[str, int]:
    """The task's integer parameters at `size`, as its own create_inputs sees them."""
    from jaxbench._common import dims

    module = task.module
    out = dims(getattr(module, "CONFIG", {}) or {}, getattr(module, "SIZES", {}) or {}, size,
               getattr(module, "CONFIGS", None))
    return {k: v for k, v in out.items() if isinstance(v, int) and not isinstance(v, bool)}


def inject(module, size: str, dims: dict) -> None:
    """Make `size` (a check name) a size of the task module: every dimension pinned, after any config override."""
    sizes = module.SIZES
    sizes[CHECK_SIZE] = dict(dims)
    if "@" in size:
        sizes[size] = dict(dims)


@contextlib.contextmanager
def injected(task, size: str, dims: dict):
    """`size` a size of the task for the duration (the parent's module is shared: removed on the way out)."""
    with _LOCK:
        sizes = task.module.SIZES
        saved = {k: sizes[k] for k in (CHECK_SIZE, size) if k in sizes}
        inject(task.module, size, dims)
        try:
            yield
        finally:
            for k in (CHECK_SIZE, size):
                sizes.pop(k, None)
            sizes.update(saved)


def _work(task, size: str) -> tuple[float, float]:
    """(FLOPs, input bytes) at `size`, from the task's own accounting; FLOPs 0 when it declares none."""
    import jax

    structs = jax.eval_shape(lambda: task.create_inputs(size=size, seed=0))
    nbytes = float(sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(structs)))
    return float(task.flops(size) or 0.0), nbytes


def _valid(task, size: str, small_outs) -> bool:
    """The task still builds at `size`, and its outputs keep their rank and dtypes (a structure dim was not broken)."""
    import jax

    try:
        structs = jax.eval_shape(lambda: task.create_inputs(size=size, seed=0))
        outs = jax.tree_util.tree_leaves(jax.eval_shape(task.module.workload, *structs))
    except Exception:  # noqa: BLE001  (the task refuses these dims together: try another draw)
        return False
    return [(len(o.shape), str(o.dtype)) for o in outs] == small_outs


def draw(task, size: str, budget: float = WORK_BUDGET, rng: random.Random | None = None) -> dict | None:
    """{"size": name, "dims": {...}} for a verdict at `size`, or None when the task has no second size to offer
    (nothing shrunk for smoke, no SIZES table, or no grown size the task accepts within the budget)."""
    import jax

    rng = rng or random.Random(secrets.randbits(64))
    if not task.seedable or not isinstance(getattr(task.module, "SIZES", None), dict) or size.startswith("full"):
        return None
    try:
        small, full = dims_at(task, size), dims_at(task, _full_name(size))
        small_work = _work(task, size)
        small_outs = [(len(o.shape), str(o.dtype)) for o in jax.tree_util.tree_leaves(
            jax.eval_shape(task.module.workload, *jax.eval_shape(lambda: task.create_inputs(size=size, seed=0))))]
    except Exception:  # noqa: BLE001  (a task whose sizes cannot be read this way gets no second size)
        return None
    grown = [d for d in small if d in full and full[d] > small[d] > 0]
    if not grown:
        return None
    declared = getattr(task.module, "PARALLEL_DIMS", None) or [d for d in _DEFAULT_PARALLEL if d in full]
    parallel = [d for d in grown if d in set(declared)]
    reduction = [d for d in grown if d not in set(declared)]
    name = check_name(size)

    def memo(kind: str, dims: dict, compute):
        key = (kind, task.name, task.digest, name, tuple(sorted(dims.items())))
        if key not in _MEMO:
            with injected(task, name, dims):
                _MEMO[key] = compute()
        return _MEMO[key]

    def work(dims: dict):
        try:
            return _work(task, name)
        except Exception:  # noqa: BLE001
            return None

    def fits(dims: dict) -> bool:
        got = memo("work", dims, lambda: work(dims))
        if got is None:
            return False
        flops, nbytes = got
        limit_f = budget * small_work[0] if small_work[0] else float("inf")
        return flops <= limit_f and nbytes <= budget * small_work[1]

    def steps(d: str) -> list[int]:  # the values d may take above smoke: smoke x 2^k below full, and full
        out, v = [], small[d] * 2
        while v < full[d]:
            out.append(v)
            v *= 2
        return out + [full[d]]

    for _attempt in range(4):
        cur = dict(small)
        rng.shuffle(reduction)
        for d in reduction:  # the reduction lengths first: as long as the budget allows, full if it can
            for v in reversed(steps(d)):
                if fits({**cur, d: v}):
                    cur[d] = v
                    break
        for d in rng.sample(parallel, len(parallel)):  # parallel dims: grown or kept, at random
            options = [v for v in steps(d)[:2] if fits({**cur, d: v})]
            if options and rng.random() < 0.5:
                cur[d] = rng.choice(options)
        if cur == small:  # never the smoke size itself: grow the cheapest dim that can grow
            for d in sorted(grown, key=lambda n: rng.random()):
                if fits({**cur, d: steps(d)[0]}):
                    cur[d] = steps(d)[0]
                    break
        if cur == small:
            return None
        if memo("valid", cur, lambda: _valid(task, name, small_outs)):
            return {"size": name, "dims": cur}
        reduction = reduction[1:]  # the first grown dim broke the task's structure: leave it at smoke next time
    return None
