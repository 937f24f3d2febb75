"""The real coding agents read what `maxkernel integrate` writes and what integrations/ ships, and reach the server:
Gemini CLI and Claude Code from npm (./scripts/setup.sh installs them into ~/.cache/maxkernel/npm), each in a
temporary HOME with no API key, asked `mcp list` (which starts the server and completes the MCP handshake).

Both clients serve a workspace's MCP servers only in a folder the person trusts; the tests trust the temporary
root the way each client documents for automation (GEMINI_CLI_TRUST_WORKSPACE) or as its trust dialog records it
(Claude Code's hasTrustDialogAccepted in ~/.claude.json)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _extras import missing

REPO = Path(__file__).resolve().parents[2]
NPM_PREFIX = Path(os.environ.get("MAXKERNEL_NPM_PREFIX") or Path.home() / ".cache" / "maxkernel" / "npm")
# Credentials the clients (or the server) could pick up: none is needed, so none is passed.
SECRETS = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT",
           "GOOGLE_APPLICATION_CREDENTIALS", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
           "GEMINI_CLI_HOME", "PYENV_VERSION")
TIMEOUT = 240

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


def client(name: str, package: str) -> str:
    """The client's executable: the npm cache's, else one on PATH; missing: skip (fail in CI)."""
    cached = NPM_PREFIX / "node_modules" / ".bin" / name
    if cached.exists() and os.access(cached, os.X_OK):
        return str(cached)
    found = shutil.which(name)
    if found is None:
        missing(f"needs the {name} CLI ({package} from npm): ./scripts/setup.sh installs it into {NPM_PREFIX}")
    return found


def maxkernel() -> list[str]:
    """The installed console script beside this interpreter (what a person runs), else python -m maxkernel.cli."""
    script = Path(sys.executable).parent / "maxkernel"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "maxkernel.cli"]


@pytest.fixture
def env(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    out = {k: v for k, v in os.environ.items() if k not in SECRETS}
    # `maxkernel` for the repository's extension and plugin, which find it on PATH; the clients' own node too.
    out["PATH"] = os.pathsep.join([str(Path(maxkernel()[0]).parent), out.get("PATH", "")])
    out.update(HOME=str(home), NO_COLOR="1", DISABLE_AUTOUPDATER="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
    return out


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "work"
    root.mkdir()
    return root.resolve()


def run(argv: list[str], env: dict, cwd: Path, answer: str = "", **extra_env) -> str:
    """ARGV's output; ANSWER is typed at its prompts (none: stdin is empty)."""
    r = subprocess.run(argv, env={**env, **extra_env}, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT,
                       input=answer)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{' '.join(argv)} exited {r.returncode}:\n{out}"
    print(f"$ {' '.join(argv)}\n{out}")  # shown with -s or on a failure
    return out


def line_for(out: str, start: str) -> str:
    lines = [line for line in out.splitlines() if start in line]
    assert lines, f"no line with {start!r} in:\n{out}"
    return lines[0]


# Gemini CLI lists custom commands only inside a chat; this loads them with its own FileCommandLoader (the class
# the chat uses: TOML parse, schema check, naming), which drops a file it cannot load.
LOADER = """
const [chunk, extDir, root] = process.argv.slice(2);
const { FileCommandLoader } = await import(chunk);
const config = {getFolderTrust: () => false, isTrustedFolder: () => true, getProjectRoot: () => root,
                getExtensions: () => [{name: "maxkernel", id: "maxkernel", isActive: true, path: extDir}]};
const commands = await new FileCommandLoader(config).loadCommands(new AbortController().signal);
console.log(JSON.stringify(commands.map((c) => [c.name, c.description])));
"""


def gemini_commands(gemini: str, extension: Path, env: dict, tmp_path: Path) -> dict[str, str]:
    """name -> description of the extension's commands as Gemini CLI's own loader reads them."""
    node = shutil.which("node", path=env["PATH"])
    if node is None:
        missing("needs node (Gemini CLI runs on it)")
    bundle = Path(gemini).resolve().parent
    chunks = [p for p in sorted(bundle.glob("*.js")) if "var FileCommandLoader = class" in p.read_text(errors="ignore")]
    assert chunks, f"no FileCommandLoader in {bundle}: has this Gemini CLI version moved it?"
    script = tmp_path / "load_commands.mjs"
    script.write_text(LOADER)
    out = run([node, str(script), chunks[0].as_uri(), str(extension), str(tmp_path)], env, tmp_path)
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_gemini_cli_loads_every_custom_command(env, tmp_path):
    from maxkernel.mcpserver.clients import COMMANDS

    gemini = client("gemini", "@google/gemini-cli")
    loaded = gemini_commands(gemini, REPO / "integrations" / "gemini", env, tmp_path)
    assert loaded == {f"maxkernel:{name}": f"[maxkernel] {description}"  # whole: none cut short
                      for name, (description, _) in COMMANDS.items()}, loaded


