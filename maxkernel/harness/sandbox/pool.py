"""Running untrusted kernel code in a child process: bubblewrap isolation, rlimits, process-group kills."""

from __future__ import annotations

import contextvars
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
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from maxkernel.harness.sandbox import cancel
from maxkernel.harness.sandbox import stale
from maxkernel.harness.sandbox.copyout import CopyOutError, read_json
from maxkernel.harness.sandbox.seccomp import filter_fd
from maxkernel.settings import get_settings

__all__ = ["SandboxResult", "Worker", "WorkerPool", "copy_files", "isolation_mode", "log_job", "read_result", "run_job"]

# The environment a job gets, by exact name: what the interpreter, JAX and the devices need. Anything else
# reaches a job only when the user names it in MAXKERNEL_SANDBOX_ENV (listed in every verdict).
_ENV_PASS = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "JAX_PLATFORMS", "JAX_ENABLE_X64", "XLA_FLAGS",
             "LIBTPU_INIT_ARGS", "TPU_VISIBLE_CHIPS", "TPU_ACCELERATOR_TYPE", "CUDA_VISIBLE_DEVICES",
             "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH")
_DUMP_FLAGS = ("--xla_jf_dump", "--xla_dump_to", "--xla_mosaic_dump_to")
# /etc entries the interpreter and its libraries read (the dynamic loader, users, time zone, certificates).
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "timezone", "passwd", "group", "nsswitch.conf",
        "hosts", "host.conf", "ssl", "ca-certificates", "alternatives", "os-release", "protocols", "services",
        "mime.types")
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SANDBOX_UID = 65534  # nobody: the candidate's uid inside its user namespace, with every capability dropped
_TMPFS_BYTES = 512 << 20  # /tmp, /run, /dev/shm inside the sandbox
_PACKAGE = Path(__file__).resolve().parents[2]  # maxkernel/ (this file is maxkernel/harness/sandbox/pool.py)


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
    limits_hit: list[str] = field(default_factory=list)  # sandbox limits the job ran into ("pids")

    @property
    def scratch(self) -> Path | None:
        return self.worker.scratch if self.worker else None

    @property
    def signal(self) -> int | None:
        """The signal that ended the job, or None: a negative exit code, or bubblewrap's 128+N for signal N."""
        rc = self.returncode
        if rc is not None and (rc < 0 or (self.isolation == "bwrap" and 128 < rc < 160)):
            return -rc if rc < 0 else rc - 128
        return None

    def death(self) -> str:
        """How a job that wrote no result ended, in words: the signal that killed it (SIGKILL from outside the
        job is most often the kernel's out-of-memory killer), or its exit code, and any sandbox limit it hit."""
        rc, sig = self.returncode, self.signal
        if rc is None:
            how = "no exit code"
        elif sig is not None:
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = f"signal {sig}"
            how = f"killed by {name}"
            if sig == signal.SIGKILL:
                how += " (from outside the job: the machine's out-of-memory killer, or a kill)"
            elif sig in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS):
                how += " (the job's own crash)"
        else:
            how = f"exit code {rc}"
        if self.limits_hit:
            how += f"; sandbox limit hit: {', '.join(self.limits_hit)}"
        return how

    def cleanup(self) -> None:
        """Remove the job's scratch folder (its outputs are gone after this)."""
        if self.worker is not None:
            self.worker.discard()


