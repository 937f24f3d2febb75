"""`maxkernel integrate gemini|claude`: the client configuration that starts this very `maxkernel` as an MCP server
on a workspace root, written (or printed) where the client reads it.

gemini: a user-level Gemini CLI extension, ~/.gemini/extensions/maxkernel/ (GEMINI_CLI_HOME moves it, as it moves
        Gemini CLI's own folder): the server entry, the context file and the custom commands.
claude: in the root, what `claude mcp add --scope project` writes (.mcp.json, merged with its other servers), the
        approval of that one server in .claude/settings.local.json (what Claude Code records when the person
        approves it), and the skill, .claude/skills/maxkernel/SKILL.md.
Nothing else is written outside the root; an existing file is merged or replaced only where it is ours."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import click

from maxkernel.cli._common import UsageError, emit, json_option

__all__ = ["integrate", "maxkernel_command", "check_root", "gemini_home"]

_EXTENSION_INSTALLED = ".gemini-extension-install.json"  # what `gemini extensions install|link` leaves


def maxkernel_command(argv0: str | None = None, executable: str | None = None) -> list[str]:
    """How to start the `maxkernel` running now, by absolute path: the console script this process was started as
    (sys.argv[0], links resolved), else this interpreter with -m maxkernel.cli. The interpreter's path is kept as
    it is, not resolved: a venv's python is a link to the base one, and only the link's path finds the venv."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    executable = sys.executable if executable is None else executable
    if argv0 and Path(argv0).name in ("maxkernel", "maxkernel.exe"):
        found = argv0 if os.sep in argv0 else shutil.which(argv0)
        if found:
            script = Path(found).resolve()
            if script.is_file() and os.access(script, os.X_OK):
                return [str(script)]
    if not executable:
        raise UsageError("cannot tell which maxkernel is running (no sys.argv[0] script, no sys.executable); run "
                         "the maxkernel command by its path")
    return [os.path.abspath(executable), "-m", "maxkernel.cli"]


def check_root(root: str) -> Path:
    """The absolute root, or a UsageError for one that does not exist, is not a folder, or is the home folder or /
    (every file in it would be open to the agent's tools)."""
    path = Path(root).expanduser()
    if not path.exists():
        raise UsageError(f"--root {root}: no such folder")
    if not path.is_dir():
        raise UsageError(f"--root {root}: not a folder")
    path = path.resolve()
    if path == Path(path.anchor):
        raise UsageError(f"--root {root}: refusing the filesystem root {path}; give the project folder the agent "
                         "may work in")
    if path == Path.home().resolve():
        raise UsageError(f"--root {root}: refusing your home folder {path}; give the project folder the agent may "
                         "work in")
    return path


def gemini_home() -> Path:
    """Gemini CLI's home: GEMINI_CLI_HOME when set (Gemini CLI reads it), else the user's home."""
    return Path(os.environ.get("GEMINI_CLI_HOME") or Path.home()).expanduser()


def _shown(path: Path) -> str:
    """PATH with the home folder as ~ (for the one-line summary)."""
    try:
        return "~/" + str(path.relative_to(Path.home()))
    except ValueError:
        return str(path)


