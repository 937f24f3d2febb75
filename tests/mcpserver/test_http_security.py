"""`maxkernel mcp --http` against DNS rebinding: which binds may go without a token (the three local spellings,
exactly), and the Host/Origin allow-lists that a real server on a real socket enforces for every bind, behind the
token. The servers here are the real ASGI app (`server.http_app`) under a real uvicorn in a thread; no tool runs."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from _extras import need_module

from maxkernel.cli import main
from maxkernel.cli import mcp as cli_mcp

TOKEN = "rebinding-test-token"
EVIL = "evil.example"


def _usage_error(capsys, argv) -> str:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("maxkernel: error: "), err
    return err


@pytest.fixture
def started(monkeypatch):
    """Stub out the server: what `maxkernel mcp --http` would have served, if it got that far."""
    need_module("mcp", extra="mcp")
    from maxkernel.mcpserver import server

    calls = {}

    async def fake_serve_http(root, host, port, token, allow_hosts=()):
        calls.update(host=host, port=port, token=token, allow_hosts=list(allow_hosts))

    from maxkernel.settings import get_settings

    monkeypatch.delenv("MAXKERNEL_MCP_TOKEN", raising=False)
    monkeypatch.setattr(server, "serve_http", fake_serve_http)
    get_settings.cache_clear()
    yield calls
    get_settings.cache_clear()


# -- which binds need a token ----------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("bind", ["127.0.0.2:8765", "[0::1]:8765", "127.1:8765", "[0:0:0:0:0:0:0:1]:8765",
                                  "10.1.2.3:8765", "myhost:8765"])
def test_other_spellings_of_loopback_need_a_token(capsys, started, bind):
    """127.0.0.2 and 0::1 are loopback too, but a page can rebind a DNS name to them: only 127.0.0.1, localhost
    and ::1 as typed are served without a token."""
    err = _usage_error(capsys, ["mcp", "--http", bind])
    assert "needs --token" in err and "127.0.0.1, localhost and [::1]" in err, err
    assert not started


@pytest.mark.unit
@pytest.mark.parametrize("bind, host", [("127.0.0.1:8765", "127.0.0.1"), ("localhost:8765", "localhost"),
                                        ("[::1]:8765", "::1")])
def test_the_three_local_spellings_need_no_token(started, bind, host):
    assert main(["mcp", "--http", bind, "--allow-host", "mcp.example:9000"]) == 0
    assert started == {"host": host, "port": 8765, "token": None, "allow_hosts": [("mcp.example", 9000)]}


@pytest.mark.unit
def test_other_spellings_are_served_with_a_token(started):
    assert main(["mcp", "--http", "127.0.0.2:8765", "--token", TOKEN, "--allow-host", "MCP.Example"]) == 0
    assert started == {"host": "127.0.0.2", "port": 8765, "token": TOKEN, "allow_hosts": [("mcp.example", None)]}


# -- --allow-host ----------------------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("value, parsed", [
    ("mcp.example.com", ("mcp.example.com", None)), ("MCP.example.com:443", ("mcp.example.com", 443)),
    ("10.0.0.7:8765", ("10.0.0.7", 8765)), ("[fd00::1]", ("fd00::1", None)), ("[FD00::1]:80", ("fd00::1", 80)),
])
def test_allow_host_values(value, parsed):
    assert cli_mcp.parse_allow_host(value) == parsed


@pytest.mark.unit
@pytest.mark.parametrize("value, words", [
    ("http://mcp.example", "NAME[:PORT]"), ("mcp.example/mcp", "NAME[:PORT]"), ("", "NAME[:PORT]"),
    ("fd00::1", "NAME[:PORT]"), ("[fd00::1", "NAME[:PORT]"), ("mcp.example:x", "NAME[:PORT]"),
    ("mcp.example:", "NAME[:PORT]"), ("mcp.example:0", "port must be 1-65535"), ("[::1]:70000", "1-65535"),
])
def test_bad_allow_host_is_a_usage_error(capsys, started, value, words):
    err = _usage_error(capsys, ["mcp", "--http", "127.0.0.1:8765", "--allow-host", value])
    assert "--allow-host" in err and words in err, err
    assert not started


@pytest.mark.unit
def test_allow_host_is_for_http(capsys):
    assert "--allow-host is for --http" in _usage_error(capsys, ["mcp", "--allow-host", "mcp.example"])


@pytest.mark.unit
def test_the_allow_lists():
    """Exact ports (a page on another local port is another origin), IPv6 bracketed, on for every bind."""
    need_module("mcp", extra="mcp")
    from maxkernel.mcpserver.server import transport_security

    local = transport_security("localhost", 8765)
    assert local.enable_dns_rebinding_protection
    assert local.allowed_hosts == ["127.0.0.1:8765", "localhost:8765", "[::1]:8765"]
    assert local.allowed_origins == ["http://127.0.0.1:8765", "http://localhost:8765", "http://[::1]:8765"]
    other = transport_security("0::1", 8765, [("mcp.example", None)])
    assert other.enable_dns_rebinding_protection
    assert other.allowed_hosts == ["[0::1]:8765", "mcp.example:8765"]
    assert other.allowed_origins == ["http://[0::1]:8765", "http://mcp.example:8765", "https://mcp.example:8765"]
    proxied = transport_security("10.0.0.7", 8765, [("mcp.example", 443)])
    assert proxied.allowed_hosts == ["10.0.0.7:8765", "mcp.example:443", "mcp.example"]
    assert "https://mcp.example" in proxied.allowed_origins


# -- a real server on a real socket ----------------------------------------------------------------------------
def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        try:
            sock.bind((host, 0))
        except OSError as exc:
            pytest.skip(f"cannot bind {host} here: {exc}")
        return sock.getsockname()[1]


class _Served:
    def __init__(self, host: str, port: int, token: str | None):
        self.host, self.port, self.token = host, port, token
        self.authority = f"{host}:{port}"

    def post(self, *, host: str | None = None, origin: str | None = None, token: str | None = None) -> int:
        """An MCP initialize POST to /mcp with the given Host (default: the right one), Origin and token."""
        import httpx

        headers = {"Host": host or self.authority, "Accept": "application/json, text/event-stream",
                   "Content-Type": "application/json"}
        if origin is not None:
            headers["Origin"] = origin
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "rebinding-test", "version": "0"}}}
        with httpx.Client(timeout=30, trust_env=False) as client:
            reply = client.post(f"http://{self.authority}/mcp", headers=headers, content=json.dumps(body))
        return reply.status_code


@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    """Start `server.http_app(...)` under uvicorn on HOST (a free port); every server stops with the module."""
    need_module("mcp", extra="mcp")
    import uvicorn

    from maxkernel.mcpserver import server

    running = []

    def start(host: str, token: str | None, allow_hosts=()) -> _Served:
        port = _free_port(host)
        root = tmp_path_factory.mktemp("root")
        app = server.http_app(root, host, port, token, allow_hosts)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on",
                                timeout_graceful_shutdown=5)
        srv = uvicorn.Server(config)
        thread = threading.Thread(target=srv.run, daemon=True)
        thread.start()
        running.append((srv, thread))
        deadline = time.monotonic() + 30
        while not srv.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                pytest.fail(f"uvicorn did not start on {host}:{port}")
            time.sleep(0.05)
        return _Served(host, port, token)

    yield start
    for srv, _ in running:
        srv.should_exit = True
    for _, thread in running:
        thread.join(15)


# 127.0.0.1 needs no token; 127.0.0.2 (bindable on Linux) needs one.
@pytest.fixture(scope="module", params=[("127.0.0.1", None), ("127.0.0.2", TOKEN)], ids=["127.0.0.1", "127.0.0.2"])
def bound(request, serve):
    host, token = request.param
    return serve(host, token)


@pytest.mark.integration
def test_the_right_host_is_accepted(bound):
    assert bound.post(token=bound.token) == 200
    assert bound.post(token=bound.token, origin=f"http://{bound.authority}") == 200


@pytest.mark.integration
def test_a_rebinding_host_is_refused(bound):
    """A page at http://evil.example:PORT whose name now points here: its Host is refused, token or not."""
    assert bound.post(host=f"{EVIL}:{bound.port}", token=bound.token) == 421
    assert bound.post(host=EVIL, token=bound.token) == 421


