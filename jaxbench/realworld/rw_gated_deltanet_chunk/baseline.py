"""rw_gated_deltanet_chunk: the Qwen3-Next-80B-A3B Gated DeltaNet (gated delta rule) forward in its chunked form;
shapes from Qwen/Qwen3-Next-80B-A3B-Instruct's config.json (linear_num_key_heads 16, linear_num_value_heads 32,
linear_key_head_dim 128, linear_value_head_dim 128)."""

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys

CONFIG = {
    "name": "qwen3_next_80b_gated_deltanet_chunk",
    "model": "Qwen3-Next-80B-A3B",
    "operator": "gated_delta_rule_chunked",
    "batch": 4,
    "seq_len": 4096,
    "num_key_heads": 16,  # linear_num_key_heads: q and k heads
    "num_value_heads": 32,  # linear_num_value_heads: v heads, each sharing the q/k head value_head // 2
    "key_head_dim": 128,
    "value_head_dim": 128,
    "chunk_size": 64,
}
SIZES = {"smoke": {"batch": 1, "seq_len": 256, "num_key_heads": 2, "num_value_heads": 4, "key_head_dim": 128,
                   "value_head_dim": 128}}

# Independent dimensions (sequences and value heads run their own recurrences; the q/k heads they share are read
# either way): the TPU estimator may shrink these and extrapolate.
PARALLEL_DIMS = ("batch", "num_value_heads")

