"""Running untrusted kernel code in a child process: bubblewrap isolation, rlimits, process-group kills."""

from __future__ import annotations

import glob
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from maxkernel.settings import get_settings

__all__ = ["SandboxResult", "Worker", "WorkerPool", "isolation_mode", "run_job"]

# Variables a kernel may need to find its device; everything else (API keys, cloud credentials) is dropped.
_ENV_ALLOW = re.compile(r"^(PATH|LANG|LC_ALL|TZ|JAX_.*|XLA_FLAGS|TPU_.*|LIBTPU_.*|CUDA_.*|NVIDIA_.*|LD_LIBRARY_PATH|TF_CPP_.*)$")
_ENV_DENY = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|AUTH)", re.I)
# Home-directory files that hold credentials: masked even though the rest of the file system is readable.
_SECRET_PATHS = (".config/gcloud", ".ssh", ".aws", ".azure", ".kube", ".docker", ".netrc", ".git-credentials",
                 ".pypirc", ".config/gh")


@dataclass
class SandboxResult:
    """What came back from one job: `status` is ok, timeout, crashed (no result written) or error."""

    status: str
    result: dict | None
    returncode: int | None
    stderr_tail: str
    wall_s: float
    isolation: str
    worker: "Worker | None" = field(default=None, repr=False)

    @property
    def scratch(self) -> Path | None:
        return self.worker.scratch if self.worker else None

    def cleanup(self) -> None:
        """Remove the job's scratch folder (its outputs are gone after this)."""
        if self.worker is not None:
            self.worker.discard()


@lru_cache(maxsize=1)
def isolation_mode() -> str:
    """'bwrap' when bubblewrap works here, else 'rlimits' (with a warning): no namespaces, limits only."""
    wanted = get_settings().sandbox
    if wanted == "none":
        return "rlimits"
    exe = shutil.which("bwrap")
    if exe:
        probe = subprocess.run([exe, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                               capture_output=True, timeout=30)
        if probe.returncode == 0:
            return "bwrap"
    if wanted == "bwrap":
        raise RuntimeError("MAXKERNEL_SANDBOX=bwrap but bubblewrap is missing or does not work here "
                           "(install Debian's 'bubblewrap')")
    warnings.warn("bubblewrap is not available: candidate kernels run with rlimits and a clean environment "
                  "only, without file-system or network isolation (install Debian's 'bubblewrap')", stacklevel=2)
    return "rlimits"


def _child_env(scratch: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if _ENV_ALLOW.match(k) and not _ENV_DENY.search(k)}
    env.update(HOME=str(scratch), TMPDIR=str(scratch), PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1",
               TPU_SKIP_MDS_QUERY="1", ALLOW_MULTIPLE_LIBTPU_LOAD="1")
    env.setdefault("JAX_PLATFORMS", "cpu" if not _accelerator_nodes() else "")
    env.setdefault("PATH", "/usr/bin:/bin")
    return env


def _code_roots() -> list[Path]:
    """Folders under /tmp that hold importable code (sys.path entries, this package): they must stay visible."""
    import maxkernel

    tmp = Path("/tmp")
    found = {Path(p).resolve() for p in sys.path if p and Path(p).is_dir()}
    found.add(Path(maxkernel.__file__).resolve().parent.parent)
    try:
        import jaxbench

        found.add(Path(jaxbench.__file__).resolve().parent.parent)
    except ImportError:
        pass
    return sorted(p for p in found if tmp in p.parents and p.parent != tmp / "pytest-of-root")


def _accelerator_nodes() -> list[str]:
    return sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/accel*") + glob.glob("/dev/vfio"))


def _bwrap_prefix(scratch: Path) -> list[str]:
    s = get_settings()
    args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--unshare-all", "--die-with-parent", "--new-session"]
    for node in _accelerator_nodes():
        args += ["--dev-bind", node, node]
    # /tmp is hidden, but the code the worker imports may live there (a checkout under /tmp): show it read-only.
    for root in _code_roots():
        args += ["--ro-bind", str(root), str(root)]
    home = Path.home()
    # Every place maxkernel keeps references or sessions (configured and default), so a candidate cannot
    # read a cached reference output left by an earlier run with other settings.
    ours = {s.cache_dir, s.data_dir, home / ".cache" / "maxkernel", home / ".local" / "share" / "maxkernel"}
    for p in ours:  # created now, so that a worker started before the first reference still hides it
        p.mkdir(parents=True, exist_ok=True)
    masked = [home / p for p in _SECRET_PATHS] + sorted(ours) + [Path.cwd() / ".env"]
    for p in masked:
        if p.is_dir():
            args += ["--tmpfs", str(p)]
        elif p.exists():
            args += ["--ro-bind", "/dev/null", str(p)]
    args += ["--bind", str(scratch), str(scratch), "--chdir", str(scratch)]
    return args


def _limits(memory_mb: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 30, 4 << 30))
    return apply