@lru_cache(maxsize=1)
def isolation_mode() -> str:
    """'bwrap' when bubblewrap can run a job unprivileged here (a user namespace, no capabilities), else 'none'
    (with a warning, said once): rlimits and a clean environment only."""
    wanted = get_settings().sandbox
    if wanted == "none":
        return "none"
    exe = shutil.which("bwrap")
    if exe:
        probe = subprocess.run([exe, *_USER_NS, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"],
                               capture_output=True, timeout=30)
        if probe.returncode == 0:
            return "bwrap"
    if wanted == "bwrap":
        raise RuntimeError("MAXKERNEL_SANDBOX=bwrap but bubblewrap is missing or cannot make an unprivileged user "
                           "namespace here (install Debian's 'bubblewrap'; check /proc/sys/user/max_user_namespaces)")
    warnings.warn("bubblewrap with user namespaces is not available: candidate kernels run with rlimits and a clean "
                  "environment only, without file-system or network isolation (isolation: none)", stacklevel=2)
    return "none"


_USER_NS = ("--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--cap-drop", "ALL",
            "--disable-userns")


def _child_env(scratch: Path) -> dict:
    s = get_settings()
    env = {k: os.environ[k] for k in (*_ENV_PASS, *s.sandbox_env_names) if k in os.environ}
    if "LIBTPU_INIT_ARGS" in env:  # a dump flag names a folder outside the job, and an LLO profile dump per compile
        # made a large kernel's compile run out of its address space: the jobs that want a dump set their own
        env["LIBTPU_INIT_ARGS"] = " ".join(a for a in env["LIBTPU_INIT_ARGS"].split() if not a.startswith(_DUMP_FLAGS))
    env.update(HOME=str(scratch), TMPDIR=str(scratch), PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1",
               TPU_SKIP_MDS_QUERY="1", ALLOW_MULTIPLE_LIBTPU_LOAD="1", PYTHONPATH=os.pathsep.join(map(str, _package_roots())))
    env.setdefault("JAX_PLATFORMS", "cpu" if not _accelerator_nodes() else "")
    env.setdefault("PATH", "/usr/bin:/bin")
    return env


def _package_roots() -> list[Path]:
    """The folders holding the maxkernel and jaxbench packages this process runs (a checkout, or site-packages)."""
    import jaxbench
    import maxkernel

    return sorted({Path(maxkernel.__file__).resolve().parent.parent, Path(jaxbench.__file__).resolve().parent.parent})


def _python_trees() -> list[Path]:
    """What the interpreter needs, wherever it lives (a venv under /tmp, pyenv under the home): its prefixes and
    the site-packages folders on sys.path, each bound on its own."""
    import site

    found = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    sites = set(site.getsitepackages()) | {site.getusersitepackages()}
    found |= {Path(p).resolve() for p in sys.path if p in sites and Path(p).is_dir()}
    return sorted(found)


def _accelerator_nodes() -> list[str]:
    return sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/accel*") + glob.glob("/dev/vfio"))


def _mounts(scratch: Path) -> list[str]:
    """Read-only binds by allow-list: system folders, the interpreter, the two packages; nothing of the home,
    the checkout's other files, the reference cache or /var/tmp. Only the scratch folder is writable."""
    args: list[str] = []
    for top in _SYSTEM:
        p = Path(top)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), top]
        elif p.is_dir():
            args += ["--ro-bind", top, top]
    for name in _ETC:
        if (Path("/etc") / name).exists():
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    # Fresh, size-capped /tmp and /run first: what is bound below them afterwards (a venv under /tmp, the
    # scratch folder) must not be covered by them.
    for tmp in ("/tmp", "/run"):
        args += ["--size", str(_TMPFS_BYTES), "--tmpfs", tmp]
    system = tuple(Path(t) for t in _SYSTEM)
    trees = _python_trees() + [_PACKAGE]  # the maxkernel package itself
    import jaxbench

    trees.append(Path(jaxbench.__file__).resolve().parent)
    for tree in sorted(set(trees)):
        if not any(tree == t or t in tree.parents for t in system):
            args += ["--ro-bind", str(tree), str(tree)]
    # The package folder also holds the ADK app folders, where `adk web`/`adk run` keep sessions by default
    # (apps/<app>/.adk/, made at any time); no job imports them, so the whole folder is hidden.
    agents = _PACKAGE / "apps"
    if agents.is_dir():
        args += ["--tmpfs", str(agents)]
    args += ["--ro-bind", "/sys", "/sys", "--dev", "/dev", "--proc", "/proc"]
    for node in _accelerator_nodes():
        args += ["--dev-bind", node, node]
    args += ["--size", str(_TMPFS_BYTES), "--tmpfs", "/dev/shm", "--symlink", "/run", "/var/run"]
    args += ["--bind", str(scratch), str(scratch), "--chdir", str(scratch)]
    # bubblewrap builds the tree on a tmpfs root the candidate would own: make it read-only once built, so the
    # scratch folder and the size-capped tmpfs mounts are the only writable places.
    args += ["--remount-ro", "/"]
    return args


