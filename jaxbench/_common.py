"""Helpers the task folders share: size tables and seeded, mixed-sign input draws."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

# Each seed picks one distribution, so three consecutive seeds cover all three; every one is mixed-sign.
DISTRIBUTIONS = ("normal", "uniform", "heavy")


def dims(config: dict, sizes: dict, size: str, configs: dict | None = None) -> dict:
    """The task's parameters at `size`: CONFIG for 'full', CONFIG overridden by SIZES[size] otherwise.

    A task with several named configs (CONFIGS = {"prefill": {}, "decode": {"seq_q": 1}}: overrides of CONFIG, the
    first the default) is asked for "SIZE@NAME": CONFIG, then SIZES[SIZE], then CONFIGS[NAME] (so decode's one query
    row stays one at the smoke size), then SIZES["SIZE@NAME"] when a config needs its own smoke dims.
    """
    base, _, name = size.partition("@")
    if base != "full" and base not in sizes:
        raise ValueError(f"unknown size {size!r}; this task has 'full' and {sorted(k for k in sizes if '@' not in k)}")
    out = dict(config)
    if base != "full":
        out.update(sizes[base])
    if name:
        if not configs or name not in configs:
            raise ValueError(f"unknown config {name!r}; this task has {sorted(configs or {})}")
        out.update(configs[name])
        out.update(sizes.get(size, {}))
    return out


def distribution(seed: int) -> str:
    """The input distribution used for `seed`."""
    return DISTRIBUTIONS[seed % len(DISTRIBUTIONS)]


def draw(key, shape, dtype, seed: int, scale: float = 1.0, shift: float = 0.0):
    """A tensor of unit-variance, mixed-sign noise from the seed's distribution, times `scale` plus `shift`."""
    kind = distribution(seed)
    flat = (math.prod(shape),)  # drawn flat and reshaped: high-rank draws compile several times slower
    if kind == "normal":
        x = jax.random.normal(key, flat, jnp.float32)
    elif kind == "uniform":
        x = jax.random.uniform(key, flat, jnp.float32, -math.sqrt(3.0), math.sqrt(3.0))
    else:  # Student-t with 4 degrees of freedom, scaled to unit variance: occasional large values.
        # Closed form Z / sqrt(chi2_4 / 4), chi2_4 = -2 log(U1 U2): compiles far faster than jax.random.t.
        kz, k1, k2 = jax.random.split(key, 3)
        u = jax.random.uniform(k1, flat, jnp.float32, 1e-7, 1.0) * jax.random.uniform(k2, flat, jnp.float32, 1e-7, 1.0)
        x = jax.random.normal(kz, flat, jnp.float32) / jnp.sqrt(-0.5 * jnp.log(u)) / math.sqrt(2.0)
    return (x.reshape(shape) * scale + shift).astype(dtype)


def weight(key, shape, dtype, seed: int, fan_in: int | None = None):
    """A weight tensor scaled by 1/sqrt(fan_in) (default: shape[0]) so layer outputs stay O(1)."""
    fan_in = fan_in or shape[0]
    return draw(key, shape, dtype, seed, scale=1.0 / math.sqrt(fan_in))


def keys(seed: int, n: int):
    """`n` independent PRNG keys for `seed`."""
    return list(jax.random.split(jax.random.PRNGKey(seed), n))