@pytest.mark.integration
def test_a_foreign_origin_is_refused(bound):
    assert bound.post(origin=f"http://{EVIL}", token=bound.token) == 403
    assert bound.post(origin=f"http://{EVIL}:{bound.port}", token=bound.token) == 403
    assert bound.post(origin="null", token=bound.token) == 403


@pytest.mark.integration
def test_another_port_is_another_origin(bound):
    """A page served on another local port is not this server: its Host or Origin names the other port."""
    other = bound.port + 1 if bound.port < 65535 else bound.port - 1
    assert bound.post(host=f"{bound.host}:{other}", token=bound.token) == 421
    assert bound.post(origin=f"http://{bound.host}:{other}", token=bound.token) == 403
    assert bound.post(origin=f"http://localhost:{other}", token=bound.token) == 403


@pytest.mark.integration
def test_the_local_spellings_stand_for_one_another(serve):
    served = serve("127.0.0.1", None)
    for name in ("127.0.0.1", "localhost", "[::1]"):
        assert served.post(host=f"{name}:{served.port}", origin=f"http://{name}:{served.port}") == 200, name
    other = serve("127.0.0.2", TOKEN)  # not a local spelling: only its own name
    assert other.post(host=f"localhost:{other.port}", token=TOKEN) == 421


@pytest.mark.integration
def test_the_token_comes_first(serve):
    served = serve("127.0.0.2", TOKEN)
    assert served.post() == 401
    assert served.post(token="wrong") == 401
    assert served.post(host=f"{EVIL}:{served.port}") == 401  # nothing about the server before the token
    assert served.post(host=f"{EVIL}:{served.port}", token=TOKEN) == 421  # and the token does not open Host
    assert served.post(token=TOKEN) == 200


@pytest.mark.integration
def test_allow_host_extends_both_lists(serve):
    served = serve("127.0.0.2", TOKEN, [("mcp.example", None), ("proxy.example", 443)])
    port = served.port
    assert served.post(host=f"mcp.example:{port}", origin=f"http://mcp.example:{port}", token=TOKEN) == 200
    assert served.post(host=f"mcp.example:{port}", origin=f"https://mcp.example:{port}", token=TOKEN) == 200
    assert served.post(host="proxy.example", origin="https://proxy.example", token=TOKEN) == 200
    assert served.post(host=f"{EVIL}:{port}", token=TOKEN) == 421
    assert served.post(host=f"mcp.example:{port}", origin=f"http://{EVIL}", token=TOKEN) == 403