# The l2 normalisation of q and k inside the op: x / sqrt(sum x^2 + eps).
L2_EPS = 1e-6


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (q, k [batch, seq, num_key_heads, key_head_dim], v [batch, seq, num_value_heads, value_head_dim],
    g [batch, seq, num_value_heads] float32 log-decays (< 0), beta [batch, seq, num_value_heads] in (0, 1)).

    g stays float32 whatever `dtype` is: the model computes it in f32 (-exp(A_log) * softplus(a + dt_bias)).
    """
    d = dims(CONFIG, SIZES, size)
    b, s, hk, hv = d["batch"], d["seq_len"], d["num_key_heads"], d["num_value_heads"]
    kq, kk, kv, kg, kh, kb = keys(seed, 6)
    q = draw(kq, (b, s, hk, d["key_head_dim"]), dtype, seed)
    k = draw(kk, (b, s, hk, d["key_head_dim"]), dtype, seed)
    v = draw(kv, (b, s, hv, d["value_head_dim"]), dtype, seed)
    # Per-token decay rates near softplus(-3) ~ 0.05 (a chunk of 64 keeps ~exp(-3) of its entering state), times a
    # per-head factor in [e^-1.5, e^1.5]: some heads forget within a chunk, others carry state across several.
    head_rate = jnp.exp(jax.random.uniform(kh, (hv,), jnp.float32, -1.5, 1.5))
    g = -jax.nn.softplus(draw(kg, (b, s, hv), jnp.float32, seed, shift=-3.0)) * head_rate
    beta = jax.nn.sigmoid(draw(kb, (b, s, hv), jnp.float32, seed)).astype(dtype)
    return q, k, v, g, beta


def _l2norm(x):
    x = x.astype(jnp.float32)
    return x * lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + L2_EPS)


def workload(q, k, v, g, beta):
    """The gated delta rule S_t = S_{t-1} exp(g_t) (I - beta_t k_t k_t^T) + beta_t v_t k_t^T, o_t = S_t q_t, with
    q and k l2-normalised (q also scaled by key_head_dim^-1/2) and the state starting at zero; returns
    (o [batch, seq, num_value_heads, value_head_dim], final state [batch, num_value_heads, key_head_dim,
    value_head_dim] as S^T), both in q's dtype.

    Computed chunk by chunk (chunk_size positions): inside a chunk the rank-one updates are gathered by solving the
    unit lower-triangular system (I + A) X = [beta exp(G) k | beta v], A[r, i] = beta_r exp(G_r - G_i) k_r . k_i
    for i < r (G the in-chunk cumulative log-decay), in f32; a lax.scan over chunks then carries the f32 state.
    Normalisation, decays, the triangular solve and all accumulation are f32; the operands of the matmuls are
    rounded to the input dtype, as a TPU/GPU kernel feeds its matrix unit.
    """
    cd = q.dtype
    b, s, hk, dk = q.shape
    hv, dv = v.shape[2], v.shape[3]
    c = min(CONFIG["chunk_size"], s)
    if s % c or hv % hk:
        raise ValueError(f"seq_len {s} must be a multiple of the chunk {c}, num_value_heads {hv} of num_key_heads {hk}")
    n = s // c
    rep = hv // hk

    # Value head h reads q/k head h // rep (the repeat_interleave grouping of Qwen3-Next).
    qn = (jnp.repeat(_l2norm(q), rep, axis=2) * (dk ** -0.5)).astype(cd)
    kn = jnp.repeat(_l2norm(k), rep, axis=2).astype(cd)

    def chunks(x):  # [b, s, h, ...] -> [b, h, n, c, ...]
        x = x.reshape(b, n, c, hv, *x.shape[3:])
        return jnp.moveaxis(x, 3, 1)

    qc, kc, vc = chunks(qn), chunks(kn), chunks(v)
    bc = chunks(beta.astype(jnp.float32))  # [b, h, n, c]
    gcum = jnp.cumsum(chunks(g.astype(jnp.float32)), axis=-1)  # G: in-chunk cumulative log-decay
    glast = gcum[..., -1]  # [b, h, n]

    idx = jnp.arange(c)
    incl = idx[:, None] >= idx[None, :]
    # exp(G_r - G_i) for i <= r (all exponents <= 0), exact zeros above the diagonal.
    decay = jnp.exp(jnp.where(incl, gcum[..., :, None] - gcum[..., None, :], -jnp.inf))  # [b, h, n, c, c]

    kk = jnp.einsum("bhnrd,bhnid->bhnri", kc, kc, preferred_element_type=jnp.float32)
    a = jnp.where(idx[:, None] > idx[None, :], bc[..., :, None] * decay * kk, 0.0)
    rhs = jnp.concatenate([kc.astype(jnp.float32) * (bc * jnp.exp(gcum))[..., None],
                           vc.astype(jnp.float32) * bc[..., None]], axis=-1)
    sol = lax.linalg.triangular_solve(a + jnp.eye(c, dtype=jnp.float32), rhs, left_side=True, lower=True,
                                      unit_diagonal=True)
    w = sol[..., :dk].astype(cd)  # [b, h, n, c, dk]: minus the state's contribution to the written values, per row
    u0 = sol[..., dk:]  # [b, h, n, c, dv]: the written values with the entering state at zero

    qk = jnp.einsum("bhnrd,bhnid->bhnri", qc, kc, preferred_element_type=jnp.float32)
    attn = (qk * decay).astype(cd)  # in-chunk causal scores, diagonal included
    qg = (qc.astype(jnp.float32) * jnp.exp(gcum)[..., None]).astype(cd)  # q decayed from the chunk start
    kd = (kc.astype(jnp.float32) * jnp.exp(glast[..., None] - gcum)[..., None]).astype(cd)  # k decayed to the end

    def step(state, xs):  # state [b, h, dk, dv] f32: S^T entering the chunk
        w_i, u0_i, attn_i, qg_i, kd_i, gl_i = xs
        st = state.astype(cd)
        u = u0_i - jnp.einsum("bhrk,bhkv->bhrv", w_i, st, preferred_element_type=jnp.float32)
        uc = u.astype(cd)
        o = (jnp.einsum("bhrk,bhkv->bhrv", qg_i, st, preferred_element_type=jnp.float32)
             + jnp.einsum("bhri,bhiv->bhrv", attn_i, uc, preferred_element_type=jnp.float32))
        state = (state * jnp.exp(gl_i)[..., None, None]
                 + jnp.einsum("bhrk,bhrv->bhkv", kd_i, uc, preferred_element_type=jnp.float32))
        return state, o.astype(cd)

    xs = tuple(jnp.moveaxis(x, 2, 0) for x in (w, u0, attn, qg, kd, glast))
    state, o = lax.scan(step, jnp.zeros((b, hv, dk, dv), jnp.float32), xs)  # o [n, b, h, c, dv]
    o = jnp.transpose(o, (1, 0, 3, 2, 4)).reshape(b, s, hv, dv)
    return o, state.astype(cd)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    b, s, hv = d["batch"], d["seq_len"], d["num_value_heads"]
    dk, dv = d["key_head_dim"], d["value_head_dim"]
    c = min(d["chunk_size"], s)
    per_chunk = (4 * c * c * dk  # k k^T and q k^T
                 + c * c * (dk + dv)  # the unit-triangular solve over dk + dv right-hand sides
                 + 2 * c * c * dv  # in-chunk scores times the written values
                 + 6 * c * dk * dv)  # w S, q S and the state update k^T u
    return b * hv * (s // c) * per_chunk
