"""JAX port of the SwiGLU MLP module; nn.Linear keeps weights as [out, in], so each projection is x @ w.T."""

import jax


def swiglu_mlp(x, w_gate, w_up, w_down):
    # x: [T, D]; w_gate, w_up: [F, D]; w_down: [D, F]
    hidden = jax.nn.silu(x @ w_gate.T) * (x @ w_up.T)
    return hidden @ w_down.T