def trust_for_claude(env: dict, root: Path) -> None:
    """What Claude Code's trust dialog records for a folder the person trusts."""
    path = Path(env["HOME"]) / ".claude.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data.setdefault("projects", {}).setdefault(str(root), {})["hasTrustDialogAccepted"] = True
    path.write_text(json.dumps(data))


# -- Gemini CLI -----------------------------------------------------------------------------------------------
def test_gemini_integrate_then_the_extension_validates_and_the_server_is_connected(env, root):
    gemini = client("gemini", "@google/gemini-cli")
    said = run([*maxkernel(), "integrate", "gemini", "--root", str(root)], env, root)
    assert said.count("\n") == 1 and "~/.gemini/extensions/maxkernel" in said, said
    folder = Path(env["HOME"]) / ".gemini" / "extensions" / "maxkernel"
    assert "successfully validated" in run([gemini, "extensions", "validate", str(folder)], env, root)
    listed = run([gemini, "mcp", "list"], env, root, GEMINI_CLI_TRUST_WORKSPACE="true")
    line = line_for(listed, "maxkernel (from maxkernel)")
    assert line.endswith("- Connected") and f"mcp --root {root} (stdio)" in line, listed
    assert line.split(": ", 1)[1].startswith(maxkernel()[0]), line  # by absolute path, not through PATH


def test_the_repository_extension_installs_validates_and_serves_the_workspace(env, root):
    gemini = client("gemini", "@google/gemini-cli")
    extension = REPO / "integrations" / "gemini"
    assert "successfully validated" in run([gemini, "extensions", "validate", str(extension)], env, root)
    # the README's command; Gemini CLI asks whether to trust the source folder (the person answers y)
    said = run([gemini, "extensions", "install", str(extension), "--consent"], env, root, answer="y\n")
    assert 'Extension "maxkernel" installed successfully' in said, said
    listed = run([gemini, "mcp", "list"], env, root, GEMINI_CLI_TRUST_WORKSPACE="true")
    line = line_for(listed, "maxkernel (from maxkernel)")
    # ${workspacePath} became the folder gemini started in
    assert line.endswith("- Connected") and f"maxkernel mcp --root {root} (stdio)" in line, listed


# -- Claude Code ----------------------------------------------------------------------------------------------
def test_claude_integrate_then_the_server_is_connected_once_the_folder_is_trusted(env, root):
    claude = client("claude", "@anthropic-ai/claude-code")
    (root / ".mcp.json").write_text(json.dumps({"mcpServers": {"other": {"command": "true"}}}))
    said = run([*maxkernel(), "integrate", "claude", "--root", str(root)], env, root)
    assert said.count("\n") == 1 and str(root / ".mcp.json") in said, said
    before = run([claude, "mcp", "list"], env, root)  # an untrusted folder's project servers are not started
    assert "Pending approval" in line_for(before, "maxkernel: "), before
    trust_for_claude(env, root)
    listed = run([claude, "mcp", "list"], env, root)
    line = line_for(listed, "maxkernel: ")
    assert line == f"maxkernel: {maxkernel()[0]} mcp --root {root} - ✔ Connected", listed
    assert "Pending approval" in line_for(listed, "other: "), listed  # the other server: still the person's call


def test_the_repository_plugin_validates_and_its_server_is_connected(env, root):
    claude = client("claude", "@anthropic-ai/claude-code")
    plugin = REPO / "integrations" / "claude"
    out = run([claude, "plugin", "validate", "--strict", str(plugin)], env, root)
    assert "Validation passed" in out and "skills: maxkernel:maxkernel" in out, out
    trust_for_claude(env, root)
    listed = run([claude, "--plugin-dir", str(plugin), "mcp", "list"], env, root)
    assert line_for(listed, "plugin:maxkernel:maxkernel: ").endswith("maxkernel mcp --root . - ✔ Connected"), listed
