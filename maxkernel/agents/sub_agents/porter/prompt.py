"""The porter's instruction: the original's source, how it is called, and what the last check found."""

from pathlib import Path

from maxkernel.agents.sub_agents._common import provider

SOURCE_CHARS = 12000

ROLE = """
You are the porter. Write a pure-JAX reference of the operator below into jax_port.py in the workspace
(write_file, the whole file), then call check_port: the harness runs the original and your port on the same
random inputs, seed by seed, and says whether they agree within its fixed tolerances and, if not, where.

Rules for the port:
- The operator is the file's first public top-level function. Its positional arguments are the operator's
  tensor arguments in the order given below, then (for a module) its parameters in named_parameters() order,
  as arrays in the layout PyTorch keeps them (nn.Linear's weight is [out, in]). Keyword arguments listed as
  static are keyword parameters with the same names and defaults.
- Idiomatic JAX: jax.numpy and jax.lax, static shapes, no Python loops over data, no Pallas. Import only jax,
  numpy, math, functools. Return what the original returns (same shapes and dtypes; a tuple for several).
- Follow the original's precision: where it upcasts (x.float(), softmax in float32) do the same, and cast back
  where it casts back. A Triton launcher's grid and block constants are tiling, not semantics: port what the
  kernel computes. An in-place op returns the arguments it writes.
"""

ANSWER = """

Answer with one sentence: what the port computes, and the check's result."""


def _source(port: dict) -> str:
    try:
        text = Path(port.get("file", "")).read_text(errors="replace")
    except OSError:
        return "(the source could not be read)"
    return text if len(text) <= SOURCE_CHARS else text[:SOURCE_CHARS] + "\n# ... (cut)"


def _build(state) -> str:
    port = dict(state.get("port") or {})
    stem = Path(port.get("file", "operator.py")).stem
    head = (f"Task: port_{stem}\nIteration: 1\nDebug round: {state.get('debug_round') or 0}\n")
    facts = (f"Operator: {port.get('name', '?')} ({port.get('kind', 'torch')}) from {Path(port.get('file', '?')).name}\n"
             f"Tensor arguments: {', '.join(port.get('args') or []) or '(none)'}\n"
             f"Constructor arguments: {', '.join(port.get('init') or []) or '(none)'}\n"
             f"Static keyword arguments: {', '.join(port.get('static') or []) or '(none)'}\n")
    params = state.get("port_params") or []
    if params:
        facts += "Module parameters (trailing inputs, in this order): " + ", ".join(
            f"{p['name']} {p['shape']}" for p in params) + " (at the check's size)\n"
    oracle = f"The oracle is a PyTorch reference of its semantics: {port['oracle']}\n" if port.get("oracle") else ""
    last = state.get("port_feedback") or ""
    feedback = f"\nYOUR LAST PORT WAS CHECKED AND FAILED:\n{last}\nFix jax_port.py.\n" if last else ""
    return (head + ROLE + "\n" + facts + oracle + f"\nThe original ({Path(port.get('file', '?')).name}):\n```python\n"
            + _source(port) + "\n```\n" + feedback + ANSWER)


instruction = provider(_build)
