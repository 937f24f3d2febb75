"""17p_Triangle_Multiplication: AlphaFold2's triangle multiplicative update using outgoing edges on the pair rep."""

import jax
import jax.numpy as jnp
from jax import lax

from jaxbench._common import dims, draw, keys, weight

CONFIG = {
    "name": "alphafold2_triangle_multiplication",
    "model": "AlphaFold2",
    "operator": "triangle_multiplication",
    "N": 1536,
    "C": 128,
    "direction": "outgoing",
    "epsilon": 1e-5,
}
SIZES = {"smoke": {"N": 64, "C": 32}}


def create_inputs(dtype=jnp.bfloat16, *, size="full", seed=42):
    """Returns (z[N, N, C], norm_in_scale[C], norm_in_bias[C], w_in[C, 4C], b_in[4C], norm_out_scale[C],
    norm_out_bias[C], w_out[C, C], b_out[C], w_gate[C, C], b_gate[C]). w_in's column blocks are the a projection,
    a gate, b projection and b gate; the hidden width equals C as in AlphaFold2."""
    d = dims(CONFIG, SIZES, size)
    ks = keys(seed, 11)
    c = d["C"]
    z = draw(ks[0], (d["N"], d["N"], c), dtype, seed)
    return (
        z,
        draw(ks[1], (c,), dtype, seed, scale=0.5, shift=1.0),
        draw(ks[2], (c,), dtype, seed, scale=0.2),
        weight(ks[3], (c, 4 * c), dtype, seed),
        draw(ks[4], (4 * c,), dtype, seed, scale=0.5),
        draw(ks[5], (c,), dtype, seed, scale=0.5, shift=1.0),
        draw(ks[6], (c,), dtype, seed, scale=0.2),
        weight(ks[7], (c, c), dtype, seed),
        draw(ks[8], (c,), dtype, seed, scale=0.2),
        weight(ks[9], (c, c), dtype, seed),
        draw(ks[10], (c,), dtype, seed, scale=0.5),
    )


def _layer_norm(x, scale, bias):
    """LayerNorm over the channel axis with f32 statistics."""
    xf = x.astype(jnp.float32)
    centred = xf - jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.mean(lax.square(centred), axis=-1, keepdims=True)
    return centred * lax.rsqrt(var + CONFIG["epsilon"]) * scale.astype(jnp.float32) + bias.astype(jnp.float32)


def workload(z, norm_in_scale, norm_in_bias, w_in, b_in, norm_out_scale, norm_out_bias, w_out, b_out, w_gate,
             b_gate):
    """zn = LN(z); a = sigmoid(zn Wag) * zn Wa, b likewise; t[i,j] = sum_k a[i,k] * b[j,k] per channel;
    out = sigmoid(zn Wg + bg) * (LN(t) Wo + bo). Matmuls accumulate in f32 with operands in the input dtype."""
    dtype = z.dtype
    c = z.shape[-1]
    zn = _layer_norm(z, norm_in_scale, norm_in_bias).astype(dtype)
    proj = jnp.matmul(zn, w_in, preferred_element_type=jnp.float32) + b_in.astype(jnp.float32)
    a_proj, a_gate, b_proj, b_gate_logits = (proj[..., i * c:(i + 1) * c] for i in range(4))
    a = (jax.nn.sigmoid(a_gate) * a_proj).astype(dtype)
    b = (jax.nn.sigmoid(b_gate_logits) * b_proj).astype(dtype)
    # Outgoing edges: row i and row j of the pair rep meet at every third node k.
    t = jnp.einsum("ikc,jkc->ijc", a, b, preferred_element_type=jnp.float32)
    tn = _layer_norm(t, norm_out_scale, norm_out_bias).astype(dtype)
    update = jnp.matmul(tn, w_out, preferred_element_type=jnp.float32) + b_out.astype(jnp.float32)
    gate = jax.nn.sigmoid(jnp.matmul(zn, w_gate, preferred_element_type=jnp.float32) + b_gate.astype(jnp.float32))
    return (gate * update).astype(dtype)


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    n, c = d["N"], d["C"]
    pairs = n * n
    matmuls = 2 * pairs * c * (4 * c + c + c)  # input projections, output projection, output gate
    triangle = 2 * n * pairs * c
    return matmuls + triangle + 20 * pairs * c  # norms, gates and biases
