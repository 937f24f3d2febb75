"""`maxkernel port`: a PyTorch, Triton or CUDA operator to a JAX reference proven equivalent to the original."""

from __future__ import annotations

import click

from maxkernel.cli._common import UsageError, emit, json_option, progress

__all__ = ["port"]

INSTALL = "port needs PyTorch (the original runs on CPU as the oracle): pip install 'maxkernel[port]'"


def _need_torch(kind: str | None) -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise UsageError(INSTALL) from None
    if kind == "triton":
        try:
            import triton  # noqa: F401
        except ImportError:
            raise UsageError("a Triton source runs under Triton's CPU interpreter: pip install triton") from None


@click.command()
@click.option("--from", "source", required=True, metavar="FILE.py[:NAME]",
              help="the original: an nn.Module class, a torch function, an autograd.Function, or a Triton launcher")
@click.option("--kind", type=click.Choice(["torch", "triton", "cuda"]), default=None,
              help="what the source is (default: read from its imports)")
@click.option("--arg", "args", multiple=True, required=True, metavar="DTYPE[DIMS]",
              help="the operator's tensor arguments, in order, as for `task new`: bf16[T=4096,H=2048]")
@click.option("--arg-gen", "gens", multiple=True, metavar="GEN", help="input generator per --arg (as `task new`)")
@click.option("--init", "init", multiple=True, metavar="NAME=VALUE",
              help="a module's constructor argument; a dim name follows the size (--init dim=H)")
@click.option("--dim", "dims", multiple=True, metavar="NAME=INT",
              help="a named size no --arg carries, for constructor arguments (--dim F=11008 --init hidden=F)")
@click.option("--static", "static", multiple=True, metavar="NAME=VALUE", help="keyword argument on every call")
@click.option("--smoke", "smoke", multiple=True, metavar="DIM=INT", help="override a dim's check (smoke) size")
@click.option("--oracle", default=None, metavar="FILE.py:FN",
              help="a PyTorch reference of a Triton/CUDA kernel's semantics, run as the oracle instead of the source")
@click.option("--jax", "jax_port", default=None, metavar="FILE.py:FN",
              help="check this JAX port instead of asking the agent to write one")
@click.option("--backward", is_flag=True,
              help="check gradients too: the original's backward (an autograd.Function's own) vs jax.vjp of the port")
@click.option("--seeds", default=3, show_default=True, type=click.IntRange(min=1, max=16))
@click.option("--out", default=None, type=click.Path(file_okay=False),
              help="write the proven port as a task folder here (bring-your-own format)")
@click.option("--force", is_flag=True, help="replace --out if it is a task folder")
@click.option("--model", default=None, help="model for the porter (and the loop): replay, gemini-..., or LiteLLM")
@click.option("--optimize", is_flag=True, help="then run the autonomous loop on the task for a Pallas kernel")
@json_option
def port(source, kind, args, gens, init, dims, static, smoke, oracle, jax_port, backward, seeds, out, force, model, optimize,
         as_json) -> None:
    """Port the operator in FILE.py to a pure-JAX reference and prove it: the original runs on CPU (PyTorch; a
    Triton launcher under Triton's interpreter; a CUDA kernel through --oracle) in the sandbox, the port in another,
    on the same inputs across seeds and dtypes, compared with the harness's tolerances. An equivalent port becomes
    a task folder (--out); --optimize then writes its Pallas kernel. Exit 0 equivalent, 1 not equivalent or the
    check failed, 2 usage."""
    import os

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    _need_torch(kind)
    from maxkernel.porting import PortError, run_port

    progress(f"porting {source}" + (f", checking {jax_port}" if jax_port else ""))
    try:
        doc = run_port(source, list(args), kind=kind, gens=list(gens), init=list(init), dims=list(dims),
                       static=list(static), smoke=list(smoke), oracle=oracle, jax=jax_port, out=out, force=force,
                       model=model, seeds=seeds, backward=backward, optimize=optimize,
                       progress=progress)
    except PortError as exc:
        raise UsageError(str(exc)) from None
    emit(as_json, doc, doc["summary"])
    if not doc["equivalent"] or (doc["task"] and not doc["task"]["ok"]) or (doc["optimize"] or {}).get("error"):
        raise click.exceptions.Exit(1)
