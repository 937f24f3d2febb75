"""Sandbox job for porting GPU code to JAX: describe the original (its kind, a module's parameters), run the
original in PyTorch on CPU (the oracle; a Triton launcher under Triton's CPU interpreter), or run a JAX port.
The oracle and the port never share a process: each mode is its own job, reading inputs_<i>.npz and writing
out_<i>.npz in its scratch folder."""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import string
import sys
from pathlib import Path

__all__ = ["run", "KINDS"]

KINDS = ("module", "autograd", "triton", "function")


def run(job: dict, scratch: Path) -> dict:
    """job: {mode: describe|oracle|candidate, file, name, op_kind?, init?, full_init?, static?, seeds: n, dtype?,
    n_params?, inits?: a module's init per input (inputs at other sizes), extra_from?: the first input at the
    check's second size} (the job's own "kind" is the worker's handler name)."""
    mode = job.get("mode")
    if mode == "candidate":
        return _candidate(job, scratch)
    if mode not in ("describe", "oracle"):
        return {"status": "error", "stage": "job", "error": f"unknown port mode {mode!r}"}
    on_gpu = job.get("device") == "cuda"
    if not on_gpu and (job.get("op_kind") == "triton" or _imports_triton(scratch / job["file"])):
        os.environ["TRITON_INTERPRET"] = "1"  # Triton's own interpreter runs the kernel on CPU tensors
    try:
        import torch
    except ImportError:
        return {"status": "error", "stage": "oracle", "error": "PyTorch is not installed: pip install 'maxkernel[port]'"}
    torch.manual_seed(0)
    module = _load(scratch / job["file"])
    obj = getattr(module, job["name"], None)
    if obj is None:
        return {"status": "error", "stage": "oracle", "error": f"{job['file']} defines no {job['name']!r}"}
    kind = job.get("op_kind") or _kind(obj, module, torch)
    if mode == "describe":
        return {"status": "ok", "kind": kind, "cuda": bool(torch.cuda.is_available()), **_describe(obj, kind, job, torch)}
    out = _oracle(obj, kind, job, scratch, torch)
    # What ran, read after the run (not from the source's kind): the device the tensors were on, and whether
    # Triton was imported and ran under its CPU interpreter.
    triton = "triton" in sys.modules
    out["ran"] = {"device": "cuda" if on_gpu else "cpu", "triton": triton,
                  "triton_interpreter": triton and os.environ.get("TRITON_INTERPRET") == "1"}
    return out


def module_name() -> str:
    """A module name drawn per job, with no fixed prefix or length: code that branches on its own __name__ (or on
    a class's repr) cannot tell the check from anywhere else."""
    first = string.ascii_letters + "_"
    rest = first + string.digits
    while True:
        name = secrets.choice(first) + "".join(secrets.choice(rest) for _ in range(5 + secrets.randbelow(12)))
        if name not in sys.modules and not name.startswith("__") and name.isidentifier():
            return name


def _load(path: Path, guard: Path | None = None):
    """Import a source under a drawn name; with `guard` (a JAX port in a sandboxed job), the audit hook of
    harness/sandbox/guard.py is armed just before its first line runs, as for a kernel."""
    sys.path.insert(0, str(path.parent))
    name = module_name()
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and triton.jit look their module up by name
    if guard is None:
        spec.loader.exec_module(module)
        return module
    from maxkernel.harness.sandbox import guard as _guard

    code = compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    _guard.arm(path, guard, code=code, module=module)
    exec(code, module.__dict__)
    return module


def _imports_triton(path: Path) -> bool:
    text = path.read_text(errors="replace") if path.is_file() else ""
    return "import triton" in text or "from triton" in text


def _kind(obj, module, torch) -> str:
    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        return "module"
    if isinstance(obj, type) and issubclass(obj, torch.autograd.Function):
        return "autograd"
    if "triton" in sys.modules:
        from triton.runtime.jit import JITFunction

        if any(isinstance(v, JITFunction) for v in vars(module).values()):
            return "triton"
    return "function"


def _instance(obj, job: dict, torch):
    module = obj(**(job.get("init") or {}))
    module.eval()
    dtype = job.get("dtype")
    if dtype:
        module.to(_torch_dtype(dtype, torch))
    return module


