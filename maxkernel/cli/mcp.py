"""`maxkernel mcp`: the tools as an MCP server for any coding agent, on stdio (default) or streamable HTTP."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import click

from maxkernel.cli._common import UsageError

__all__ = ["mcp"]

_INSTALL = "the MCP server needs the mcp SDK: pip install 'maxkernel[mcp]'"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_http(value: str) -> tuple[str, int]:
    """HOST:PORT, :PORT or PORT (host 127.0.0.1); [::1]:PORT for IPv6."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "", value
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise UsageError(f"--http {value!r}: give HOST:PORT, e.g. 127.0.0.1:8765") from None
    if not 0 < number < 65536:
        raise UsageError(f"--http {value!r}: the port must be 1-65535")
    return host, number


@click.command()
@click.option("--root", default=".", show_default=True, type=click.Path(file_okay=False),
              help="workspace root: every path argument must lie inside it")
@click.option("--http", "http", default=None, metavar="HOST:PORT",
              help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (host 127.0.0.1 by default)")
@click.option("--token", default=None, help="bearer token HTTP clients must send (required off localhost; default "
              "MAXKERNEL_MCP_TOKEN)")
def mcp(root: str, http: str | None, token: str | None) -> None:
    """Serve the tools, task resources and an "optimise this task" prompt over MCP (stdio by default)."""
    import asyncio
    import importlib.util

    root_path = Path(root).expanduser()
    if not root_path.is_dir():
        raise UsageError(f"--root {root}: no such folder")
    if importlib.util.find_spec("mcp") is None:
        raise UsageError(_INSTALL)
    if http is None and token is not None:
        raise UsageError("--token is for --http; a stdio server is reached only by the process that started it")
    if http is not None:
        from maxkernel.settings import get_settings

        configured = get_settings().mcp_token
        token = token or (configured.get_secret_value() if configured else None)
        host, port = parse_http(http)
        if not _loopback(host) and not token:
            raise UsageError(f"--http {http}: serving beyond localhost needs --token TOKEN or MAXKERNEL_MCP_TOKEN "
                             "(clients send Authorization: Bearer TOKEN)")
    try:
        from maxkernel.mcpserver import server
    except ImportError as exc:
        raise UsageError(f"{_INSTALL} ({exc})") from None
    if http is None:
        asyncio.run(server.serve_stdio(root_path))
    else:
        click.echo(f"maxkernel: MCP on http://{host}:{port}/mcp (root {root_path.resolve()})", err=True)
        asyncio.run(server.serve_http(root_path, host, port, token))