def _bwrap_prefix(scratch: Path, seccomp_fd: int | None = None) -> list[str]:
    seccomp = [] if seccomp_fd is None else ["--seccomp", str(seccomp_fd)]
    return ["bwrap", *seccomp, *_USER_NS, "--unshare-all", "--die-with-parent", "--new-session", *_mounts(scratch)]


def _limits(memory_mb: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 30, 4 << 30))
    return apply


def max_pids() -> int:
    """Processes and threads one job may have at once (JAX's thread pools grow with the cores)."""
    return get_settings().sandbox_max_pids or 256 + 4 * (os.cpu_count() or 1)


def _pids_cgroup(limit: int) -> Path | None:
    """A fresh pids cgroup capped at `limit`, where this machine lets us make one (root, cgroupfs writable)."""
    for root in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup")):
        if not (root / "cgroup.procs").is_file() or not os.access(root, os.W_OK):
            continue
        _sweep_cgroups(root)
        try:
            cg = Path(tempfile.mkdtemp(prefix="maxkernel-", dir=root))
        except OSError:
            continue
        try:
            (cg / "pids.max").write_text(str(limit))
            return cg
        except OSError:
            _drop_cgroup(cg)
    return None


def _rmdir_cgroup(cg: Path, tries: int) -> bool:
    for _ in range(tries):
        try:
            cg.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:  # EBUSY: the killed job's processes are still leaving its pid namespace
            time.sleep(0.02)
    return False


def _drop_cgroup(cg: Path | None) -> None:
    if cg is not None and not _rmdir_cgroup(cg, 10):
        threading.Thread(target=_rmdir_cgroup, args=(cg, 500), daemon=True).start()


def _sweep_cgroups(root: Path) -> None:
    """Remove empty maxkernel cgroups left by processes that exited before theirs emptied (older than a minute,
    so a cgroup another process has just made and not yet joined is never touched)."""
    now = time.time()
    for cg in root.glob("maxkernel-*"):
        try:
            if now - cg.stat().st_mtime > 60 and not (cg / "cgroup.procs").read_text().strip():
                cg.rmdir()
        except OSError:
            pass


def read_result(scratch: Path, who: str) -> tuple[str, dict | None]:
    """(status, result) of a job that ended in time, from the result.json in `scratch`: ok; crashed when it wrote
    none; error when it was refused (a link, too large, not JSON), is not an object, or is the worker's own error."""
    try:
        result = read_json(scratch, "result.json")
    except CopyOutError as exc:
        if (scratch / "result.json").exists() or (scratch / "result.json").is_symlink():
            return "error", {"status": "error", "stage": "sandbox", "error": f"the {who}'s result was refused: {exc}"}
        return "crashed", None
    if not isinstance(result, dict):
        return "error", {"status": "error", "stage": "sandbox", "error": f"the {who}'s result.json is not a JSON object"}
    if result.get("status") == "error" and result.get("stage") in ("worker", "sandbox"):
        return "error", result
    return "ok", result


def _pids_hit(cg: Path | None) -> bool:
    """Whether a fork in the cgroup was refused at its limit."""
    if cg is None:
        return False
    try:
        events = (cg / "pids.events").read_text()
    except OSError:
        return False
    return any(line.split()[:1] == ["max"] and int(line.split()[1]) > 0 for line in events.splitlines() if line.strip())


_MOUNT_WORKS: list[bool] = []  # learnt once per process: whether this process may mount a tmpfs


def _mount_scratch(scratch: Path, size_mb: int) -> bool:
    """Make `scratch` a fresh tmpfs capped at `size_mb` where this process may mount (root with CAP_SYS_ADMIN),
    so a job cannot fill the host's disk; elsewhere it stays a plain folder (single files capped by rlimit)."""
    if os.geteuid() != 0 or _MOUNT_WORKS == [False] or not shutil.which("mount"):
        return False
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "maxkernel-scratch", str(scratch)],
                       capture_output=True, timeout=30)
    if not _MOUNT_WORKS:
        _MOUNT_WORKS.append(r.returncode == 0)
    return r.returncode == 0


