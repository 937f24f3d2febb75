"""maxkernel as an MCP server: the sub-agents' tools, the task resources and an "optimise this task" prompt for any
coding agent (`maxkernel mcp`). tools.py and resources.py need no SDK; server.py needs `pip install 'maxkernel[mcp]'`."""

from maxkernel.mcpserver.resources import prompt, read_resource, resource_list
from maxkernel.mcpserver.tools import ServedTool, ToolHost, served_functions, served_tools

__all__ = ["ServedTool", "ToolHost", "served_functions", "served_tools", "resource_list", "read_resource", "prompt"]
