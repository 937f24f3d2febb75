"""Loading a benchmark task (a suite name or a public-JAXBench-style folder) and its declared data."""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Callable

import jaxbench

__all__ = ["Task", "TaskError", "load_task", "DEFAULT_TOLERANCE", "FULL_SIZE_CHIPS", "sandbox_folder_code",
           "folder_code_sandboxed", "folder_code_is_sandboxed", "current_describe"]

# Fixed by the benchmark, never by a caller: max|out - ref| / max|ref| must stay below this.
# Measured on CPU: bf16 outputs land near 2.5e-3, f32 kernels near 3e-7 (see platform-facts.md).
DEFAULT_TOLERANCE = {"bfloat16": 2e-2, "float16": 1e-2, "float32": 1e-3, "float64": 1e-6}
# The TPU chips a task's full size must fit (its XLA baseline's compiled program within the chip's HBM), unless its
# baseline.py declares FITS_CHIPS, the subset it does fit.
FULL_SIZE_CHIPS = ("v4", "v5e", "v5p", "v6e")
_MAX_TASK_FILE = 16 << 20  # one file of a folder task handed to a job


class TaskError(ValueError):
    """The task could not be found or does not follow the task interface."""


# Where a folder task's code (its baseline.py, the function beside it) may run. In a person's own CLI it is their
# code and runs in their process; in the MCP server anyone who can write into the root wrote it, so it runs only in
# sandboxed jobs: the server knows a folder task by the facts a job read (`describe`, harness/verdict/task_facts.py).
_PROCESS_DESCRIBE: Callable | None = None
_DESCRIBE = contextvars.ContextVar("maxkernel_folder_code_described_by", default=None)


def sandbox_folder_code(describe: Callable) -> None:
    """From now on this process never imports a folder task's code (the MCP server, at start); `describe(task)`
    returns the module-like facts a sandboxed job read."""
    global _PROCESS_DESCRIBE
    _PROCESS_DESCRIBE = describe


@contextlib.contextmanager
def folder_code_sandboxed(describe: Callable):
    """Within: folder tasks' code runs only in sandboxed jobs (each MCP tool call; threads it starts inherit it)."""
    token = _DESCRIBE.set(describe)
    try:
        yield
    finally:
        _DESCRIBE.reset(token)


def current_describe() -> Callable | None:
    return _DESCRIBE.get() or _PROCESS_DESCRIBE


def folder_code_is_sandboxed() -> bool:
    return current_describe() is not None


