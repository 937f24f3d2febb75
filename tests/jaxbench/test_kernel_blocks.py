"""Shipped kernels must run at every size the verdict's check size can draw, not only at smoke and full size."""

import random

import pytest

from maxkernel.harness.verdict import checksize
from maxkernel.tasks import load_task


@pytest.mark.unit
def test_causal_conv1d_decode_runs_at_every_drawn_check_size():
    """The verdict's decode check size for rw_causal_conv1d draws conv_dim 1536 for about a third of seeds, and the
    shipped kernel raised there (decode_block_c=896 does not divide 1536): a re-judge failed a third of the time.
    The kernel's block now steps down to a divisor; every drawn conv_dim gets a block that divides it."""
    from jaxbench.realworld.rw_causal_conv1d import kernel

    task = load_task("rw_causal_conv1d")
    drawn = {checksize.draw(task, "smoke@decode", rng=random.Random(s))["dims"]["conv_dim"] for s in range(64)}
    assert 1536 in drawn
    for dim in drawn:
        block = kernel._check_block("conv_dim", dim, 896, 128)
        assert dim % block == 0 and (block % 128 == 0 or block == dim), (dim, block)


def _shipped_kernels():
    from pathlib import Path

    import jaxbench

    root = Path(jaxbench.__file__).parent
    return sorted([*root.glob("*/kernel.py"), *root.glob("realworld/*/kernel.py")])


@pytest.mark.slow
@pytest.mark.parametrize("path", _shipped_kernels(), ids=lambda p: p.parent.name)
def test_every_shipped_kernel_traces_at_every_drawn_check_size(path):
    """The same fault at the depth it lives: a shipped kernel that raises at a size the verdict draws is judged
    wrong on those draws. Every kernel is traced (abstractly, no data) at each distinct check size 12 draws give
    per config; the old rw_causal_conv1d kernel raised here at trace time."""
    import importlib.util

    import jax

    task = load_task(path.parent.name)
    spec = importlib.util.spec_from_file_location(f"shipped_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    seen = set()
    for size in (task.config_sizes("smoke") or {"": "smoke"}).values():
        for seed in range(12):
            drawn = checksize.draw(task, size, rng=random.Random(seed))
            key = drawn and (drawn["size"], tuple(sorted(drawn["dims"].items())))
            if not drawn or key in seen:
                continue
            seen.add(key)
            with checksize.injected(task, drawn["size"], drawn["dims"]):
                structs = jax.eval_shape(lambda: task.create_inputs(size=drawn["size"], seed=0))
                jax.eval_shape(module.workload, *structs)  # raises where the kernel cannot run
    assert seen
