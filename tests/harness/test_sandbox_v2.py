"""Sandbox v2, attacked: a candidate holds no privilege and sees only what it needs through every command, even
when the tool runs as root; the trusted side takes nothing from the scratch through a link, and a hostile result
file is a clean `error` or `incorrect`, never an exception or a forged verdict."""

from __future__ import annotations

import json
import os
import socket
import uuid
from pathlib import Path

import pytest

from maxkernel.harness.verdict.evaluate import Evaluator
from maxkernel.harness.sandbox.guard import unguarded
from maxkernel.harness.sandbox.pool import WorkerPool, isolation_mode
from maxkernel.settings import get_settings
from maxkernel.tools.compile_pallas import compile_pallas
from maxkernel.tools.run_tests import run_tests
from maxkernel.tools.xprof_capture import xprof_capture

# These kernels attack the sandbox itself, so the in-process guards in front of it (the source allow-list and the
# rebinding watch, proven in test_static_check.py and test_verdict_v2.py) are off: the sandbox must hold alone.
RAW = {"static_check": False, "watch": False, "guard": False}  # the sandbox proven on its own: no in-process layer


@pytest.fixture(scope="module")
def raw(evaluator):
    return Evaluator(evaluator.pool, **RAW)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
KERNELS = Path(__file__).parent / "kernels"
TASK = "12p_RMSNorm"
CORRECT = (KERNELS / "rmsnorm_rows.py").read_text()


@pytest.fixture(scope="module", autouse=True)
def _bubblewrap():
    assert isolation_mode() == "bwrap", "these attacks are meant for the bubblewrap sandbox (install bubblewrap)"


@pytest.fixture
def planted(monkeypatch):
    """Fake secrets where a user keeps real ones (the home, the file GOOGLE_APPLICATION_CREDENTIALS names, ADK's
    session store beside an agent, the environment), writable places outside any scratch, and a host socket."""
    tag = uuid.uuid4().hex[:12]
    marker = f"FAKE-SECRET-{tag}"
    home = Path.home()
    adk = ROOT / "maxkernel" / "apps" / "auto" / ".adk"
    made_adk = not adk.exists()
    files = [home / f".maxkernel-pwned-secret-{tag}", home / f".maxkernel-pwned-adc-{tag}.json",
             home / f".maxkernel-pwned-history-{tag}", adk / f"maxkernel-pwned-session-{tag}.db"]
    adk.mkdir(exist_ok=True)
    for f in files:
        f.write_text(f"token = {marker}\n")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(files[1]))
    monkeypatch.setenv("TPU_SERVICE_DSN", f"postgres://mk:{marker}@db")  # named like a flag the old filter passed
    monkeypatch.setenv("MAXKERNEL_FAKE_TOKEN", marker)
    writes = [home / f".maxkernel-pwned-write-{tag}", ROOT / "maxkernel" / f"maxkernel_pwned_{tag}.py",
              Path(f"/var/tmp/maxkernel-pwned-{tag}"), ROOT / "tests" / f"maxkernel-pwned-{tag}"]
    sock_path = home / f".maxkernel-pwned-sock-{tag}"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock_path))
    server.listen(1)
    try:
        yield {"secrets": [(str(f), marker) for f in files], "env": [marker], "writes": [str(w) for w in writes],
               "sockets": [str(sock_path)], "marker": marker, "written": writes}
    finally:
        server.close()
        for f in [*files, *writes, sock_path]:
            f.unlink(missing_ok=True)
        if made_adk:
            adk.rmdir()


def probe_kernel(folder: Path, planted: dict, body: str = CORRECT) -> Path:
    head = (KERNELS / "escape_probe.py").read_text()
    for name, key in (("SECRETS", "secrets"), ("ENV_MARKERS", "env"), ("WRITES", "writes"), ("SOCKETS", "sockets")):
        head = head.replace(f"{name} = []", f"{name} = {planted[key]!r}", 1)
    path = folder / "probe.py"
    path.write_text(head + "\n" + body)
    return path


def test_every_command_holds_against_the_probe(planted, tmp_path):
    """evaluate, test, compile and profile each run the probe's import in their own sandboxed job."""
    kernel = probe_kernel(tmp_path, planted)
    with Evaluator(WorkerPool(size=0), **RAW) as fresh:  # workers started after the secrets were planted
        v = fresh.evaluate(TASK, kernel)
    assert v.status == "correct", f"{v.reason}\n{v.detail[-1500:]}"
    assert v.isolation == "bwrap" and v.passed_env == []
    t = run_tests(TASK, str(kernel), "smoke")  # the tool's verdict keeps the allow-list: refused before any import
    assert not t.ok and "is not allowed" in t.summary, t.summary
    c = compile_pallas(TASK, str(kernel), "v5e", "smoke")  # the audit hook refuses the probe's first read
    assert not c.ok and "maxkernel guard" in c.error, f"{c.summary}\n{c.error}"
    with unguarded():  # and without the hook, the sandbox holds on its own
        c = compile_pallas(TASK, str(kernel), "v5e", "smoke")
        assert c.ok, f"{c.summary}\n{c.error}"
        p = xprof_capture(TASK, str(kernel), "smoke", out_dir=str(tmp_path / "profile"))
        assert p.ok, f"{p.summary}\n{p.error}"
    assert not any(w.exists() for w in planted["written"])


