"""The MCP server over maxkernel's tools, on stdio or streamable HTTP (the official `mcp` SDK, low-level server):
the tools, resources and prompt of tools.py and resources.py, progress from the sandboxed jobs, cancellation that
kills them."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
from pathlib import Path

import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from maxkernel.mcpserver import resources as res
from maxkernel.mcpserver.tools import ToolHost, is_error

__all__ = ["build_server", "serve_stdio", "serve_http"]

_log = logging.getLogger("maxkernel.mcp")


def _result(result: dict) -> types.CallToolResult:
    """The tool's dict as structured content and as JSON text (what `--json` prints); isError on an error result."""
    text = json.dumps(result, indent=2, default=str)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=json.loads(text), is_error=is_error(result))


def build_server(root: Path, host: ToolHost | None = None) -> Server:
    """The low-level MCP server for workspace `root` (every path argument is confined to it)."""
    from maxkernel import __version__ as version
    from maxkernel.settings import get_settings

    root = Path(root).resolve()
    # make_task reads a person's FILE.py from the drafts folder: for an MCP client that is the workspace root.
    get_settings().drafts_dir = root
    host = host or ToolHost(root)

    async def list_tools(ctx: ServerRequestContext, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name=t.name, description=t.description,
                                                       input_schema=t.input_schema())
                                            for t in host.tools.values()])

    async def call_tool(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> types.CallToolResult:
        loop = asyncio.get_running_loop()
        done = 0

        async def report(text: str) -> None:
            try:
                await ctx.session.report_progress(done, None, text)  # a no-op unless the client sent a token
            except Exception:  # noqa: BLE001 - progress is a courtesy; a closed stream must not fail the call
                _log.debug("progress not sent", exc_info=True)

        def on_event(text: str) -> None:  # from the harness's threads, one line per sandboxed job started/finished
            nonlocal done
            done += 1
            asyncio.run_coroutine_threadsafe(report(text), loop)

        await report(f"{params.name}: started")
        result = await host.call(params.name, params.arguments, on_event=on_event)
        done += 1
        await report(f"{params.name}: {'failed' if is_error(result) else 'done'}")
        return _result(result)

    async def list_resources(ctx: ServerRequestContext, params) -> types.ListResourcesResult:
        entries = await asyncio.to_thread(res.resource_list)
        return types.ListResourcesResult(resources=[types.Resource(uri=e.uri, name=e.name, description=e.description,
                                                                   mime_type=e.mime_type) for e in entries])

    async def list_templates(ctx: ServerRequestContext, params) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(uri_template=e.uri, name=e.name, description=e.description, mime_type=e.mime_type)
            for e in res.TEMPLATES])

    async def read_resource(ctx: ServerRequestContext,
                            params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        try:
            text, mime = await asyncio.to_thread(res.read_resource, str(params.uri))
        except res.ResourceError as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=str(params.uri), mime_type=mime,
                                                                             text=text)])

    async def list_prompts(ctx: ServerRequestContext, params) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[types.Prompt(
            name=res.PROMPT_NAME, description=res.prompt.__doc__,
            arguments=[types.PromptArgument(name=n, description=d, required=r) for n, d, r in res.PROMPT_ARGS])])

    async def get_prompt(ctx: ServerRequestContext, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        if params.name != res.PROMPT_NAME:
            raise MCPError(types.INVALID_PARAMS, f"unknown prompt {params.name!r}: {res.PROMPT_NAME}")
        args = params.arguments or {}
        if not args.get("task"):
            raise MCPError(types.INVALID_PARAMS, "optimise_task needs the argument task, e.g. 12p_RMSNorm")
        text = res.prompt(args["task"], args.get("chip") or "v5e")
        return types.GetPromptResult(description=f"Optimise {args['task']} with maxkernel's tools", messages=[
            types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))])

    return Server("maxkernel", version=version,
                  instructions="maxkernel's trusted tools for JAX Pallas kernels: compile for a TPU chip without one, "
                               "strict tests, the sandboxed verdict, profiles, TPU estimates, autotuning. Paths are "
                               f"relative to the workspace root {root}.",
                  on_list_tools=list_tools, on_call_tool=call_tool, on_list_resources=list_resources,
                  on_list_resource_templates=list_templates, on_read_resource=read_resource,
                  on_list_prompts=list_prompts, on_get_prompt=get_prompt)


