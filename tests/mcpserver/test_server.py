"""`maxkernel mcp` as a coding agent meets it: a subprocess driven by the SDK's real client, over stdio and over
streamable HTTP on 127.0.0.1 (with a token). One server per transport for the whole module, smoke sizes."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from _extras import need_module

REPO = Path(__file__).resolve().parents[2]
GEMM = REPO / "jaxbench" / "8p_GEMM" / "kernel.py"
TOKEN = "s3cret-test-token"

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

# The matmul done by XLA outside the kernel; the Pallas call only copies the answer: must never be "correct".
CHEAT = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def workload(a, b):
    c = jnp.dot(a, b, preferred_element_type=jnp.float32).astype(a.dtype)

    def copy(c_ref, o_ref):
        o_ref[...] = c_ref[...]

    return pl.pallas_call(copy, out_shape=jax.ShapeDtypeStruct(c.shape, c.dtype))(c)
'''

# A GEMM whose kernel never finishes: an evaluation of it runs until it is cancelled (or times out).
HANG = '''
import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl


def workload(a, b):
    def body(a_ref, b_ref, o_ref):
        def cond(c):
            return c[0] >= 0

        def step(c):
            return (c[0] + 1, c[1] * 1.0000001)

        _, acc = jax.lax.while_loop(cond, step, (jnp.int32(0), jnp.dot(a_ref[...], b_ref[...],
                                                                        preferred_element_type=jnp.float32)))
        o_ref[...] = acc.astype(o_ref.dtype)

    return pl.pallas_call(body, out_shape=jax.ShapeDtypeStruct((a.shape[0], b.shape[1]), a.dtype))(a, b)
'''


# -- processes -------------------------------------------------------------------------------------------------
def _procs() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) for every process."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[-1].split()
        if fields[0] != "Z":
            out[int(entry)] = (int(fields[1]), cmd)
    return out


def sandbox_workers(server_pid: int) -> set[int]:
    """The live processes below the server whose command line runs the sandboxed worker."""
    procs = _procs()
    below, frontier = set(), {server_pid}
    while frontier:
        frontier = {p for p, (pp, _) in procs.items() if pp in frontier} - below
        below |= frontier
    return {p for p in below if "maxkernel.harness.jobs.worker" in procs[p][1]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- a real SDK client in a thread of its own ----------------------------------------------------------------
class Client:
    """A ClientSession entered and left in one task of a private event loop (as anyio requires); tests submit
    coroutines to that loop."""

    def __init__(self, transport, server_pid):
        self.transport = transport
        self.server_pid = server_pid
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.session = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._main = asyncio.run_coroutine_threadsafe(self._hold(), self.loop)
        if not self._ready.wait(180):
            raise RuntimeError("the MCP session did not initialise")
        if self._main.done():
            self._main.result()

    async def _hold(self):
        from mcp import ClientSession

        self._stop = asyncio.Event()
        try:
            async with self.transport() as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                self.session = session
                self._ready.set()
                await self._stop.wait()
        finally:
            self._ready.set()

    def run(self, coro, timeout: float = 300):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, name: str, args: dict, timeout: float = 300, progress=None):
        return self.run(self.session.call_tool(name, args, progress_callback=progress), timeout)

    def close(self):
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        try:
            self._main.result(60)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


def _env(tmp: Path) -> dict:
    """The test's environment (CPU JAX, no TPU estimates, a private cache), with the server's data folder and
    temporary folder (where the sandbox's scratch folders go) under the test's own."""
    (tmp / "tmp").mkdir(exist_ok=True)
    env = dict(os.environ)
    env.update(MAXKERNEL_DATA_DIR=str(tmp / "data"), TMPDIR=str(tmp / "tmp"), PYTHONUNBUFFERED="1")
    return env


def _stdio_client(root: Path, tmp: Path) -> Client:
    from mcp import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "maxkernel.cli", "mcp", "--root", str(root)],
                                   env=_env(tmp), cwd=str(tmp))
    errlog = open(tmp / "server.log", "w")  # noqa: SIM115 - closed with the module
    before = set(_procs())
    client = Client(lambda: stdio_client(params, errlog=errlog), None)
    mine = [p for p, (pp, cmd) in _procs().items() if p not in before and pp == os.getpid() and "maxkernel.cli" in cmd]
    assert len(mine) == 1, mine
    client.server_pid = mine[0]
    client.errlog = errlog
    return client


def _http_client(root: Path, tmp: Path) -> Client:
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    port = _free_port()
    errlog = open(tmp / "server.log", "w")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "-m", "maxkernel.cli", "mcp", "--root", str(root), "--http",
                             f"127.0.0.1:{port}", "--token", TOKEN], env=_env(tmp), cwd=str(tmp),
                            stdin=subprocess.DEVNULL, stdout=errlog, stderr=errlog)
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"the HTTP server did not start: {(tmp / 'server.log').read_text()[-2000:]}")
            time.sleep(0.2)
    url = f"http://127.0.0.1:{port}/mcp"

    def transport():
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
        return streamable_http_client(url, http_client=http)

    client = Client(transport, proc.pid)
    client.proc, client.url, client.errlog = proc, url, errlog
    return client


@pytest.fixture(scope="module", params=["stdio", "http"])
def server(request, tmp_path_factory):
    need_module("mcp", extra="mcp")
    tmp = tmp_path_factory.mktemp(f"mcp_{request.param}")
    root = tmp / "root"
    root.mkdir()
    shutil.copy(GEMM, root / "gemm.py")
    (root / "cheat.py").write_text(CHEAT)
    (root / "hang.py").write_text(HANG)
    (tmp / "outside.py").write_text("SECRET = 'not for the client'\n")
    client = (_stdio_client if request.param == "stdio" else _http_client)(root, tmp)
    client.kind, client.root, client.tmp = request.param, root, tmp / "tmp"
    yield client
    try:
        client.close()
    finally:
        proc = getattr(client, "proc", None)
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        client.errlog.close()


def _structured(result) -> dict:
    assert result.structured_content is not None, result
    return result.structured_content


# -- the tests ---------------------------------------------------------------------------------------------------
def test_lists_the_tools_resources_and_prompt(server):
    from maxkernel.mcpserver import served_tools

    tools = server.run(server.session.list_tools()).tools
    assert [t.name for t in tools] == [t.name for t in served_tools()]
    compile_tool = next(t for t in tools if t.name == "compile_kernel")
    assert {"path", "chip", "task", "size"} == set(compile_tool.input_schema["properties"])
    uris = {r.uri for r in server.run(server.session.list_resources()).resources}
    assert {"maxkernel://chips", "maxkernel://pallas/cheat-sheet", "maxkernel://tasks/8p_GEMM/baseline.py",
            "maxkernel://tasks/8p_GEMM/kernel.py"} <= {str(u) for u in uris}
    chips = server.run(server.session.read_resource("maxkernel://chips")).contents[0].text
    assert '"v5e"' in chips
    kernel = server.run(server.session.read_resource("maxkernel://tasks/8p_GEMM/kernel.py")).contents[0].text
    assert kernel == GEMM.read_text()
    sheet = server.run(server.session.read_resource("maxkernel://pallas/cheat-sheet")).contents[0].text
    assert "pallas_call" in sheet
    prompts = server.run(server.session.list_prompts()).prompts
    assert [p.name for p in prompts] == ["optimise_task"]
    text = server.run(server.session.get_prompt("optimise_task", {"task": "8p_GEMM", "chip": "v5e"}))
    body = text.messages[0].content.text
    assert all(step in body for step in ("compile_kernel", "test_kernel", "evaluate_kernel", "8p_GEMM"))


def test_compiles_the_shipped_gemm_for_v5e(server):
    r = server.call("compile_kernel", {"task": "8p_GEMM", "path": "gemm.py", "chip": "v5e"})
    out = _structured(r)
    assert not r.is_error and out["ok"] is True, out
    assert out["chip"] == "v5e"


def test_evaluates_the_shipped_gemm_correct_with_progress(server):
    heard = []

    async def progress(done, total, message):
        heard.append(message)

    r = server.call("evaluate_kernel", {"task": "8p_GEMM", "path": "gemm.py", "size": "smoke"}, progress=progress)
    out = _structured(r)
    assert not r.is_error and out["status"] == "correct", out.get("reason")
    assert out["correctness"]["seeds"] and out["speedup"] is not None  # the same record as evaluate --json
    assert any("sandboxed job" in (m or "") for m in heard), heard


def test_a_cheating_kernel_is_not_correct(server):
    """Rejected for the cheat itself (the GEMM done by XLA outside pallas_call), not for any failure a sandbox error
    or a crash would also give."""
    out = _structured(server.call("evaluate_kernel", {"task": "8p_GEMM", "path": "cheat.py"}))
    assert out["status"] == "rejected" and out["stage"] == "integrity", out
    assert "outside pallas_call" in out["reason"] and "100%" in out["reason"], out["reason"]


def test_errors_are_results_and_the_server_stays_up(server):
    r = server.call("compile_kernel", {"task": "8p_GEMM", "path": "gemm.py", "chip": "v9"})
    out = _structured(r)
    assert r.is_error and out["status"] == "error" and "unknown chip 'v9'" in out["message"] and out["hint"]
    for path in ("../outside.py", str(server.root.parent / "outside.py")):
        r = server.call("read_file", {"path": path})
        out = _structured(r)
        assert r.is_error and "refused" in out["message"] and "SECRET" not in str(out)
    r = server.call("task_info", {"task": str(server.root.parent)})
    assert r.is_error
    r = server.call("evaluate_kernel", {"task": "8p_GEMM", "path": "gemm.py", "seeds": "several"})
    assert r.is_error and _structured(r)["error_kind"] == "malformed_tool_call"
    out = _structured(server.call("chip_specs", {"chip": "v5e"}))  # still answering
    assert out["name"] == "v5e"


def test_cancelling_an_evaluation_kills_its_sandboxed_jobs(server):
    idle = sandbox_workers(server.server_pid)  # pre-started pool workers, serving no call
    folders = set(os.listdir(server.tmp))  # the pre-started pools' scratch roots
    started = threading.Event()

    async def progress(done, total, message):
        if "started" in (message or "") and "sandboxed job" in (message or ""):
            started.set()

    async def evaluate_then_cancel():
        call = asyncio.ensure_future(server.session.call_tool(
            "evaluate_kernel", {"task": "8p_GEMM", "path": "hang.py"}, progress_callback=progress))
        deadline = time.monotonic() + 120
        while not started.is_set() and not call.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert not call.done(), call.result()
        assert started.is_set(), "no sandboxed job started within 120 s"
        await asyncio.sleep(1.0)
        running = sandbox_workers(server.server_pid) - idle
        call.cancel()
        try:
            await call
        except asyncio.CancelledError:
            pass
        return running

    running = server.run(evaluate_then_cancel(), timeout=200)
    assert running, "the evaluation ran no sandboxed worker to kill"
    deadline = time.monotonic() + 10
    while sandbox_workers(server.server_pid) - idle and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not sandbox_workers(server.server_pid) - idle, "a cancelled evaluation left sandboxed processes behind"
    while set(os.listdir(server.tmp)) - folders and time.monotonic() < deadline + 10:
        time.sleep(0.2)
    assert not set(os.listdir(server.tmp)) - folders, "a cancelled evaluation left scratch folders behind"
    out = _structured(server.call("chip_specs", {"chip": "v6e"}))  # and the server still answers
    assert out["name"] == "v6e"


def test_http_refuses_requests_without_the_token(server):
    if server.kind != "http":
        pytest.skip("the token guards the HTTP transport only")
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        req = urllib.request.Request(server.url, data=body, method="POST", headers={
            "Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=30)
        assert err.value.code == 401


def test_code_written_through_the_server_never_runs_in_it(server):
    """A client writes a task folder and a function whose import records its pid; task_info and make_task do their
    work (facts read and the task built in sandboxed jobs), and the server's pid is never recorded. A link planted
    in the task folder is neither handed to the task's job nor read."""
    from test_no_client_code import BASELINE, FUNCTION, SIDE_EFFECT, imported_here

    mark = server.root.parent / f"mark-{server.kind}.txt"
    effect = SIDE_EFFECT.format(mark=str(mark))
    for path, text in (("evil/baseline.py", effect + BASELINE), ("fn.py", effect + FUNCTION)):
        assert not server.call("write_file", {"path": path, "content": text}).is_error
    (server.root / "evil" / "secret.py").symlink_to(server.root.parent / "outside.py")  # a local process's link
    info = _structured(server.call("task_info", {"task": "evil"}))
    assert info["inputs"] == ["float32[128, 256]"], info
    assert "not for the client" not in str(info) and "secret.py" not in info.get("reference_files", {})
    r = server.call("read_file", {"path": "evil/secret.py"})
    assert r.is_error and "not for the client" not in str(_structured(r))
    made = _structured(server.call("make_task", {"function": "fn.py:scale", "args": ["f32[T=4096,1024]"]}))
    assert made["ok"], made
    lines = mark.read_text().splitlines() if mark.exists() else []
    assert not [ln for ln in lines if ln.split()[0] == str(server.server_pid)], lines
    assert imported_here(mark) == []
