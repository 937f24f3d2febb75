"""`maxkernel mcp`'s usage errors: one line, exit 2, before any server starts."""

from __future__ import annotations

import importlib.util

import pytest
from _extras import need_module

from maxkernel.cli import main
from maxkernel.cli.mcp import parse_http

pytestmark = pytest.mark.unit


def _one_line_exit_2(capsys, argv, words):
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("maxkernel: error: "), err
    assert words in err, err
    return err


def test_without_the_sdk_it_says_how_to_install_it(capsys, monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mcp" else real(name, *a))
    _one_line_exit_2(capsys, ["mcp", "--root", str(tmp_path)], "pip install 'maxkernel[mcp]'")


@pytest.mark.parametrize("argv, words", [
    (["mcp", "--http", "0.0.0.0:8765"], "needs --token"),
    (["mcp", "--http", "192.168.1.5:8765"], "needs --token"),
    (["mcp", "--token", "t"], "--token is for --http"),
    (["mcp", "--http", "localhost:http"], "give HOST:PORT"),
    (["mcp", "--http", "127.0.0.1:70000"], "port must be 1-65535"),
    (["mcp", "--root", "/no/such/folder"], "no such folder"),
])
def test_usage_errors(capsys, argv, words):
    _one_line_exit_2(capsys, argv, words)


def test_the_token_may_come_from_the_settings(capsys, monkeypatch):
    """MAXKERNEL_MCP_TOKEN satisfies the token rule (so the token need not be on a command line); the server
    would then start, which is stubbed here."""
    need_module("mcp", extra="mcp")
    from maxkernel.mcpserver import server
    from maxkernel.settings import get_settings

    started = {}

    async def fake_serve_http(root, host, port, token):
        started.update(host=host, port=port, token=token)

    monkeypatch.setenv("MAXKERNEL_MCP_TOKEN", "from-settings")
    get_settings.cache_clear()
    monkeypatch.setattr(server, "serve_http", fake_serve_http)
    try:
        assert main(["mcp", "--http", "0.0.0.0:8765"]) == 0
    finally:
        monkeypatch.delenv("MAXKERNEL_MCP_TOKEN")
        get_settings.cache_clear()
    assert started == {"host": "0.0.0.0", "port": 8765, "token": "from-settings"}


def test_http_address_defaults_to_localhost():
    assert parse_http("8765") == ("127.0.0.1", 8765)
    assert parse_http(":8765") == ("127.0.0.1", 8765)
    assert parse_http("0.0.0.0:80") == ("0.0.0.0", 80)
    assert parse_http("[::1]:9000") == ("::1", 9000)
