"""What a coding agent is told (the Gemini CLI context file and commands, the Claude Code skill) names only tools
and arguments the server really serves, says what the harness stands for, and the copies in integrations/ are
what maxkernel/mcpserver/clients.py makes."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from maxkernel.mcpserver import clients, resources, served_tools

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
INTEGRATIONS = REPO / "integrations"
# A backticked `name` or `name(...)`: a lower-case identifier, perhaps called. Anything else in backticks (a file,
# a command line, `pl.pallas_call`, `def workload(*inputs)`) is not a tool mention.
MENTION = re.compile(r"`([a-z_][a-z0-9_]*)(\((.*?)\))?`", re.S)
KEYWORD = re.compile(r"(?:^|[,(\s])([a-z_][a-z0-9_]*)\s*=")


@pytest.fixture(scope="module")
def schemas() -> dict[str, dict]:
    """The served tools' input schemas, from the server's own collection (not a list kept here)."""
    return {t.name: t.input_schema() for t in served_tools()}


def texts() -> dict[str, str]:
    """Every text the agent is given, as the repository ships it and as `maxkernel integrate` writes it."""
    out = {"MAXKERNEL.md": clients.gemini_context(), "SKILL.md": clients.claude_skill()}
    for name in clients.COMMANDS:
        out[f"commands/maxkernel/{name}.toml"] = tomllib.loads(clients.gemini_command(name))["prompt"]
    for path in sorted(INTEGRATIONS.rglob("*")):
        if path.suffix in (".md", ".toml"):
            text = path.read_text()
            out[str(path.relative_to(REPO))] = tomllib.loads(text)["prompt"] if path.suffix == ".toml" else text
    return out


def mentions(text: str) -> list[tuple[str, list[str] | None]]:
    """(name, keyword arguments or None for a bare `name`) for every backticked mention."""
    return [(m[1], KEYWORD.findall(m[3]) if m[2] else None) for m in MENTION.finditer(text)]


def test_the_mention_parser_finds_calls_and_bare_names():
    assert mentions('`compile_kernel(path="k.py", chip=...)`, `list_files` and `pl.pallas_call`, `a b`') == [
        ("compile_kernel", ["path", "chip"]), ("list_files", None)]


@pytest.mark.parametrize("where", sorted(texts()))
def test_every_tool_and_argument_named_exists_in_the_served_schemas(where, schemas):
    text = texts()[where]
    arguments = {a for s in schemas.values() for a in s.get("properties", {})}
    found = mentions(text)
    assert found, f"{where} names no tool"
    for name, keywords in found:
        if keywords is None:  # a bare `name`: a tool, or an argument some tool takes
            assert name in schemas or name in arguments, f"{where}: `{name}` is neither a served tool nor an " \
                                                          f"argument of one (tools: {sorted(schemas)})"
            continue
        assert name in schemas, f"{where}: `{name}(...)` is not a served tool (tools: {sorted(schemas)})"
        props = schemas[name].get("properties", {})
        for keyword in keywords:
            assert keyword in props, f"{where}: {name} has no argument {keyword!r} (it takes {sorted(props)})"


def test_the_resources_named_exist():
    known = {resources.CHIPS_URI, resources.CHEAT_SHEET_URI} | {e.uri for e in resources.TEMPLATES}
    for where, text in texts().items():
        for uri in re.findall(r"maxkernel://[\w/{}.-]+", text):
            assert uri in known, f"{where}: {uri}"


def test_the_guide_walks_the_whole_workflow_with_the_real_tools(schemas):
    guide = clients.GUIDE
    steps = ["Plan", "Write", "Compile", "Test", "Evaluate", "Estimate", "Tune"]
    positions = [guide.index(f"**{s}.**") for s in steps]
    assert positions == sorted(positions), "the steps are out of order"
    named = {name for name, _ in mentions(guide)}
    workflow = {"task_info", "write_file", "compile_kernel", "test_kernel", "evaluate_kernel", "estimate_kernel",
                "tune_kernel", "make_task", "check_port"}
    assert workflow <= named <= set(schemas) | {a for s in schemas.values() for a in s.get("properties", {})}


def test_the_guide_says_whose_verdict_it_is_and_what_cpu_time_and_the_estimate_are():
    guide = clients.GUIDE
    assert "The verdict is the harness's, never yours." in guide
    assert "CPU time is not TPU speed." in guide
    assert "The TPU estimate is an estimate." in guide and "not measured" in guide
    where = guide.split("## Where things land", 1)[1]
    for thing in ("The kernel", "The verdict", "Profiles", "A task made from the person's function"):
        assert f"**{thing}" in where, thing


def test_the_context_file_and_the_skill_share_one_text():
    skill = clients.claude_skill()
    front, body = skill.split("\n---\n\n", 1)
    assert body == clients.gemini_context() and clients.GUIDE in body
    meta = dict(line.split(": ", 1) for line in front.removeprefix("---\n").splitlines())
    assert meta["name"] == "maxkernel" and len(meta["description"]) > 80


@pytest.mark.parametrize("name", sorted(clients.COMMANDS))
def test_each_gemini_command_is_a_custom_command_file(name):
    """Gemini CLI's format: `prompt` (required) and `description`, {{args}} for what the person typed."""
    parsed = tomllib.loads(clients.gemini_command(name))
    assert set(parsed) == {"description", "prompt"}
    assert parsed["description"] == clients.COMMANDS[name][0] and "\n" not in parsed["description"]
    assert len(parsed["description"]) <= 95  # Gemini CLI cuts longer ones in its command menu
    assert parsed["prompt"] == clients.COMMANDS[name][1] + "\n" and "{{args}}" in parsed["prompt"]


def test_the_repository_copies_are_what_clients_py_makes():
    """integrations/ is generated: after an edit of clients.py, `python -m maxkernel.mcpserver.clients`."""
    expected = clients.repo_files()
    on_disk = {str(p.relative_to(REPO)): p.read_text() for p in INTEGRATIONS.rglob("*") if p.is_file()}
    stale = sorted(p for p in set(expected) | set(on_disk) if expected.get(p) != on_disk.get(p))
    assert not stale, f"out of date: {stale}; run python -m maxkernel.mcpserver.clients"


def test_the_repository_extension_and_plugin_start_the_server_on_the_clients_workspace():
    gemini = json.loads((INTEGRATIONS / "gemini" / "gemini-extension.json").read_text())
    assert gemini["mcpServers"]["maxkernel"] == {"command": "maxkernel", "args": ["mcp", "--root", "${workspacePath}"],
                                                 "timeout": 600_000}
    assert gemini["name"] == "maxkernel" and gemini["contextFileName"] == "MAXKERNEL.md"
    claude = json.loads((INTEGRATIONS / "claude" / ".mcp.json").read_text())
    assert claude["mcpServers"]["maxkernel"] == {"command": "maxkernel", "args": ["mcp", "--root", "."]}
    plugin = json.loads((INTEGRATIONS / "claude" / ".claude-plugin" / "plugin.json").read_text())
    assert plugin["name"] == "maxkernel" and (INTEGRATIONS / "claude" / "skills" / "maxkernel" / "SKILL.md").is_file()