def _scratch_full(scratch: Path) -> bool:
    try:
        st = os.statvfs(scratch)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < (1 << 20)


@dataclass
class Worker:
    """One started child process with its own scratch folder, waiting for a single job on stdin."""

    proc: subprocess.Popen
    scratch: Path
    log: Path
    isolation: str
    started: float = field(default_factory=time.monotonic)
    cgroup: Path | None = None  # its pids cgroup, where one could be made
    scratch_mb: int | None = None  # the scratch folder's cap, where it is a tmpfs of its own
    cancel_scope: "cancel.CancelScope | None" = field(default=None, repr=False, compare=False)  # the call it serves

    @classmethod
    def start(cls, root: Path, memory_mb: int | None = None, warm_compiler: str | None = None,
              serve: bool = False) -> "Worker":
        scope = cancel.current()
        if scope is not None:
            scope.check()  # a cancelled call starts nothing more
        memory_mb = memory_mb or get_settings().eval_memory_mb
        scratch = Path(tempfile.mkdtemp(prefix="w-", dir=root))
        scratch_mb = get_settings().sandbox_scratch_mb
        scratch_mb = scratch_mb if _mount_scratch(scratch, scratch_mb) else None
        log = scratch.with_suffix(".log")  # beside the scratch folder, outside the candidate's view
        mode = isolation_mode()
        cmd = [sys.executable, "-P", "-m", "maxkernel.harness.jobs.worker", str(scratch)]
        if warm_compiler:
            cmd.append(f"--warm-compiler={warm_compiler}")
        if serve:
            cmd.append("--serve")
        seccomp_fd = filter_fd() if mode == "bwrap" else None
        if mode == "bwrap":
            cmd = _bwrap_prefix(scratch, seccomp_fd) + cmd + ["--isolated"]
        prlimit = shutil.which("prlimit")
        # prlimit sets the limits without a Python preexec_fn, which would force a fork of this (threaded,
        # JAX-importing) process; the fallback does the same from inside the child.
        if prlimit:
            cmd = [prlimit, f"--as={memory_mb << 20}", "--core=0", f"--fsize={4 << 30}", "--"] + cmd
        cgroup = _pids_cgroup(max_pids())
        if cgroup is not None:  # join the cgroup before anything forks, then become the job
            cmd = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cgroup / "cgroup.procs"), *cmd]
        try:
            with open(log, "wb") as err:
                proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=err, stderr=err, cwd=scratch,
                                        env=_child_env(scratch), start_new_session=True,
                                        pass_fds=() if seccomp_fd is None else (seccomp_fd,),
                                        preexec_fn=None if prlimit else _limits(memory_mb))
        finally:
            if seccomp_fd is not None:
                os.close(seccomp_fd)
        worker = cls(proc, scratch, log, mode, cgroup=cgroup, scratch_mb=scratch_mb)
        if scope is not None:
            try:
                scope.adopt(worker)  # cancelled meanwhile: killed here, Cancelled raised
            except cancel.Cancelled:
                worker.discard()
                raise
        return worker

    def submit(self, job: dict, timeout: float) -> SandboxResult:
        """Send `job`, wait up to `timeout` seconds, and kill the whole process group whatever happens."""
        t0 = time.monotonic()
        status = "ok"
        scope = self.cancel_scope
        if scope is not None:
            scope.event(f"sandboxed job {job.get('kind', '?')} started")
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
        if scope is not None:
            scope.release(self)
            if scope.cancelled:  # killed by a cancel: no result to read, nothing kept, and the caller must stop
                self.discard()
                scope.check()
            scope.event(f"sandboxed job {job.get('kind', '?')} finished in {wall:.1f} s")
        status, result = read_result(self.scratch, "job") if status == "ok" else (status, None)
        log_job(job, wall, status, time.monotonic() - self.started)
        limits = ["pids"] if _pids_hit(self.cgroup) else []
        if self.scratch_mb is not None and _scratch_full(self.scratch):
            limits.append("scratch")
        return SandboxResult(status, result, self.proc.returncode, self.stderr_tail(), wall, self.isolation, self,
                             limits_hit=limits)

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
        """The end of the job's log, read from its last 64 KiB only (a log flood costs nothing to read)."""
        try:
            with open(self.log, "rb") as f:
                f.seek(max(f.seek(0, os.SEEK_END) - (64 << 10), 0))
                data = f.read()
        except OSError:
            return ""
        text = data[-limit:].decode(errors="replace")
        lines = [ln for ln in text.splitlines() if not _NOISE.search(ln)]
        return "\n".join(lines)[-limit:]

    def discard(self) -> None:
        self.kill()
        if self.cancel_scope is not None:
            self.cancel_scope.release(self)
        _drop_cgroup(self.cgroup)
        if self.scratch_mb is not None:
            subprocess.run(["umount", "-l", str(self.scratch)], capture_output=True, timeout=30)
        shutil.rmtree(self.scratch, ignore_errors=True)
        self.log.unlink(missing_ok=True)