@dataclass
class Worker:
    """One started child process with its own scratch folder, waiting for a single job on stdin."""

    proc: subprocess.Popen
    scratch: Path
    log: Path
    isolation: str
    started: float = field(default_factory=time.monotonic)

    @classmethod
    def start(cls, root: Path, memory_mb: int | None = None, warm_compiler: str | None = None) -> "Worker":
        memory_mb = memory_mb or get_settings().eval_memory_mb
        scratch = Path(tempfile.mkdtemp(prefix="w-", dir=root))
        log = scratch.with_suffix(".log")  # beside the scratch folder, outside the candidate's view
        mode = isolation_mode()
        cmd = [sys.executable, "-P", "-m", "maxkernel.harness.worker", str(scratch)]
        if warm_compiler:
            cmd.append(f"--warm-compiler={warm_compiler}")
        if mode == "bwrap":
            cmd = _bwrap_prefix(scratch) + cmd
        prlimit = shutil.which("prlimit")
        # prlimit sets the limits without a Python preexec_fn, which would force a fork of this (threaded,
        # JAX-importing) process; the fallback does the same from inside the child.
        if prlimit:
            cmd = [prlimit, f"--as={memory_mb << 20}", "--core=0", f"--fsize={4 << 30}", "--"] + cmd
        with open(log, "wb") as err:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=err, stderr=err, cwd=scratch,
                                    env=_child_env(scratch), start_new_session=True,
                                    preexec_fn=None if prlimit else _limits(memory_mb))
        return cls(proc, scratch, log, mode)

    def submit(self, job: dict, timeout: float) -> SandboxResult:
        """Send `job`, wait up to `timeout` seconds, and kill the whole process group whatever happens."""
        t0 = time.monotonic()
        status = "ok"
        try:
            self.proc.stdin.write(json.dumps(job).encode())
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            status = "timeout"
        finally:
            self.kill()
        wall = time.monotonic() - t0
        result = None
        result_file = self.scratch / "result.json"
        if status == "ok":
            try:
                result = json.loads(result_file.read_text())
            except (OSError, ValueError):
                status = "crashed"
            else:
                if not isinstance(result, dict):
                    status, result = "crashed", None
                elif result.get("status") == "error" and result.get("stage") == "worker":
                    status = "error"
        return SandboxResult(status, result, self.proc.returncode, self.stderr_tail(), wall, self.isolation, self)

    def kill(self) -> None:
        # Always signal the group: the leader may be gone while processes it started live on.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def stderr_tail(self, limit: int = 4000) -> str:
        try:
            data = self.log.read_bytes()
        except OSError:
            return ""
        text = data[-limit:].decode(errors="replace")
        lines = [ln for ln in text.splitlines() if not _NOISE.search(ln)]
        return "\n".join(lines)[-limit:]

    def discard(self) -> None:
        self.kill()
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.log.unlink(missing_ok=True)


# libtpu prints these on every CPU-only start; they are not the kernel's fault.
_NOISE = re.compile(r"TPU_ACCELERATOR_TYPE|TPU_WORKER_HOSTNAMES|libtpu_init_utils|Source Location Trace|"
                    r"InitGoogle|could not determine TPU")


class WorkerPool:
    """Keeps `size` sandboxed workers started (imports done) so a job does not wait for a cold start.

    Each worker runs exactly one job and is then killed: no process is reused across candidates.
    """

    def __init__(self, size: int | None = None, memory_mb: int | None = None, warm_compiler: str | None = None):
        self.size = get_settings().pool_size if size is None else size
        self.memory_mb = memory_mb
        self.warm_compiler = warm_compiler  # a chip: pre-started workers load libtpu and compile once for it
        self.root = Path(tempfile.mkdtemp(prefix="maxkernel-sandbox-"))
        self._ready: list[Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        self._fill()

    def _fill(self) -> None:
        with self._lock:
            while not self._closed and len(self._ready) < self.size:
                self._ready.append(Worker.start(self.root, self.memory_mb, self.warm_compiler))

    def acquire(self) -> Worker:
        with self._lock:
            alive = [w for w in self._ready if w.proc.poll() is None]
            for w in self._ready:
                if w not in alive:
                    w.discard()
            self._ready = alive
            worker = self._ready.pop(0) if self._ready else None
        if worker is None:
            worker = Worker.start(self.root, self.memory_mb, self.warm_compiler)
        self._fill()
        return worker

    def run(self, job: dict, files: dict[str, bytes | Path] | None = None, timeout: float | None = None) -> SandboxResult:
        """Run one job in a fresh worker, with `files` copied into its scratch folder first."""
        worker = self.acquire()
        if worker.proc.poll() is not None:
            # A pre-started worker can die between acquire and now (bwrap's --die-with-parent fires when the
            # thread that started it exits): that is no verdict on the candidate, so start a fresh one.
            worker.discard()
            worker = Worker.start(self.root, self.memory_mb, self.warm_compiler)
        for name, content in (files or {}).items():
            dest = worker.scratch / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, Path):
                shutil.copyfile(content, dest)
            else:
                dest.write_bytes(content)
        return worker.submit(job, timeout or get_settings().eval_timeout_s)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for w in self._ready:
                w.discard()
            self._ready.clear()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_job(job: dict, files: dict[str, bytes | Path] | None = None, timeout: float | None = None) -> SandboxResult:
    """Run one job in a cold, single-use sandboxed worker; only its result dict survives."""
    with WorkerPool(size=0) as pool:
        res = pool.run(job, files, timeout)
        res.cleanup()
        res.worker = None
        return res
