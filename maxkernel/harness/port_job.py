"""Sandbox job for porting GPU code to JAX: describe the original (its kind, a module's parameters), run the
original in PyTorch on CPU (the oracle; a Triton launcher under Triton's CPU interpreter), or run a JAX port.
The oracle and the port never share a process: each mode is its own job, reading inputs_<i>.npz and writing
out_<i>.npz in its scratch folder."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

__all__ = ["run", "KINDS"]

KINDS = ("module", "autograd", "triton", "function")


def run(job: dict, scratch: Path) -> dict:
    """job: {mode: describe|oracle|candidate, file, name, op_kind?, init?, full_init?, static?, seeds: n, dtype?,
    n_params?} (the job's own "kind" is the worker's handler name)."""
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
    module = _load(scratch / job["file"], "_maxkernel_port_original")
    obj = getattr(module, job["name"], None)
    if obj is None:
        return {"status": "error", "stage": "oracle", "error": f"{job['file']} defines no {job['name']!r}"}
    kind = job.get("op_kind") or _kind(obj, module, torch)
    if mode == "describe":
        return {"status": "ok", "kind": kind, "cuda": bool(torch.cuda.is_available()), **_describe(obj, kind, job, torch)}
    return _oracle(obj, kind, job, scratch, torch)


def _load(path: Path, name: str):
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and triton.jit look their module up by name
    spec.loader.exec_module(module)
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
    from maxkernel.harness.arrays import load_arrays, save_arrays

    static = job.get("static") or {}
    n_params = int(job.get("n_params") or 0)
    backward = bool(job.get("backward"))
    device = "cuda" if job.get("device") == "cuda" else "cpu"  # on an NVIDIA GPU the original kernel itself runs
    if kind == "module":
        instance = _instance(obj, job, torch).to(device)
        names = [n for n, _ in instance.named_parameters()]
    n_out = None
    for i in range(int(job["seeds"])):
        arrays = load_arrays(scratch / f"inputs_{i}.npz")
        tensors = [_to_torch(a, torch).to(device) for a in arrays]
        wrt = [t for t, a in zip(tensors, arrays) if backward and _is_float_array(a)]
        for t in wrt:
            t.requires_grad_(True)
        data, params = (tensors[:len(tensors) - n_params], tensors[len(tensors) - n_params:]) if n_params else (tensors, [])
        before = [t.detach().clone() for t in data]
        with torch.set_grad_enabled(backward):
            if kind == "module":
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
        n_out = len(leaves)
        saved = [_to_numpy(t, torch) for t in leaves]
        if backward:
            # The original's own backward (an autograd.Function's, or autograd through its ops) for the
            # cotangents drawn from the seed the parent gave both jobs.
            cots = [torch.from_numpy(c).to(device=t.device, dtype=t.dtype) for c, t in zip(_cotangents(job["cot_seeds"][i], leaves), leaves)]
            grads = torch.autograd.grad(leaves, wrt, grad_outputs=cots, allow_unused=True)
            saved += [_to_numpy(torch.zeros_like(t) if g is None else g, torch) for g, t in zip(grads, wrt)]
        save_arrays(scratch / f"out_{i}.npz", saved)
    return {"status": "ok", "kind": kind, "n_outputs": n_out}


def _candidate(job: dict, scratch: Path) -> dict:
    import jax
    import numpy as np

    from maxkernel.harness.arrays import load_arrays, save_arrays

    module = _load(scratch / job["file"], "_maxkernel_port_candidate")
    fn = getattr(module, job["name"], None)
    if not callable(fn):
        return {"status": "error", "stage": "candidate", "error": f"{job['file']} defines no function {job['name']!r}"}
    static = job.get("static") or {}
    jitted = jax.jit(lambda *a: fn(*a, **static))
    for i in range(int(job["seeds"])):
        arrays = [jax.numpy.asarray(a) for a in load_arrays(scratch / f"inputs_{i}.npz")]
        if not job.get("backward"):
            out = jitted(*arrays)
            save_arrays(scratch / f"out_{i}.npz", [np.asarray(x) for x in jax.tree_util.tree_leaves(out)])
            continue
        floats = [k for k, a in enumerate(arrays) if _is_float_array(a)]

        def on_floats(*fs, arrays=arrays, floats=floats):
            full = list(arrays)
            for k, f in zip(floats, fs):
                full[k] = f
            return jax.tree_util.tree_leaves(fn(*full, **static))

        leaves, vjp = jax.vjp(on_floats, *[arrays[k] for k in floats])
        cots = [jax.numpy.asarray(c).astype(o.dtype) for c, o in zip(_cotangents(job["cot_seeds"][i], leaves), leaves)]
        grads = vjp(cots)
        save_arrays(scratch / f"out_{i}.npz", [np.asarray(x) for x in list(leaves) + list(grads)])
    return {"status": "ok"}