def log_job(job: dict, wall: float, status: str, age: float) -> None:
    """One line in the settings' job log (MAXKERNEL_JOB_LOG), if set: a log that cannot be written is skipped."""
    path = get_settings().job_log
    if path is None:
        return
    line = {"kind": job.get("kind", "?"), "task": job.get("task"), "size": job.get("size"), "wall_s": round(wall, 3),
            "worker_age_s": round(age, 3), "status": status, "pid": os.getpid(), "at": round(time.time(), 3)}
    try:
        with open(path, "a", encoding="utf-8") as f:  # one write of one short line: appends from processes interleave
            f.write(json.dumps(line) + "\n")
    except OSError:
        pass


# libtpu prints these on every CPU-only start; they are not the kernel's fault.
_NOISE = re.compile(r"TPU_ACCELERATOR_TYPE|TPU_WORKER_HOSTNAMES|libtpu_init_utils|Source Location Trace|"
                    r"InitGoogle|could not determine TPU")


def _close_workers(ready: list, root: Path) -> None:
    for w in list(ready):
        w.discard()
    ready.clear()
    # A worker handed out and not yet discarded (a job still running in another thread at exit, a worker being
    # started) still has its scratch tmpfs mounted under the root: unmount every such mount, or the removal below
    # deletes the root's owner file and stops at the mount, leaving a root no later sweep can judge.
    for point in stale._mounts_under(root):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)
    shutil.rmtree(root, ignore_errors=True)


_SWEPT: list = []


WARM_S = 3.0  # about a pre-started worker's imports on 2 busy cores: one taken younger was probably still importing
BACK_TO_BACK_SIZE = 2