@dataclass
class Task:
    name: str
    path: Path  # the task folder
    source: str  # "jaxbench" for the shipped suite, "folder" for any other folder
    _module: ModuleType | None = field(default=None, repr=False)
    # Set where a folder task's code runs only in sandboxed jobs: `module` is then describe(task), read by a job.
    describe: Callable | None = field(default_factory=current_describe, repr=False)

    @property
    def tier(self) -> str:
        return jaxbench.tier_of(self.name)

    @property
    def suite(self) -> str:
        """'jaxbench' or 'realworld' for a shipped task, 'folder' for any other folder."""
        return jaxbench.suite_of(self.name) if self.source == "jaxbench" else "folder"

    @property
    def baseline_file(self) -> Path:
        return self.path / "baseline.py"

    @property
    def degenerate(self) -> str:
        """Why the task's stated work collapses algebraically (its baseline's `DEGENERATE`), or "": a kernel for it
        is judged like any other, but its speed says nothing of the stated work, so fast_p leaves it out."""
        return str(getattr(self.module, "DEGENERATE", "") or "")

    @property
    def reference_kernel(self) -> Path | None:
        """The shipped hand-written Pallas kernel, if the task has one."""
        p = self.path / "kernel.py"
        return p if p.is_file() else None

    @cached_property
    def digest(self) -> str:
        """Content hash of baseline.py and the shared helpers (for a folder task, every file it ships to a job:
        a reference function beside baseline.py counts), for caching references."""
        files = self.files() if self.source != "jaxbench" else {"baseline.py": self.baseline_file.read_bytes()}
        h = hashlib.sha256(files.get("baseline.py", b""))
        common = Path(jaxbench.__file__).with_name("_common.py")
        h.update(common.read_bytes())
        for name, data in files.items():
            if name not in ("baseline.py", "validation.json"):
                h.update(name.encode() + b"\0" + data)
        return h.hexdigest()[:16]

    @property
    def module(self) -> ModuleType:
        if self._module is None:
            if self.described:
                self._module = self.describe(self)
            else:
                self._module = _import_file(self.baseline_file, f"_maxkernel_task_{_ident(self.name)}_{self.digest}")
        return self._module

    @property
    def described(self) -> bool:
        """Whether this process knows the task only by its facts (its code runs in sandboxed jobs alone)."""
        return self.describe is not None and self.source != "jaxbench"

    def structs(self, size: str) -> tuple[list, list]:
        """(input, output) jax.ShapeDtypeStructs at `size`, flattened: traced here, or read by the facts job."""
        import jax

        if self.described:
            return self.module.structs(size)
        inputs = jax.eval_shape(lambda: self.create_inputs(size=size, seed=0))
        outputs = jax.eval_shape(self.module.workload, *inputs)
        return list(jax.tree_util.tree_leaves(inputs)), list(jax.tree_util.tree_leaves(outputs))

    @property
    def config(self) -> dict:
        return dict(getattr(self.module, "CONFIG", {}))

    @property
    def configs(self) -> list[str]:
        """The task's named configs (CONFIGS in baseline.py, the first the default), or [] for a single config."""
        declared = getattr(self.module, "CONFIGS", None) or {}
        if not isinstance(declared, dict) or not all(isinstance(v, dict) for v in declared.values()):
            raise TaskError(f"{self.baseline_file}: CONFIGS must map config names to dicts of overrides")
        return list(declared)

    @property
    def sizes(self) -> list[str]:
        """'full', the declared sizes, and for every config after the first 'SIZE@CONFIG' of each."""
        base = ["full"] + sorted(k for k in getattr(self.module, "SIZES", {}) if "@" not in k)
        return base + [f"{s}@{c}" for c in self.configs[1:] for s in base]

    def config_sizes(self, size: str) -> dict[str, str]:
        """Config name -> the size name that runs it at `size` ('smoke' -> {'prefill': 'smoke', 'decode':
        'smoke@decode'}); {} for a single-config task or a size already naming its config."""
        names = self.configs
        if len(names) < 2 or "@" in size:
            return {}
        return {c: (size if i == 0 else f"{size}@{c}") for i, c in enumerate(names)}

    @property
    def fits_chips(self) -> tuple[str, ...]:
        """The TPU chips whose HBM the full size fits: the baseline's FITS_CHIPS, else FULL_SIZE_CHIPS."""
        from maxkernel import chips

        declared = getattr(self.module, "FITS_CHIPS", FULL_SIZE_CHIPS)
        if isinstance(declared, str) or not all(isinstance(c, str) for c in declared):
            raise TaskError(f"{self.baseline_file}: FITS_CHIPS must be a tuple of chip names, got {declared!r}")
        unknown = [c for c in declared if c not in chips.CHIPS or not chips.CHIPS[c].is_tpu]
        if unknown:
            tpus = ", ".join(c.name for c in chips.CHIPS.values() if c.is_tpu)
            raise TaskError(f"{self.baseline_file}: FITS_CHIPS names {', '.join(map(repr, unknown))}, "
                            f"not TPU chips ({tpus})")
        return tuple(declared)

    @property
    def seedable(self) -> bool:
        """Whether create_inputs takes size/seed (ours) or only dtype (a plain public JAXBench task)."""
        if self.described:
            return bool(self.module.SEEDABLE)
        params = inspect.signature(self.module.create_inputs).parameters
        return "seed" in params and "size" in params

    @property
    def default_dtype(self):
        if self.described:
            return self.module.DEFAULT_DTYPE
        p = inspect.signature(self.module.create_inputs).parameters.get("dtype")
        return None if p is None or p.default is inspect.Parameter.empty else p.default

    def create_inputs(self, size: str = "full", seed: int = 42, dtype=None) -> tuple:
        """The input tuple at `size` for `seed` (plain public tasks: full size, their own fixed seed)."""
        kw = {} if dtype is None else {"dtype": dtype}
        if self.seedable:
            if size not in self.sizes:
                raise TaskError(f"task {self.name} has no size {size!r} (has {', '.join(self.sizes)})")
            out = self.module.create_inputs(size=size, seed=seed, **kw)
        else:
            if size != "full":
                raise TaskError(f"task {self.name} declares no sizes; only --size full works for it")
            out = self.module.create_inputs(**kw)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    def flops(self, size: str = "full") -> int | None:
        fn = getattr(self.module, "get_flops", None)
        if fn is None:
            return None
        try:
            return int(fn(size=size)) if "size" in inspect.signature(fn).parameters else (int(fn()) if size == "full" else None)
        except Exception:
            return None

    def for_job(self) -> tuple[str, dict[str, Path]]:
        """(spec, files) to hand this task to a sandboxed job: suite tasks by name; other folders are copied
        into the job's scratch folder (the sandbox may not see where they live, e.g. under /tmp)."""
        if self.source == "jaxbench":
            return self.name, {}
        return "task", {f"task/{name}": data for name, data in self.files().items()}

    def baseline_source(self) -> str:
        """baseline.py's text (a folder's read without following a link; '' when it is one)."""
        if self.source == "jaxbench":
            return self.baseline_file.read_text()
        return self.files().get("baseline.py", b"").decode(errors="replace")

    def files(self) -> dict[str, bytes]:
        """The folder's .py and .json files, read without following a link (a link in a task folder could name any
        file the process can read, and the job would hand it to the task's code): links and non-files are left out."""
        out = {}
        for p in sorted(self.path.iterdir()):
            if p.suffix in (".py", ".json") and not p.is_symlink():
                data = _read_regular(p, _MAX_TASK_FILE)
                if data is not None:
                    out[p.name] = data
        return out

    def tolerance(self, dtype_name: str) -> float:
        """The task's fixed error bound for outputs of `dtype_name`."""
        own = getattr(self.module, "TOLERANCE", {}) or {}
        if dtype_name in own:
            return float(own[dtype_name])
        return DEFAULT_TOLERANCE.get(dtype_name, DEFAULT_TOLERANCE["float32"])


