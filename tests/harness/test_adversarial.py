"""Hostile and cheating kernels: each is refused, the harness survives, nothing outside the scratch changes."""

import socket
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

KERNELS = Path(__file__).parent / "kernels"
HOSTILE = KERNELS / "hostile"
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def raw(evaluator):
    """The shared pool with the in-process guards (source allow-list, rebinding watch) off: these kernels attack
    the sandbox and the verdict behind those guards, which test_verdict_v2.py and test_static_check.py cover."""
    from maxkernel.harness.verdict.evaluate import Evaluator

    return Evaluator(evaluator.pool, static_check=False, watch=False, guard=False)


def _judge(raw, name, kernel, **kw):
    v = raw.evaluate(name, kernel, **kw)
    assert v.status != "correct", v.model_dump_json(indent=1)
    return v


@pytest.mark.parametrize("kernel,status,words", [
    ("zeros.py", "rejected", "not computed from the inputs"),
    ("constant.py", "incorrect", "exceeds tolerance"),
    ("nan.py", "incorrect", "NaN"),
    ("wrong_dtype.py", "rejected", "the task declares"),
    ("xla_in_pallas.py", "rejected", "a thin Pallas wrapper"),
    ("no_pallas.py", "rejected", "no pallas_call"),
    ("callback.py", "rejected", "pure_callback"),
    ("steal_reference.py", "incorrect", "exceeds tolerance"),
    ("hardcoded.py", "rejected", "not computed from the inputs"),
    ("clock_tamper.py", "rejected", "perf_counter"),
    ("no_wait.py", "rejected", "block_until_ready"),
    ("crash.py", "error", "died without a result"),
    ("exit_early.py", "error", "died without a result"),
    ("forge_result.py", "error", "malformed result"),
    ("memory_bomb.py", "error", "MemoryError: Unable to allocate"),  # the rlimit stops it at import
    ("retrace.py", "rejected", "traced to a different program the second time"),  # a cheap program to the census
])
def test_hostile_rmsnorm_kernels_are_refused(raw, kernel, status, words):
    v = _judge(raw, "12p_RMSNorm", HOSTILE / kernel, timeout=120)
    assert v.status == status, v.model_dump_json(indent=1)
    assert words in v.reason, v.reason


def test_xla_matmul_behind_a_pallas_epilogue_is_rejected(raw):
    v = _judge(raw, "8p_GEMM", HOSTILE / "gemm_xla_in_pallas.py")
    assert v.status == "rejected" and "outside pallas_call" in v.reason
    assert v.integrity["outside_contraction_flops"] > 0


@pytest.mark.parametrize("kernel", ["hang_import.py", "hang_kernel.py"])
def test_hangs_time_out_and_are_killed(raw, kernel):
    v = _judge(raw, "12p_RMSNorm", HOSTILE / kernel, timeout=8)
    assert v.status == "timeout"
    assert "its process group was killed" in v.reason, v.reason  # killed at its limit, not waited out


def _write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


_TAIL = '''

def workload(x, scale):
    import jax, jax.numpy as jnp
    from jax.experimental import pallas as pl

    def body(x_ref, s_ref, o_ref):  # some real arithmetic, but not RMSNorm
        o_ref[...] = x_ref[...] * s_ref[...]

    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, scale.reshape(1, 1, -1))
'''


def test_writes_outside_the_scratch_folder_change_nothing(raw, tmp_path):
    # Real places outside the scratch (home, /var/tmp, /tmp, this checkout), under names of this run's own: a
    # sandbox that lets a write through fails here, and neither leaves the file behind nor trips another run.
    tag = uuid.uuid4().hex[:12]
    targets = [tmp_path / "outside.txt", Path.home() / f".maxkernel-pwned-{tag}",
               Path(f"/var/tmp/maxkernel-pwned-{tag}"), Path(f"/tmp/maxkernel-pwned-{tag}"),
               Path(__file__).with_name(f"pwned_{tag}.py")]
    body = ("TARGETS = %r\nfor t in TARGETS:\n    try:\n        open(t, 'w').write('pwned')\n    except OSError:\n"
            "        pass\n" % [str(t) for t in targets])
    try:
        v = _judge(raw, "12p_RMSNorm", _write(tmp_path, "writer.py", body + _TAIL))
        assert v.status == "incorrect"
        assert [t for t in targets if t.exists()] == []
    finally:
        for t in targets:
            t.unlink(missing_ok=True)