def _describe(obj, kind: str, job: dict, torch) -> dict:
    """A module's parameters in named_parameters() order: shape, and the range its own init draws from."""
    if kind != "module":
        return {"params": [], "buffers": []}
    module = obj(**(job.get("init") or {}))
    full = {}
    if job.get("full_init") is not None:  # shapes at full size without allocating them
        with torch.device("meta"):
            full = {n: list(p.shape) for n, p in obj(**job["full_init"]).named_parameters()}
    params = []
    for name, p in module.named_parameters():
        t = p.detach().float()
        params.append({"name": name, "shape": list(t.shape), "dtype": str(p.dtype).replace("torch.", ""),
                       "min": float(t.min()) if t.numel() else 0.0, "max": float(t.max()) if t.numel() else 0.0,
                       "full_shape": full.get(name, list(t.shape))})
    return {"params": params, "buffers": [n for n, _ in module.named_buffers()]}


def _torch_dtype(name: str, torch):
    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
            "float64": torch.float64}.get(name) or getattr(torch, name)


def _to_torch(a, torch):
    import numpy as np

    if str(a.dtype) == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(a.astype(np.float32))).to(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(a))


def _to_numpy(t, torch):
    import ml_dtypes
    import numpy as np

    if not isinstance(t, torch.Tensor):
        return np.asarray(t)
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy().copy()


def _flat(out) -> list:
    if isinstance(out, (tuple, list)):
        return [leaf for item in out for leaf in _flat(item)]
    if isinstance(out, dict):
        return [leaf for key in sorted(out) for leaf in _flat(out[key])]
    return [out]


def _cotangents(seed: int, outs: list) -> list:
    """The backward check's output gradients: drawn from the seed both jobs are given, so both use the same."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.standard_normal(tuple(o.shape)).astype(np.float32) for o in outs]


def _is_float_array(a) -> bool:
    return str(a.dtype).startswith(("float", "bfloat"))


def _oracle(obj, kind: str, job: dict, scratch: Path, torch) -> dict:
    n_inputs = int(job["seeds"])
    extra_from = int(job.get("extra_from") or n_inputs)
    instances: dict[str, tuple] = {}
    n_out, failed = None, {}
    for i in range(n_inputs):
        if i < extra_from:
            got = _oracle_one(obj, kind, job, scratch, torch, i, instances)
            if isinstance(got, dict):
                return got
            n_out = got
            continue
        try:  # the second size: the original failing there is named by the parent, never blamed on the port
            got = _oracle_one(obj, kind, job, scratch, torch, i, instances)
        except Exception as exc:  # noqa: BLE001
            got = {"error": f"{type(exc).__name__}: {exc}"}
        if isinstance(got, dict):
            failed[str(i)] = str(got.get("error"))[:600]
    return {"status": "ok", "kind": kind, "n_outputs": n_out, "failed": failed}


def _module_at(obj, job: dict, i: int, instances: dict, device: str, torch) -> tuple:
    """The module built with input i's init (an input at another size has its own), once per distinct init."""
    inits = job.get("inits") or []
    init = inits[i] if i < len(inits) else job.get("init")
    key = json.dumps(init, sort_keys=True, default=str)
    if key not in instances:
        torch.manual_seed(0)
        instance = _instance(obj, {**job, "init": init}, torch).to(device)
        instances[key] = (instance, [n for n, _ in instance.named_parameters()])
    return instances[key]