async def serve_stdio(root: Path) -> None:
    """Serve one client on stdin/stdout (the SDK diverts fd 1 to stderr meanwhile: stdout carries only protocol)."""
    from mcp.server.stdio import stdio_server

    from maxkernel.harness.verdict.task_facts import described
    from maxkernel.tasks import sandbox_folder_code

    sandbox_folder_code(described)  # this process never imports code from the root, whatever thread asks
    async with stdio_server() as (read, write):
        server = build_server(root)  # after the diversion: nothing printed while building reaches the wire
        await server.run(read, write, server.create_initialization_options())


class _BearerToken:
    """ASGI guard, outermost: a request without `Authorization: Bearer <token>` gets 401 and reaches nothing (not
    even the Host/Origin check, so a refusal there tells a client without the token nothing)."""

    def __init__(self, app, token: str):
        self.app, self.token = app, token.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, b"Bearer " + self.token):
                body = b'{"error": "unauthorized: send Authorization: Bearer <token>"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


# Binds that need no token (as spelled: maxkernel.cli.mcp keeps the same three) and stand for one another in Host.
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
_ANY = ("0.0.0.0", "::")  # every interface: the local spellings reach it too


def _authorities(name: str, port: int, default_port: int) -> list[str]:
    """Host header values naming NAME at PORT: IPv6 bracketed; the bare name too where PORT is the default."""
    name = f"[{name}]" if ":" in name else name
    return [f"{name}:{port}"] + ([name] if port == default_port else [])


def transport_security(host: str, port: int, allow_hosts=()):
    """The SDK's DNS-rebinding protection for a bind at HOST:PORT, on for every bind: a request whose Host header
    is not HOST:PORT (any of the three local spellings for a local or all-interfaces bind) or whose Origin is not
    http:// one of those is refused by the transport (421, 403) before it reaches the server. ALLOW_HOSTS,
    (name, port or None for PORT) pairs, adds names clients use (a real DNS name), with http and https origins."""
    from mcp.server.transport_security import TransportSecuritySettings

    names = ([] if host in LOCAL_HOSTS else [host]) + (list(LOCAL_HOSTS) if host in LOCAL_HOSTS + _ANY else [])
    hosts, origins = [], []
    for name in names:
        for value in _authorities(name, port, 80):
            hosts.append(value)
            origins.append(f"http://{value}")
    for name, extra_port in allow_hosts:
        for scheme, default in (("http", 80), ("https", 443)):  # behind a TLS proxy, say
            for value in _authorities(name, extra_port or port, default):
                hosts.append(value)
                origins.append(f"{scheme}://{value}")
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=list(dict.fromkeys(hosts)),
                                     allowed_origins=list(dict.fromkeys(origins)))


def http_app(root: Path, host: str, port: int, token: str | None, allow_hosts=()):
    """The streamable HTTP app at /mcp for a bind at HOST:PORT: Host/Origin allow-lists always on (see
    `transport_security`), behind the token when one is set (checked first)."""
    app = build_server(root).streamable_http_app(host=host,
                                                 transport_security=transport_security(host, port, allow_hosts))
    return _BearerToken(app, token) if token else app


async def serve_http(root: Path, host: str, port: int, token: str | None, allow_hosts=()) -> None:
    import uvicorn

    from maxkernel.harness.verdict.task_facts import described
    from maxkernel.tasks import sandbox_folder_code

    sandbox_folder_code(described)  # this process never imports code from the root, whatever thread asks
    config = uvicorn.Config(http_app(root, host, port, token, allow_hosts), host=host, port=port,
                            log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
