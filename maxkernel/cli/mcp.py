"""`maxkernel mcp`: the tools as an MCP server for any coding agent, on stdio (default) or streamable HTTP."""

from __future__ import annotations

import re
from pathlib import Path

import click

from maxkernel.cli._common import UsageError

__all__ = ["mcp", "parse_allow_host", "parse_http"]

_INSTALL = "the MCP server needs the mcp SDK: pip install 'maxkernel[mcp]'"

# The only binds served without a token, compared as the user spelled them: 127.0.0.2, 0::1 or 127.1 reach the
# same machine too, but a DNS name rebound to one of them must not find an open server (the same three as
# maxkernel.mcpserver.server.LOCAL_HOSTS; that module needs the SDK, so this one does not import it).
_LOCAL = ("127.0.0.1", "localhost", "::1")
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?")  # a DNS name or an IPv4 address


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


def parse_allow_host(value: str) -> tuple[str, int | None]:
    """NAME[:PORT] for --allow-host: a DNS name, an IPv4 address or a bracketed IPv6 one ([fd00::1]:8765); the
    name comes back lower-cased, IPv6 without brackets, the port None when not given (the bind's port)."""
    bad = UsageError(f"--allow-host {value!r}: give NAME[:PORT] as clients send it in the Host header, e.g. "
                     "mcp.example.com or mcp.example.com:8765")
    if value.startswith("["):
        name, close, rest = value[1:].partition("]")
        if not close or not name or (rest and not rest.startswith(":")) or not re.fullmatch(r"[0-9A-Fa-f:.]+", name):
            raise bad
        port = rest[1:] if rest else None
    else:
        name, sep, port = value.partition(":")
        if not _NAME.fullmatch(name) or (sep and ":" in port):
            raise bad
        port = port if sep else None
    if port is None:
        return name.lower(), None
    if not port.isdigit():
        raise bad
    if not 0 < int(port) < 65536:
        raise UsageError(f"--allow-host {value!r}: the port must be 1-65535")
    return name.lower(), int(port)


@click.command()
@click.option("--root", default=".", show_default=True, type=click.Path(file_okay=False),
              help="workspace root: every path argument must lie inside it")
@click.option("--http", "http", default=None, metavar="HOST:PORT",
              help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (host 127.0.0.1 by default)")
@click.option("--token", default=None, help="bearer token HTTP clients must send (required unless HOST is "
              "127.0.0.1, localhost or [::1], spelled so; default MAXKERNEL_MCP_TOKEN)")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME[:PORT]",
              help="with --http: also accept requests whose Host header (and Origin, http or https) names NAME "
                   "(port: the bind's); repeatable. Without it only the bind address itself is accepted (for "
                   "127.0.0.1, localhost and [::1] all three), which refuses DNS-rebinding pages")
def mcp(root: str, http: str | None, token: str | None, allow_hosts: tuple[str, ...]) -> None:
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
    if http is None and allow_hosts:
        raise UsageError("--allow-host is for --http; a stdio server has no Host header to check")
    if http is not None:
        from maxkernel.settings import get_settings

        configured = get_settings().mcp_token
        token = token or (configured.get_secret_value() if configured else None)
        host, port = parse_http(http)
        if host not in _LOCAL and not token:
            raise UsageError(f"--http {http}: only 127.0.0.1, localhost and [::1] (spelled so) are served without "
                             "a token; this address needs --token TOKEN or MAXKERNEL_MCP_TOKEN (clients send "
                             "Authorization: Bearer TOKEN)")
        extra = [parse_allow_host(value) for value in allow_hosts]
    try:
        from maxkernel.mcpserver import server
    except ImportError as exc:
        raise UsageError(f"{_INSTALL} ({exc})") from None
    if http is None:
        asyncio.run(server.serve_stdio(root_path))
    else:
        shown = f"[{host}]" if ":" in host else host
        click.echo(f"maxkernel: MCP on http://{shown}:{port}/mcp (root {root_path.resolve()})", err=True)
        if host in ("0.0.0.0", "::") and not extra:
            click.echo(f"maxkernel: requests must name the server {shown}, 127.0.0.1, localhost or [::1] in their "
                       "Host header; add --allow-host NAME for the names remote clients use", err=True)
        # allow_hosts only when given: serve_http's first four arguments are what a stub in the tests takes
        asyncio.run(server.serve_http(root_path, host, port, token, **({"allow_hosts": extra} if extra else {})))