def test_a_variable_passes_only_when_the_user_names_it(planted, tmp_path, monkeypatch):
    kernel = probe_kernel(tmp_path, planted)
    monkeypatch.setenv("MAXKERNEL_SANDBOX_ENV", "TPU_SERVICE_DSN")
    get_settings.cache_clear()
    try:
        with Evaluator(WorkerPool(size=0), **RAW) as fresh:
            v = fresh.evaluate(TASK, kernel, seeds=[0])
    finally:
        monkeypatch.delenv("MAXKERNEL_SANDBOX_ENV")
        get_settings.cache_clear()
    assert v.status == "error" and f"saw {planted['marker']} in the environment" in v.reason
    assert v.passed_env == ["TPU_SERVICE_DSN"]


def test_profile_copies_no_linked_content(planted, tmp_path):
    secret = planted["secrets"][0][0]
    body = CORRECT + f'''
os.makedirs("trace/plugins", exist_ok=True)
os.symlink({secret!r}, "trace/leak.txt")
os.symlink({secret!r}, "trace/plugins/leak.pb")
os.symlink("/root", "trace/home")
os.mkfifo("trace/fifo")
'''
    kernel = tmp_path / "linker.py"
    kernel.write_text("import os\n" + body)
    out = tmp_path / "out"
    with unguarded():  # the links are made in the kernel's import, which the audit hook would refuse first
        p = xprof_capture(TASK, str(kernel), "smoke", out_dir=str(out))
    assert p.ok, f"{p.summary}\n{p.error}"
    for f in out.rglob("*"):
        assert not f.is_symlink(), f
        if f.is_file():
            assert planted["marker"].encode() not in f.read_bytes(), f"{f} holds the linked secret"
    skipped = " ".join(p.skipped_files)
    assert "leak.txt: a symbolic link" in skipped and "home: a symbolic link" in skipped
    assert "plugins/leak.pb: a symbolic link" in skipped and "fifo: not a regular file" in skipped
    assert p.trace and Path(p.trace).is_file() and not Path(p.trace).is_symlink()


def _forger(tmp_path: Path, name: str, result: dict, extra: str = "") -> Path:
    """A kernel that forges the whole job: the TPU lowering of an honest kernel for the census, a result file
    claiming a fast run, then exits before the harness's own code writes anything."""
    path = tmp_path / name
    path.write_text("import json, os\nimport jax, jax.numpy as jnp\nfrom maxkernel import chips\n"
                    + CORRECT.split("import jax.numpy as jnp", 1)[1].split("def workload")[0]
                    + "def _honest" + CORRECT.split("def workload", 1)[1]
                    + "\nx = jax.ShapeDtypeStruct((2, 64, 256), jnp.bfloat16)\n"
                    "with chips.trace_context(chips.get('v5e')):\n"
                    "    low = jax.jit(_honest).trace(x, jax.ShapeDtypeStruct((256,), jnp.bfloat16))\n"
                    "    open('lowered_tpu.mlir', 'w').write(low.lower(lowering_platforms=('tpu',)).as_text())\n"
                    f"{extra}\nopen('result.json', 'w').write(json.dumps({result!r}))\n"
                    "os._exit(0)\n\ndef workload(x, scale):\n    return x\n")
    return path


_RAN = {"status": "ran", "backend": "cpu", "compile_s": 0.0, "run_ms": [], "races": None, "timers_replaced": [],
        "census": {"pallas_calls": 1, "pallas_flops": 1e9, "total_flops": 1e9, "contraction_flops": 0},
        # Agrees with the forged lowering (verdict v3 holds the two against each other): copy-out is under test.
        "kernels": [{"name": "_kernel", "grid": [2], "blocks": []}],
        "timing": {"kernel_ms": [1.0] * 5, "source": "wall", "window": None, "reps": []},
        "lowered_tpu": "lowered_tpu.mlir", "export_error": None}


def test_outputs_named_outside_the_scratch_are_never_read(raw, tmp_path):
    """A forged result naming files outside its scratch as its outputs: the parent reads only names it chose."""
    outputs = ["/etc/passwd", "../../etc/passwd"]
    v = raw.evaluate(TASK, _forger(tmp_path, "forge_refs.py", {**_RAN, "outputs": outputs}), seeds=[0])
    assert v.status in ("incorrect", "rejected") and v.status != "correct", v.reason
    assert "passwd" not in v.model_dump_json()


def test_an_output_linked_to_dev_zero_is_refused(raw, tmp_path):
    kernel = _forger(tmp_path, "zero_out.py", {**_RAN, "outputs": ["out_0.npz"]},
                     extra="os.symlink('/dev/zero', 'out_0.npz')")
    v = raw.evaluate(TASK, kernel, seeds=[0])
    assert v.status == "incorrect" and "a symbolic link" in v.reason, v.reason


