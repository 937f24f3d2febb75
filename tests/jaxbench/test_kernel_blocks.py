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
