"""Any JAX function as a program to estimate: `maxkernel estimate --program FILE.py:FN --arg ...`.

The function and its argument specs (as `task new` takes them) become a task folder in the JAXBench layout, written
under the cache folder and named by what it holds (so a repeated estimate is a cache hit), without `task new`'s
validation: nothing is run, only traced and priced. Its FLOPs are the larger of XLA's cost analysis of the CPU
program (which counts a loop body once) and the traced program's count (scan bodies times their lengths), or the
user's --flops; the estimator shrinks it along the independent dims the user names with --parallel, or the one dim
that leads every argument, and (as any XLA program) along large dims the outputs are indexed by (estimate_job).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

from maxkernel.tasknew import specs as S
from maxkernel.tasknew import template, validate
from maxkernel.tasknew.build import _SOURCE_FILE, _positional_names, resolve_function

__all__ = ["program_task", "program_folder", "infer_parallel", "inputs_as_args", "inputs_and_parallel"]

_NOTES = "program.json"  # what the folder's figures assumed, said again on every estimate of it
_ARGS = "arguments.json"  # the --arg specs it was made for (from --inputs, what that function returned)


def inputs_as_args(spec: str, axes: set[tuple[int, int]] | frozenset = frozenset()) -> list[str]:
    """--inputs FILE.py:FN (a function returning the program's positional arguments, called with no arguments and
    evaluated abstractly: nothing is drawn or allocated) as --arg specs: one DTYPE[DIMS] per array it returns, in
    order. Equal sizes share a dim name (D<size>), as in task new; the `axes` given as (argument, axis) are named
    P<size> instead, apart from every other axis of their size (tokens and a hidden dim both 4096 wide)."""
    import jax

    fn, _, _ = resolve_function(spec)
    try:
        structs = jax.eval_shape(fn)
    except Exception as exc:  # noqa: BLE001  (the user's function can raise anything)
        raise S.SpecError(f"--inputs {spec}: calling it with no arguments failed: {type(exc).__name__}: "
                          f"{(str(exc).splitlines() or [''])[0][:200]}") from None
    leaves = jax.tree.leaves(structs if isinstance(structs, (tuple, list)) else (structs,))
    if not leaves or not all(hasattr(x, "shape") and hasattr(x, "dtype") for x in leaves):
        raise S.SpecError(f"--inputs {spec}: it must return the program's arguments as arrays")
    for arg, axis in sorted(axes):
        if arg >= len(leaves) or axis >= len(leaves[arg].shape):
            raise S.SpecError(f"--parallel {arg}.{axis}: --inputs {spec} returns {len(leaves)} arguments of shapes "
                              f"{', '.join(str(tuple(x.shape)) for x in leaves)}: no axis {axis} of argument {arg}")
    names = {v: k for k, v in S.DTYPES.items()}  # the short name of each dtype (the last key listed wins)
    out = []
    for i, x in enumerate(leaves):
        dtype = names.get(str(x.dtype))
        if dtype is None:
            raise S.SpecError(f"--inputs {spec}: an argument of dtype {x.dtype} (supported: "
                              f"{', '.join(sorted(set(S.DTYPES.values())))})")
        if axes:
            dims = [f"{'P' if (i, a) in axes else 'D'}{d}={d}" for a, d in enumerate(x.shape)]
        else:
            dims = [str(d) for d in x.shape]
        out.append(f"{dtype}[{','.join(dims)}]")
    return out


_AXIS = re.compile(r"(\d+)\.(\d+)")


def inputs_and_parallel(inputs: str, parallel: list[str] | None) -> tuple[list[str], list[str]]:
    """(the --arg specs --inputs makes, the --parallel dim names): a --parallel ARG.AXIS (argument ARG's axis AXIS,
    both from 0) names that axis alone, as P<size>; a dim name (D8) is kept."""
    axes = {(int(m[1]), int(m[2])) for m in map(_AXIS.fullmatch, parallel or []) if m}
    args = inputs_as_args(inputs, axes)
    named = [d for d in parallel or [] if not _AXIS.fullmatch(d)]
    sizes = {int(S.parse_specs([args[a]], [], [])[2][0].dims[x][1:]) for a, x in axes} if axes else set()
    return args, named + [f"P{n}" for n in sorted(sizes)]


def refuse_axes_without_inputs(parallel: list[str] | None) -> None:
    bad = [d for d in parallel or [] if _AXIS.fullmatch(d)]
    if bad:
        raise S.SpecError(f"--parallel {bad[0]}: an ARG.AXIS address goes with --inputs; with --arg specs, name the "
                          "dim (bf16[B=8,4096]) and pass --parallel B")


def infer_parallel(arg_specs) -> list[str]:
    """The dim that is the leading axis of every argument with one (a batch), or none."""
    leads = {s.dims[0] for s in arg_specs if s.dims}
    return sorted(leads) if len(leads) == 1 else []


def program_task(function: str, args: list[str], root: Path, *, gens: list[str] | None = None,
                 static: list[str] | None = None, parallel: list[str] | None = None, flops: int | None = None,
                 key: str | None = None):
    """(the task, notes on what was assumed). SpecError for input that cannot be understood or a function that does
    not trace at the shapes given. `key` names the folder in place of this call's own hash of what it was given
    (a sandboxed job is given its caller's, made over the caller's paths)."""
    from maxkernel.tasks import Task

    statics, config, arg_specs = S.parse_specs(args, gens, static)
    notes = []
    if parallel:
        unknown = [d for d in parallel if d not in config]
        if unknown:
            raise S.SpecError(f"--parallel {', '.join(unknown)}: not a dim of the --arg specs (dims: "
                              f"{', '.join(config)}; name them in --arg, e.g. bf16[B=8,4096])")
        dims = list(parallel)
    else:
        dims = infer_parallel(arg_specs)
        if dims:
            notes.append(f"shrunk along {dims[0]} (the dim leading every argument, taken as independent; name "
                         "others with --parallel)")
        else:
            notes.append("no dim leads every argument: shrunk only along dims of 2048 or more that index the outputs "
                         "with the same work per output and that no matmul contracts (name the independent dims with "
                         "--parallel DIM)")
    fn, source, copy = resolve_function(function)
    names = _positional_names(fn, len(arg_specs), statics)
    rows = [(n, s.dtype, s.dims, s.gen) for n, s in zip(names, arg_specs)]
    code = copy.read_bytes() if copy else source["module"].encode()
    key = key or hashlib.sha256(json.dumps([function, args, gens, static, dims, flops], default=str).encode()
                                + code).hexdigest()
    name = f"program_{source['function']}"
    folder = Path(root) / key[:16] / name
    if not (folder / "baseline.py").is_file():
        work = folder.with_name(f".{name}.tmp")
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        if copy:
            shutil.copyfile(copy, work / _SOURCE_FILE)
        facts = dict(name=name, doc=f"{source['function']} priced by `maxkernel estimate --program`.", config=config,
                     args=rows, source=source, static=statics, sizes={"smoke": S.smoke_dims(config, S.lane_dims(arg_specs))},
                     tolerance={}, parallel_dims=tuple(dims))
        (work / "baseline.py").write_text(template.render(**facts, flops={}, bytes_accessed={}))
        counted = {"flops": flops, "bytes": None}
        loops = False
        if flops is None:
            task = Task(name=f"{name}_{key[:8]}", path=work, source="folder")
            try:
                validate.trace_full(task)
            except validate.Refused as exc:
                shutil.rmtree(work, ignore_errors=True)
                raise S.SpecError(str(exc)) from None
            counted = validate.costs(task, "full")
            census = _census(task)  # XLA counts a loop body once; the jaxpr count multiplies by scan lengths
            if census.total_flops > (counted["flops"] or 0):
                counted["flops"] = int(census.total_flops)
            loops = census.opaque_loops
        (work / "baseline.py").write_text(template.render(**facts, flops={"full": counted["flops"]},
                                                          bytes_accessed={"full": counted["bytes"]}))
        if flops is None and not counted["flops"]:
            notes.append("no FLOP count could be made: no compute floor (pass --flops N)")
        elif loops:
            notes.append("FLOPs counted with a while loop whose trip count is data: its body counted once, so the "
                         "compute floor is low (pass --flops N for the true count)")
        elif flops is None:
            notes.append("FLOPs: the larger of XLA's cost analysis and the traced program's count (loops times "
                         "their lengths)")
        (work / _NOTES).write_text(json.dumps(notes))
        (work / _ARGS).write_text(json.dumps(list(args)))
        shutil.rmtree(folder, ignore_errors=True)
        work.rename(folder)
    return Task(name=name, path=folder, source="folder"), json.loads((folder / _NOTES).read_text())


def program_folder(function: str, args: list[str], root: Path, *, inputs: str | None = None, **kw):
    """(the task folder, notes, the argument specs): program_task over --arg specs or --inputs FILE.py:FN, in this
    process where it may import the user's code (a person's CLI), else in a sandboxed job (the MCP server:
    tasknew/program_sandboxed.py)."""
    from maxkernel.tasks import folder_code_is_sandboxed

    if folder_code_is_sandboxed():
        from maxkernel.tasknew.program_sandboxed import program_in_sandbox

        folder, notes = program_in_sandbox(function, args, root, inputs=inputs, **kw)
    else:
        if inputs:
            if args:
                raise S.SpecError("give the arguments once: --arg specs or --inputs FILE.py:FN")
            args, kw["parallel"] = inputs_and_parallel(inputs, kw.get("parallel"))
        else:
            refuse_axes_without_inputs(kw.get("parallel"))
        task, notes = program_task(function, args, root, **kw)
        folder = task.path
    try:
        made_for = json.loads((folder / _ARGS).read_text())
    except (OSError, ValueError):
        made_for = list(args)
    if inputs and made_for:
        notes = [f"arguments from {inputs}: {', '.join(map(str, made_for))}", *notes]
    return folder, notes, [str(a) for a in made_for]


def _census(task):
    """Where the traced program's FLOPs are (integrity's count: scan bodies times their lengths)."""
    import jax

    from maxkernel.harness.verdict.integrity import census

    structs = jax.eval_shape(lambda: task.create_inputs(size="full", seed=0))
    return census(jax.make_jaxpr(task.module.workload)(*structs))