class WorkerPool:
    """Keeps `size` sandboxed workers started (imports done) so a job does not wait for a cold start.

    Each worker runs exactly one job and is then killed: no process is reused across candidates.
    """

    def __init__(self, size: int | None = None, memory_mb: int | None = None, warm_compiler: str | None = None):
        self.size = get_settings().pool_size if size is None else size
        # A pool sized by the settings keeps one worker more ahead once jobs come back to back (a job took a worker
        # still importing, or found none): the agent loop's think time lets one suffice, a table or a tuner does not.
        # A pool's first job takes the worker started with the pool, whatever its age: that is a first use, not
        # jobs coming back to back.
        self.grow_to = max(self.size, BACK_TO_BACK_SIZE) if size is None and self.size > 0 else self.size
        self._acquired = 0
        self.memory_mb = memory_mb
        self.warm_compiler = warm_compiler  # a chip: pre-started workers load libtpu and compile once for it
        if not _SWEPT:  # once per process: roots (and scratch mounts) of pools whose process died unclosed
            _SWEPT.append(stale.sweep())
        self.root = Path(tempfile.mkdtemp(prefix=stale.PREFIX))
        stale.claim(self.root)
        self._ready: list[Worker] = []
        self._lock = threading.Lock()
        self._closed = False
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="maxkernel-spawner")
        # Also at interpreter exit for a pool nobody closed (a module-level one): its workers, scratch mounts and
        # root folder go with it.
        self._finalizer = weakref.finalize(self, _close_workers, self._ready, self.root)
        self._fill()

    def _start_worker(self) -> "Worker":
        """Start a worker from the pool's own long-lived thread: bubblewrap's --die-with-parent fires when the
        *thread* that started it exits, so a worker started by a short-lived caller thread (an evaluation's helper
        thread, an executor thread at shutdown) would die under a later job."""
        # In the caller's context, so the worker belongs to the caller's cancel scope (harness/sandbox/cancel.py).
        ctx = contextvars.copy_context()
        return self._spawner.submit(ctx.run, Worker.start, self.root, self.memory_mb, self.warm_compiler).result()

    def start_serving_worker(self) -> "Worker":
        """A worker that serves many judge jobs (harness/verdict/judge_service.py), started from the pool's thread like
        the others but in no call's cancel scope: it outlives the call that first needed it."""
        ctx = contextvars.Context()
        return self._spawner.submit(ctx.run, Worker.start, self.root, self.memory_mb, None, True).result()

    def _fill(self) -> None:
        with self._lock:
            while not self._closed and len(self._ready) < self.size:
                self._ready.append(self._start_worker())

    def acquire(self, refill: bool = True) -> Worker:
        with self._lock:
            alive = [w for w in self._ready if w.proc.poll() is None]
            for w in self._ready:
                if w not in alive:
                    w.discard()
            self._ready[:] = alive
            worker = self._ready.pop(0) if self._ready else None
            back_to_back = self._acquired > 0 and (worker is None or time.monotonic() - worker.started < WARM_S)
            self._acquired += 1
            if back_to_back:
                self.size = min(self.size + 1, self.grow_to)
        if worker is None:
            worker = self._start_worker()
        else:
            scope = cancel.current()
            if scope is not None:  # a pre-started worker now serves this call: it dies with the call's cancel
                try:
                    scope.adopt(worker)
                except cancel.Cancelled:
                    worker.discard()
                    raise
        if refill:
            self._fill()
        return worker

    def refill(self) -> None:
        """Start workers until `size` are ready again (after jobs run with refill=False)."""
        self._fill()

    def run(self, job: dict, files: dict[str, bytes | Path] | None = None, timeout: float | None = None,
            on_start=None, refill: bool = True) -> SandboxResult:
        """Run one job in a fresh worker, with `files` copied into its scratch folder first.

        `on_start(worker)` is called once the files are in place, just before the job is sent: a caller that runs
        two jobs side by side uses it to hand files from one to the other while both run (or to kill one).
        `refill=False` leaves the replacement worker for `refill()`: its start (importing jax, ~3 s of CPU) then does
        not compete with the jobs being timed.
        """
        worker = self.acquire(refill)
        if worker.proc.poll() is not None:
            # A pre-started worker can die between acquire and now (bwrap's --die-with-parent fires when the
            # thread that started it exits): that is no verdict on the candidate, so start a fresh one.
            worker.discard()
            worker = self._start_worker()
        copy_files(worker.scratch, files or {})
        if on_start is not None:
            on_start(worker)
        return worker.submit(job, timeout or get_settings().eval_timeout_s)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._finalizer()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def copy_files(scratch: Path, files: dict[str, bytes | Path]) -> None:
    """Files handed to a job, into its scratch folder (names may hold subfolders)."""
    for name, content in files.items():
        dest = scratch / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            _copy_in(content, dest)
        else:
            dest.write_bytes(content)


def _copy_in(source: Path, dest: Path) -> None:
    """A file handed to a job. Where folder code is sandboxed (the MCP server: every such path was resolved inside
    its root), it is read by a walk from / that follows no link, so a file swapped for a link after the check hands
    the job nothing outside; a person's own CLI may hand a file through a link of theirs."""
    from maxkernel.tasks import folder_code_is_sandboxed

    if not folder_code_is_sandboxed():
        shutil.copyfile(source, dest)
        return
    from maxkernel.harness.sandbox.copyout import MAX_FILE_BYTES, read_bytes

    dest.write_bytes(read_bytes(Path("/"), os.path.abspath(source).lstrip("/"), MAX_FILE_BYTES))


def run_job(job: dict, files: dict[str, bytes | Path] | None = None, timeout: float | None = None) -> SandboxResult:
    """Run one job in a cold, single-use sandboxed worker; only its result dict survives."""
    with WorkerPool(size=0) as pool:
        res = pool.run(job, files, timeout)
        res.cleanup()
        res.worker = None
        return res