def test_a_malformed_result_is_an_error(raw, tmp_path):
    v = raw.evaluate(TASK, _forger(tmp_path, "malformed.py", {"status": "ran"}), seeds=[0])
    assert v.status == "error" and "malformed result" in v.reason, v.reason


def test_a_result_file_linked_elsewhere_is_refused(raw, tmp_path):
    kernel = tmp_path / "linked_result.py"
    kernel.write_text("import os\nos.symlink('/dev/zero', 'result.json')\nos._exit(0)\n\n"
                      "def workload(x, scale):\n    return x\n")
    v = raw.evaluate(TASK, kernel, seeds=[0])
    assert v.status == "error" and "result was refused" in v.reason and "symbolic link" in v.reason, v.reason


def test_the_worker_refuses_a_privileged_sandbox(tmp_path):
    """The in-job check itself: run the worker under a bubblewrap that keeps root's capabilities (the old
    recipe); it must refuse before any job runs, naming why."""
    import subprocess
    import sys

    scratch = tmp_path / "s"
    scratch.mkdir()
    cmd = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent",
           "--bind", str(scratch), str(scratch), sys.executable, "-P", "-m", "maxkernel.harness.jobs.worker", str(scratch),
           "--isolated"]
    if os.geteuid() != 0:
        pytest.skip("only root's bubblewrap without a user namespace keeps capabilities")
    r = subprocess.run(cmd, input=json.dumps({"kind": "reference", "task": TASK, "size": "smoke", "seeds": [0]}),
                       capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin",
                                                                         "PYTHONPATH": str(ROOT)})
    result = json.loads((scratch / "result.json").read_text())
    assert result["status"] == "error" and result["stage"] == "sandbox", r.stderr[-2000:]
    assert "refused to run the candidate" in result["error"] and "CapEff" in result["error"]
    assert not (scratch / "ref_0.npz").exists()  # the job never ran


def test_a_fork_bomb_hits_the_process_limit_and_is_an_error(raw, tmp_path):
    from maxkernel.harness.sandbox.pool import _drop_cgroup, _pids_cgroup, max_pids

    probe = _pids_cgroup(max_pids())
    if probe is None:
        pytest.skip("no pids cgroup can be made here (needs root and a writable cgroupfs)")
    _drop_cgroup(probe)
    kernel = tmp_path / "fork_bomb.py"
    kernel.write_text("import os, time\nfor _ in range(2000):\n    try:\n        if os.fork() == 0:\n"
                      "            time.sleep(60)\n            os._exit(0)\n    except OSError:\n        break\n\n" + CORRECT)
    v = raw.evaluate(TASK, kernel, seeds=[0])
    assert v.status == "error" and f"process limit ({max_pids()}" in v.reason, v.reason


def test_a_verdict_without_isolation_is_never_correct_unless_accepted(monkeypatch):
    def judged(**env):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        get_settings.cache_clear()
        isolation_mode.cache_clear()
        try:
            with Evaluator(WorkerPool(size=0)) as ev:
                return ev.evaluate(TASK, KERNELS / "rmsnorm_rows.py", seeds=[0])
        finally:
            for k in env:
                monkeypatch.delenv(k)
            get_settings.cache_clear()
            isolation_mode.cache_clear()

    v = judged(MAXKERNEL_SANDBOX="none")
    assert v.isolation == "none" and v.status == "rejected" and "isolation: none" in v.reason
    assert "degraded_sandbox" in v.flags and v.correctness.max_rel_err < v.correctness.tolerance
    v = judged(MAXKERNEL_SANDBOX="none", MAXKERNEL_ALLOW_UNISOLATED="1")
    assert v.isolation == "none" and v.status == "correct" and "degraded_sandbox" in v.flags



def test_filling_the_scratch_folder_stops_at_its_cap_and_is_an_error(tmp_path, monkeypatch):
    import subprocess

    from maxkernel.harness.sandbox.pool import _mount_scratch

    trial = tmp_path / "trial"
    trial.mkdir()
    if not _mount_scratch(trial, 64):
        pytest.skip("this process may not mount a tmpfs (not root, or no CAP_SYS_ADMIN)")
    subprocess.run(["umount", "-l", str(trial)], check=True)
    kernel = tmp_path / "filler.py"
    kernel.write_text("try:\n    with open('junk', 'wb') as f:\n        for _ in range(4096):\n"
                      "            f.write(b'x' * (1 << 20))\nexcept OSError:\n    pass\n\n" + CORRECT)
    monkeypatch.setenv("MAXKERNEL_SANDBOX_SCRATCH_MB", "96")
    get_settings.cache_clear()
    try:
        with Evaluator(WorkerPool(size=0), **RAW) as ev:
            v = ev.evaluate(TASK, kernel, seeds=[0])
    finally:
        monkeypatch.delenv("MAXKERNEL_SANDBOX_SCRATCH_MB")
        get_settings.cache_clear()
    assert v.status == "error" and "filled its scratch folder (the 96 MiB cap)" in v.reason, v.reason