def load_task(spec: str | Path) -> Task:
    """A task from a suite name (`8p_GEMM`) or a folder (or its baseline.py) in the JAXBench layout."""
    text = str(spec)
    try:
        return Task(name=text, path=jaxbench.task_dir(text), source="jaxbench")
    except KeyError:
        pass
    path = Path(text).expanduser()
    if path.is_file() and path.name == "baseline.py":
        path = path.parent
    if path.is_dir() and (path / "baseline.py").is_file():
        return Task(name=path.resolve().name, path=path.resolve(), source="folder")
    raise TaskError(f"unknown task {text!r}: not a suite task (see `maxkernel bench list`) nor a folder with baseline.py")


def _read_regular(path: Path, limit: int) -> bytes | None:
    """A regular file's bytes, opened without following a link (None for a link, a device, a FIFO, too large)."""
    import os
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(limit + 1)[:limit]
    finally:
        os.close(fd)


def _shipped(path: Path) -> bool:
    return jaxbench.suite_root().resolve() in Path(path).resolve().parents


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def _import_file(path: Path, module_name: str) -> ModuleType:
    if folder_code_is_sandboxed() and not _shipped(path):  # fail closed, whichever way a caller got here
        raise TaskError(f"{path}: a folder task's code runs only in sandboxed jobs in this process")
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise TaskError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        sys.modules.pop(module_name, None)
        raise
    for attr in ("create_inputs", "workload"):
        if not callable(getattr(module, attr, None)):
            raise TaskError(f"{path} does not define {attr}()")
    return module
