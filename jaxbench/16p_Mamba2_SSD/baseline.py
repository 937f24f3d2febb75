"""16p_Mamba2_SSD: the Mamba-2-2.7B selective state-space scan in its chunked state-space-duality form."""

import jax
import jax.numpy as jnp

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "mamba2_2_7b_ssd",
    "model": "Mamba-2-2.7B",
    "operator": "ssd",
    "batch": 4,
    "seq_len": 4096,
    "num_heads": 64,
    "head_dim": 64,
    "d_state": 128,
    "d_model": 2560,
    "chunk_size": 256,
}
SIZES = {"smoke": {"batch": 2, "seq_len": 128, "num_heads": 8, "head_dim": 64, "d_state": 64, "d_model": 256}}

# Independent dimensions (sequences and heads scan independently): the TPU estimator may shrink these and extrapolate.
PARALLEL_DIMS = ("batch", "num_heads")


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (x[batch, seq_len, num_heads, head_dim], dt[batch, seq_len, num_heads] before softplus,
    A_log[num_heads] with A = -exp(A_log), B[batch, seq_len, d_state], C[batch, seq_len, d_state], D[num_heads]);
    B and C are one group shared by all heads."""
    d = dims(CONFIG, SIZES, size)
    kx, kdt, ka, kb, kc, kd = keys(seed, 6)
    b, s, h, n = d["batch"], d["seq_len"], d["num_heads"], d["d_state"]
    x = draw(kx, (b, s, h, d["head_dim"]), dtype, seed)
    # softplus(dt) centres near 0.3 and A spans roughly [-20, -0.05], so some heads forget within a step
    # and others carry state across several chunks.
    dt = draw(kdt, (b, s, h), dtype, seed, shift=-1.0)
    a_log = draw(ka, (h,), dtype, seed, scale=1.5)
    # n^-1/4 each keeps C.B, a sum over d_state products, of order one.
    bmat = draw(kb, (b, s, n), dtype, seed, scale=n ** -0.25)
    cmat = draw(kc, (b, s, n), dtype, seed, scale=n ** -0.25)
    skip = draw(kd, (h,), dtype, seed)
    return x, dt, a_log, bmat, cmat, skip


def chunk_size(seq_len):
    """The model's chunk, shortened on short sequences so that there are at least four chunks to pass state across."""
    return min(CONFIG["chunk_size"], max(seq_len // 4, 1))


def workload(x, dt, a_log, bmat, cmat, skip):
    """y_t = sum_{s<=t} (C_t . B_s) exp(sum_{s<r<=t} dt_r A) dt_s x_s + D x_t, computed chunk by chunk: a masked
    quadratic form inside each chunk plus states handed between chunks. Decays, states and accumulation in f32;
    the operands of the two large matmuls are rounded to the input dtype."""
    b, s, h, p = x.shape
    n = bmat.shape[-1]
    q = chunk_size(s)
    if s % q:
        raise ValueError(f"seq_len {s} is not a multiple of the chunk size {q}")
    c = s // q
    dtf = jax.nn.softplus(dt.astype(jnp.float32))  # [b, s, h]
    a = dtf * -jnp.exp(a_log.astype(jnp.float32))
    xc = x.reshape(b, c, q, h, p)
    bc, cc = bmat.reshape(b, c, q, n), cmat.reshape(b, c, q, n)
    dtc = dtf.reshape(b, c, q, h)
    cum = jnp.cumsum(a.reshape(b, c, q, h), axis=2)  # decay from the chunk start to each position
    total = cum[:, :, -1]  # [b, c, h]

    # Within a chunk: weights (C_t . B_s) exp(cum_t - cum_s) dt_s for s <= t.
    t_idx = jnp.arange(q)
    causal = t_idx[:, None] >= t_idx[None, :]
    seg = cum[:, :, :, None, :] - cum[:, :, None, :, :]  # [b, c, t, s, h]
    decay = jnp.exp(jnp.where(causal[None, None, :, :, None], seg, -jnp.inf))
    cb = jnp.einsum("bctn,bcsn->bcts", cc, bc, preferred_element_type=jnp.float32)
    weights = (cb[..., None] * decay * dtc[:, :, None, :, :]).astype(x.dtype)
    y = jnp.einsum("bctsh,bcshp->bcthp", weights, xc, preferred_element_type=jnp.float32)

    # Each chunk's own contribution to the state at its end.
    to_end = (jnp.exp(total[:, :, None, :] - cum) * dtc)[..., None]  # [b, c, s, h, 1]
    xw = (xc.astype(jnp.float32) * to_end).astype(x.dtype)
    states = jnp.einsum("bcshp,bcsn->bchpn", xw, bc, preferred_element_type=jnp.float32)

    # State entering chunk i: chunk j < i's states decayed through chunks j+1 .. i-1.
    ends = jnp.cumsum(total, axis=1)  # [b, c, h]
    starts = ends - total
    c_idx = jnp.arange(c)
    earlier = c_idx[:, None] > c_idx[None, :]
    between = starts[:, :, None, :] - ends[:, None, :, :]  # [b, i, j, h]
    carry = jnp.exp(jnp.where(earlier[None, :, :, None], between, -jnp.inf))
    entering = jnp.einsum("bijh,bjhpn->bihpn", carry, states)

    # The entering state, decayed to each position and read out by C.
    y += jnp.einsum("bctn,bchpn->bcthp", cc.astype(jnp.float32), entering) * jnp.exp(cum)[..., None]
    y = y.reshape(b, s, h, p) + skip.astype(jnp.float32)[:, None] * x.astype(jnp.float32)
    return y.astype(x.dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    b, s, h, p, n = d["batch"], d["seq_len"], d["num_heads"], d["head_dim"], d["d_state"]
    q = chunk_size(s)
    c = s // q
    intra = 2 * b * s * q * n + 2 * b * h * s * q * p  # C.B and the masked quadratic form
    states = 4 * b * h * s * p * n  # writing chunk states and reading them out
    passing = 2 * b * h * c * c * p * n
    return intra + states + passing