def _oracle_one(obj, kind: str, job: dict, scratch: Path, torch, i: int, instances: dict) -> int | dict:
    """Input i's outputs (and gradients) to out_<i>.npz; how many outputs, or an error result."""
    from maxkernel.harness.verdict.arrays import load_arrays, save_arrays

    static = job.get("static") or {}
    n_params = int(job.get("n_params") or 0)
    backward = bool(job.get("backward"))
    device = "cuda" if job.get("device") == "cuda" else "cpu"  # on an NVIDIA GPU the original kernel itself runs
    arrays = load_arrays(scratch / f"inputs_{i}.npz")
    tensors = [_to_torch(a, torch).to(device) for a in arrays]
    wrt = [t for t, a in zip(tensors, arrays) if backward and _is_float_array(a)]
    for t in wrt:
        t.requires_grad_(True)
    data, params = (tensors[:len(tensors) - n_params], tensors[len(tensors) - n_params:]) if n_params else (tensors, [])
    before = [t.detach().clone() for t in data]
    if backward:  # the op sees copies: an in-place one then returns None and is refused below in plain words,
        data = [t.clone() for t in data]  # not by torch's "leaf Variable ... in-place operation"; grads flow back
    with torch.set_grad_enabled(backward):
        if kind == "module":
            instance, names = _module_at(obj, job, i, instances, device, torch)
            for name, (_, p), a in zip(names, instance.named_parameters(), params):
                if tuple(p.shape) != tuple(a.shape):
                    return {"status": "error", "stage": "oracle", "error": f"parameter {name} is {list(p.shape)} "
                            f"at this size, drawn {list(a.shape)}"}
            out = torch.func.functional_call(instance, dict(zip(names, params)), tuple(data), static)
        elif kind == "autograd":
            out = obj.apply(*data, *static.values())
        else:
            out = obj(*data, **static)
    if out is None:  # an in-place op: its outputs are the arguments it wrote
        if backward:
            return {"status": "error", "stage": "oracle", "error": "the backward check needs an op that returns "
                    "its outputs (this one writes its arguments in place)"}
        out = [t for t, b in zip(data, before) if not torch.equal(t, b)]
        if not out:
            return {"status": "error", "stage": "oracle",
                    "error": f"{job['name']} returned None and changed none of its arguments"}
    leaves = _flat(out)
    saved = [_to_numpy(t, torch) for t in leaves]
    if backward:
        # The original's own backward (an autograd.Function's, or autograd through its ops) for the
        # cotangents drawn from the seed the parent gave both jobs.
        cots = [torch.from_numpy(c).to(device=t.device, dtype=t.dtype) for c, t in zip(_cotangents(job["cot_seeds"][i], leaves), leaves)]
        grads = torch.autograd.grad(leaves, wrt, grad_outputs=cots, allow_unused=True)
        saved += [_to_numpy(torch.zeros_like(t) if g is None else g, torch) for g, t in zip(grads, wrt)]
    save_arrays(scratch / f"out_{i}.npz", saved)
    return len(leaves)


def _candidate(job: dict, scratch: Path) -> dict:
    import jax

    from maxkernel.harness.jobs.candidate_job import job_guard

    try:
        module = _load(scratch / job["file"], guard=job_guard(job, scratch))
    except Exception as exc:  # noqa: BLE001  (the port's import can raise anything; the guard refuses with one)
        return {"status": "error", "stage": "candidate", "error": f"{type(exc).__name__}: {exc}"[:2000]}
    fn = getattr(module, job["name"], None)
    if not callable(fn):
        return {"status": "error", "stage": "candidate", "error": f"{job['file']} defines no function {job['name']!r}"}
    static = job.get("static") or {}
    jitted = jax.jit(lambda *a: fn(*a, **static))
    for i in range(int(job["seeds"])):
        try:
            _candidate_one(fn, jitted, job, scratch, i)
        except Exception as exc:  # noqa: BLE001  (which input it failed on: the parent names that input's size)
            import traceback

            return {"status": "error", "stage": "candidate", "input": i, "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()[-3000:]}
    return {"status": "ok"}


def _candidate_one(fn, jitted, job: dict, scratch: Path, i: int) -> None:
    import jax
    import numpy as np

    from maxkernel.harness.verdict.arrays import load_arrays, save_arrays

    static = job.get("static") or {}
    arrays = [jax.numpy.asarray(a) for a in load_arrays(scratch / f"inputs_{i}.npz")]
    if not job.get("backward"):
        out = jitted(*arrays)
        save_arrays(scratch / f"out_{i}.npz", [np.asarray(x) for x in jax.tree_util.tree_leaves(out)])
        return
    floats = [k for k, a in enumerate(arrays) if _is_float_array(a)]

    def on_floats(*fs):
        full = list(arrays)
        for k, f in zip(floats, fs):
            full[k] = f
        return jax.tree_util.tree_leaves(fn(*full, **static))

    leaves, vjp = jax.vjp(on_floats, *[arrays[k] for k in floats])
    cots = [jax.numpy.asarray(c).astype(o.dtype) for c, o in zip(_cotangents(job["cot_seeds"][i], leaves), leaves)]
    grads = vjp(cots)
    save_arrays(scratch / f"out_{i}.npz", [np.asarray(x) for x in list(leaves) + list(grads)])