def test_no_network_from_the_sandbox(raw, tmp_path):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    got = []
    done = threading.Event()

    def accept():
        while not done.is_set():
            try:
                conn, _ = server.accept()
                got.append(conn.recv(100))
                conn.close()
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    body = f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'leak')\nexcept OSError:\n    pass\n"
    try:
        v = _judge(raw, "12p_RMSNorm", _write(tmp_path, "net.py", body + _TAIL))
    finally:
        done.set()
        t.join()
        server.close()
    assert v.status == "incorrect"
    assert got == []


def test_secrets_do_not_reach_the_candidate(tmp_path, monkeypatch):
    from maxkernel.harness.verdict.evaluate import Evaluator
    from maxkernel.harness.sandbox.pool import WorkerPool

    secret = "sk-test-do-not-leak-1234"
    monkeypatch.setenv("GOOGLE_API_KEY", secret)
    monkeypatch.setenv("JAX_SECRET_TOKEN", secret)  # an allowed prefix with a secret-looking name
    home = tmp_path / "home"
    (home / ".config" / "gcloud").mkdir(parents=True)
    (home / ".config" / "gcloud" / "application_default_credentials.json").write_text(secret)
    monkeypatch.setenv("HOME", str(home))
    cred = home / ".config" / "gcloud" / "application_default_credentials.json"
    body = ("import os\nseen = [v for v in os.environ.values() if 'sk-test' in v]\n"
            f"try:\n    seen.append(open({str(cred)!r}).read())\nexcept OSError:\n    pass\n"
            "if seen:\n    raise RuntimeError('LEAKED ' + ' '.join(seen))\n")
    with Evaluator(WorkerPool(size=0), static_check=False, watch=False, guard=False) as ev:  # workers started after the environment above is set
        v = ev.evaluate("12p_RMSNorm", _write(tmp_path, "exfil.py", body + _TAIL))
    assert v.status == "incorrect", v.reason
    assert secret not in v.model_dump_json()


def test_background_processes_die_with_the_sandbox(raw, tmp_path):
    marker = "3171.5"
    body = (f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
            "import os\nif os.fork() == 0:\n    os.setsid()\n    import time\n    time.sleep(3000)\n")
    v = _judge(raw, "12p_RMSNorm", _write(tmp_path, "daemon.py", body + _TAIL))
    assert v.status in ("incorrect", "error")
    left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout.strip()
    assert left == ""


def test_harness_survives_and_still_judges_a_good_kernel_afterwards(evaluator):
    v = evaluator.evaluate("12p_RMSNorm", KERNELS / "rmsnorm_rows.py")
    assert v.status == "correct", v.model_dump_json(indent=1)
    assert v.isolation == "bwrap"


@pytest.mark.parametrize("kernel,words", [
    ("clock_tamper.py", "'time'"), ("no_wait.py", "rebinds"), ("crash.py", "'ctypes'"), ("exit_early.py", "'os'"),
    ("forge_result.py", "'json'"), ("steal_reference.py", "'glob'"), ("hardcoded.py", "'jaxbench'"),
])
def test_the_static_check_refuses_them_before_any_import(evaluator, kernel, words):
    v = evaluator.evaluate("12p_RMSNorm", HOSTILE / kernel)
    assert v.status == "rejected" and v.stage == "static" and words in v.reason, v.reason
