"""The same escape probe when maxkernel runs as an ordinary user (made here): through evaluate and compile (test,
profile and autotune start the same sandboxed job),
with secrets planted in that user's own home and environment, the candidate still reaches none of them."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

KERNELS = Path(__file__).parent / "kernels"
USER = "mkprobe"
# Root's home is 0700 here and the interpreter lives under it (pyenv): in a private mount namespace, show the
# user a /root that holds only the interpreter's folder, then become the user.
RUN_AS = """#!/bin/sh
set -e
view=$(mktemp -d /tmp/mk-view-XXXXXX)
mount -t tmpfs -o mode=755 tmpfs "$view"
mkdir -p "$view/.pyenv"
[ -d /root/.pyenv ] && mount --bind /root/.pyenv "$view/.pyenv"
mount --rbind "$view" /root
exec setpriv --reuid={user} --regid={user} --clear-groups "$@"
"""


@pytest.fixture(scope="module")
def user_dir():
    if os.geteuid() != 0:
        pytest.skip("this run is already unprivileged: the other sandbox tests cover it")
    for tool in ("useradd", "setpriv", "unshare"):
        assert shutil.which(tool), f"{tool} (util-linux/passwd) is needed to test as an ordinary user"
    try:
        pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/usr/sbin/nologin", USER], check=True)
    folder = Path(tempfile.mkdtemp(prefix="mk-unpriv-", dir="/tmp"))
    folder.chmod(0o755)
    home = folder / "home"
    home.mkdir()
    shutil.chown(home, USER, USER)
    (folder / "run_as.sh").write_text(RUN_AS.format(user=USER))
    (folder / "run_as.sh").chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_the_probe_holds_when_the_tool_runs_as_an_ordinary_user(user_dir):
    home = user_dir / "home"
    tag = uuid.uuid4().hex[:12]
    marker = f"FAKE-SECRET-{tag}"
    secret = home / ".config" / "gcloud" / "application_default_credentials.json"
    history = home / ".bash_history"
    target = home / f"maxkernel-pwned-{tag}"
    head = (KERNELS / "escape_probe.py").read_text()
    head = head.replace("SECRETS = []", f"SECRETS = {[(str(secret), marker), (str(history), marker)]!r}", 1)
    head = head.replace("ENV_MARKERS = []", f"ENV_MARKERS = {[marker]!r}", 1)
    head = head.replace("WRITES = []", f"WRITES = {[str(target)]!r}", 1)
    kernel = user_dir / "probe.py"
    kernel.write_text(head + "\n" + (KERNELS / "rmsnorm_rows.py").read_text())
    kernel.chmod(0o644)
    secret.parent.mkdir(parents=True)
    for f in (secret, history):
        f.write_text(f"token = {marker}\n")
    subprocess.run(["chown", "-R", f"{USER}:{USER}", str(home)], check=True)
    env = ["env", "-i", "PATH=/usr/bin:/bin", f"HOME={home}", f"MAXKERNEL_CACHE_DIR={home}/cache",
           f"MAXKERNEL_DATA_DIR={home}/data", f"GOOGLE_APPLICATION_CREDENTIALS={secret}",
           f"TPU_SERVICE_DSN=postgres://mk:{marker}@db", f"PYTHONPATH={Path(__file__).resolve().parents[2]}"]

    def mk(*args, code=0):  # the CLI exits 1 for a bad answer (rejected, did not compile), with its JSON unchanged
        r = subprocess.run(["unshare", "-m", "--propagation", "private", str(user_dir / "run_as.sh"), *env,
                            sys.executable, *args],
                           capture_output=True, text=True, timeout=600, cwd=user_dir)
        assert r.returncode == code, r.stderr[-3000:]
        return json.loads(r.stdout)

    # The probe attacks the sandbox, so the in-process guards in front of it (the source allow-list, which
    # `maxkernel evaluate` always applies, and the rebinding watch) are off: the sandbox must hold alone.
    v = mk("-c", "from maxkernel.harness.verdict.evaluate import Evaluator\n"
                 "with Evaluator(static_check=False, watch=False, guard=False) as ev:\n"
                 f"    print(ev.evaluate('12p_RMSNorm', {str(kernel)!r}, seeds=[0]).model_dump_json())")
    refused = mk("-m", "maxkernel.cli", "evaluate", "--task", "12p_RMSNorm", "--kernel", str(kernel), "--json", code=1)
    assert refused["status"] == "rejected" and refused["stage"] == "static", refused["reason"]
    assert v["status"] == "correct" and v["isolation"] == "bwrap", f"{v['reason']}\n{v['detail'][-1500:]}"
    c = mk("-m", "maxkernel.cli", "compile", "--task", "12p_RMSNorm", "--kernel", str(kernel), "--chip", "v5e",
           "--size", "smoke", "--json", code=1)
    assert not c["ok"] and "maxkernel guard" in c.get("error", ""), c.get("error")  # the audit hook, first
    c = mk("-c", "from maxkernel.harness.sandbox.guard import unguarded\n"  # then the sandbox alone
                 "from maxkernel.tools.compile_pallas import compile_pallas\n"
                 "with unguarded():\n"
                 f"    print(compile_pallas('12p_RMSNorm', {str(kernel)!r}, 'v5e', 'smoke').model_dump_json())")
    assert c["ok"], c.get("error")
    assert not target.exists()