def _read_json_object(path: Path) -> dict:
    """The JSON object in PATH ({} when there is no file); UsageError for a file that is not one."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text() or "{}")
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text; fix or remove it (nothing was written)") from None
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); fix or "
                         "remove it (nothing was written)") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path} holds a JSON {type(data).__name__}, not an object; fix or remove it (nothing was "
                         "written)")
    return data


def _write(path: Path, text: str) -> None:
    """Write TEXT to PATH whole or not at all (a temporary file beside it, renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _ours_or_absent(path: Path) -> None:
    from maxkernel.mcpserver.clients import MARK

    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise UsageError(f"{path} is not a plain file; remove it (nothing was written)")
    if path.exists() and MARK not in path.read_text(errors="replace"):
        raise UsageError(f"{path} exists and was not written by maxkernel; move it away (nothing was written)")


# -- the two clients: each returns (files to write: path -> text, the file a person looks at) -----------------
def _gemini_plan(command: list[str], root: Path) -> tuple[dict[Path, str], Path, list[Path]]:
    from maxkernel.mcpserver.clients import NAME, gemini_extension

    folder = gemini_home() / ".gemini" / "extensions" / NAME
    if folder.is_symlink() or (folder / _EXTENSION_INSTALLED).exists():
        raise UsageError(f"{_shown(folder)} holds the {NAME} extension as `gemini extensions install` or `link` put "
                         f"it there; remove it first (gemini extensions uninstall {NAME}), or keep it and skip this "
                         "command")
    manifest = folder / "gemini-extension.json"
    if folder.exists():
        if not folder.is_dir():
            raise UsageError(f"{folder} is not a folder; remove it (nothing was written)")
        if manifest.exists() and _read_json_object(manifest).get("name") != NAME:
            raise UsageError(f"{manifest} is another extension's; move it away (nothing was written)")
    files = {folder / rel: text for rel, text in gemini_extension(command, str(root)).items()}
    # a command an older maxkernel wrote and this one does not ship; a person's own command files stay
    stale = [p for p in folder.glob("commands/**/*.toml") if p not in files and p.is_file() and not p.is_symlink()
             and "written by maxkernel" in p.read_text(errors="replace").partition("\n")[0]] if folder.is_dir() else []
    return files, manifest, stale


def _no_link_below(root: Path, path: Path) -> None:
    """UsageError when PATH, or a folder between ROOT and it, is a link: nothing is read or written through one, so
    nothing lands outside the root."""
    for part in (path, *path.parents):
        if part == root:
            return
        if part.is_symlink():
            raise UsageError(f"{part} is a link; maxkernel writes only plain files in the root (nothing was written)")


def _claude_plan(command: list[str], root: Path) -> tuple[dict[Path, str], Path, list[Path]]:
    from maxkernel.mcpserver.clients import NAME, claude_skill, server_entry

    mcp_json = root / ".mcp.json"
    local = root / ".claude" / "settings.local.json"
    skill = root / ".claude" / "skills" / NAME / "SKILL.md"
    for path in (mcp_json, local, skill):
        _no_link_below(root, path)
    config = _read_json_object(mcp_json)
    servers = config.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise UsageError(f"{mcp_json}: mcpServers is not an object; fix it (nothing was written)")
    config["mcpServers"] = {**servers, NAME: {"type": "stdio", **server_entry(command, str(root))}}
    settings = _read_json_object(local)
    approved = settings.get("enabledMcpjsonServers", [])
    if not isinstance(approved, list):
        raise UsageError(f"{local}: enabledMcpjsonServers is not a list; fix it (nothing was written)")
    settings["enabledMcpjsonServers"] = approved if NAME in approved else [*approved, NAME]
    _ours_or_absent(skill)
    return ({mcp_json: json.dumps(config, indent=2) + "\n", local: json.dumps(settings, indent=2) + "\n",
             skill: claude_skill()}, mcp_json, [])


@click.command()
@click.argument("client", type=click.Choice(["gemini", "claude"]))
@click.option("--root", default=".", show_default=True,
              help="the workspace the agent's tools are confined to (not your home folder, not /)")
@click.option("--print", "print_only", is_flag=True, help="print the configuration instead of writing it")
@json_option
def integrate(client: str, root: str, print_only: bool, as_json: bool) -> None:
    """Configure a coding agent to use these tools: the MCP server is this maxkernel, by absolute path, on ROOT.

    gemini writes the Gemini CLI extension ~/.gemini/extensions/maxkernel/ (server, context file, /maxkernel:*
    commands); claude writes ROOT/.mcp.json (merged with its other servers), approves that server in
    ROOT/.claude/settings.local.json and adds the skill ROOT/.claude/skills/maxkernel/SKILL.md. Both clients serve
    a workspace's MCP servers only once you trust the folder (they ask when they start there)."""
    root_path = check_root(root)
    command = maxkernel_command()
    plan = _gemini_plan if client == "gemini" else _claude_plan
    files, main_file, stale = plan(command, root_path)  # every check before anything is written
    outside = [str(p) for p in files if not p.is_relative_to(root_path)]
    payload = {"client": client, "root": str(root_path), "server": [*command, "mcp", "--root", str(root_path)],
               "config": str(main_file), "files": [str(p) for p in files], "outside_root": outside,
               "written": not print_only}
    if print_only:
        if as_json:
            payload["contents"] = {str(p): t for p, t in files.items()}
        emit(as_json, payload, files[main_file].rstrip("\n"))
        return
    for path, text in files.items():
        _write(path, text)
    for path in stale:
        path.unlink(missing_ok=True)
    server = " ".join([*command, "mcp", "--root", str(root_path)])
    if client == "gemini":
        text = (f"wrote the Gemini CLI extension {_shown(main_file.parent)} (gemini-extension.json, context, "
                f"{len(files) - 2} /maxkernel:* commands; nothing else outside {root_path}): server `{server}`; "
                f"start gemini in {root_path} and trust the folder")
    else:
        text = (f"wrote {main_file} (server `{server}`), its approval in .claude/settings.local.json and the skill "
                f".claude/skills/maxkernel/SKILL.md, all in {root_path} (nothing outside it); start claude there and "
                "trust the folder")
    emit(as_json, payload, text)
