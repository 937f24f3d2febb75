"""`maxkernel integrate gemini|claude`: what it writes, where, and what it refuses (one line, exit 2, nothing
written). In-process, with HOME a temporary folder; the real clients read these files in
tests/integrations/test_real_clients.py."""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path

import pytest

from maxkernel.cli import main
from maxkernel.cli.integrate import check_root, maxkernel_command
from maxkernel.mcpserver import clients

pytestmark = pytest.mark.unit


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GEMINI_CLI_HOME", raising=False)
    return home


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "work"
    root.mkdir()
    return root


def _files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def _ok(capsys, argv) -> str:
    assert main(argv) == 0
    out, err = capsys.readouterr()
    return out


def _refused(capsys, argv, words) -> str:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("maxkernel: error: "), err
    assert words in err, err
    return err


# -- which maxkernel ------------------------------------------------------------------------------------------
def test_the_console_script_that_runs_is_named_by_absolute_path(tmp_path, monkeypatch):
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    script = bin_dir / "maxkernel"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert maxkernel_command(str(script), "/usr/bin/python3") == [str(script.resolve())]
    monkeypatch.chdir(bin_dir)  # started as ./maxkernel
    assert maxkernel_command("./maxkernel", "/usr/bin/python3") == [str(script.resolve())]
    link = tmp_path / "maxkernel"  # ~/.local/bin/maxkernel -> the venv's: the link is resolved
    link.symlink_to(script)
    assert maxkernel_command(str(link), "/usr/bin/python3") == [str(script.resolve())]


def test_not_run_as_the_script_it_is_this_python_with_dash_m_and_a_venv_link_is_kept(tmp_path):
    """python -m maxkernel.cli (argv[0] is __main__.py), or in-process (pytest): this interpreter by its own path,
    not resolved, since a venv's python is a link to the base interpreter and only the link finds the venv."""
    venv_python = tmp_path / "venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to(sys.executable)
    main_py = str(Path(clients.__file__).parents[1] / "cli" / "__main__.py")
    assert maxkernel_command(main_py, str(venv_python)) == [str(venv_python), "-m", "maxkernel.cli"]
    assert maxkernel_command(sys.argv[0]) == [os.path.abspath(sys.executable), "-m", "maxkernel.cli"]


# -- the root -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("client", ["gemini", "claude"])
def test_the_home_folder_the_filesystem_root_and_a_missing_folder_are_refused(capsys, home, tmp_path, client):
    _refused(capsys, ["integrate", client, "--root", str(home)], "refusing your home folder")
    _refused(capsys, ["integrate", client, "--root", "/"], "refusing the filesystem root")
    _refused(capsys, ["integrate", client, "--root", str(tmp_path / "nope")], "no such folder")
    (tmp_path / "file").write_text("")
    _refused(capsys, ["integrate", client, "--root", str(tmp_path / "file")], "not a folder")
    assert not any(home.iterdir())


def test_the_root_defaults_to_the_current_folder_made_absolute(home, root, monkeypatch):
    monkeypatch.chdir(root)
    assert check_root(".") == root.resolve()
    monkeypatch.chdir(home)
    with pytest.raises(Exception, match="home folder"):
        check_root(".")


# -- gemini ---------------------------------------------------------------------------------------------------
def test_gemini_writes_the_user_extension_with_this_maxkernel_and_the_absolute_root(capsys, home, root):
    out = _ok(capsys, ["integrate", "gemini", "--root", str(root)])
    folder = home / ".gemini" / "extensions" / "maxkernel"
    assert out.count("\n") == 1 and "~/.gemini/extensions/maxkernel" in out and str(root) in out, out
    manifest = json.loads((folder / "gemini-extension.json").read_text())
    entry = manifest["mcpServers"]["maxkernel"]
    assert [entry["command"], *entry["args"]] == [*maxkernel_command(), "mcp", "--root", str(root.resolve())]
    assert Path(entry["command"]).is_absolute()
    assert entry["timeout"] == 600_000  # Gemini CLI's session default, so `gemini mcp list` waits for the start too
    assert manifest["name"] == "maxkernel" and manifest["contextFileName"] == "MAXKERNEL.md"
    assert (folder / "MAXKERNEL.md").read_text() == clients.gemini_context()
    for name in clients.COMMANDS:
        command = tomllib.loads((folder / "commands" / "maxkernel" / f"{name}.toml").read_text())
        assert set(command) == {"description", "prompt"} and "{{args}}" in command["prompt"]
    assert sorted(p.name for p in root.iterdir()) == []  # nothing in the root
    assert [p.name for p in home.iterdir()] == [".gemini"]


def test_gemini_json_names_every_file_and_what_lies_outside_the_root(capsys, home, root):
    doc = json.loads(_ok(capsys, ["integrate", "gemini", "--root", str(root), "--json"]))
    folder = home / ".gemini" / "extensions" / "maxkernel"
    assert doc["client"] == "gemini" and doc["written"] is True and doc["root"] == str(root.resolve())
    assert doc["config"] == str(folder / "gemini-extension.json")
    assert sorted(doc["files"]) == sorted(str(folder / p) for p in _files(folder))
    assert doc["outside_root"] == doc["files"]


def test_gemini_home_follows_gemini_cli_home(capsys, home, root, tmp_path, monkeypatch):
    monkeypatch.setenv("GEMINI_CLI_HOME", str(tmp_path / "gh"))
    _ok(capsys, ["integrate", "gemini", "--root", str(root)])
    assert (tmp_path / "gh" / ".gemini" / "extensions" / "maxkernel" / "gemini-extension.json").is_file()
    assert not (home / ".gemini").exists()


def test_gemini_print_writes_nothing(capsys, home, root):
    out = _ok(capsys, ["integrate", "gemini", "--root", str(root), "--print"])
    assert json.loads(out)["mcpServers"]["maxkernel"]["args"][-1] == str(root.resolve())
    doc = json.loads(_ok(capsys, ["integrate", "gemini", "--root", str(root), "--print", "--json"]))
    assert doc["written"] is False and len(doc["contents"]) == 2 + len(clients.COMMANDS)
    assert not any(home.iterdir())


def test_gemini_rewrites_its_own_extension_and_drops_only_its_own_retired_commands(capsys, home, root, tmp_path):
    _ok(capsys, ["integrate", "gemini", "--root", str(root)])
    folder = home / ".gemini" / "extensions" / "maxkernel"
    old = folder / "commands" / "maxkernel" / "retired.toml"
    old.write_text('# /maxkernel:retired: written by maxkernel (an older one)\nprompt = "x"\n')
    mine = folder / "commands" / "mine.toml"
    mine.write_text('prompt = "a person\'s own command"\n')
    other = tmp_path / "other"
    other.mkdir()
    _ok(capsys, ["integrate", "gemini", "--root", str(other)])
    assert not old.exists() and mine.exists()
    assert json.loads((folder / "gemini-extension.json").read_text())["mcpServers"]["maxkernel"]["args"][-1] == \
        str(other.resolve())


def test_gemini_leaves_an_extension_gemini_installed_alone(capsys, home, root):
    folder = home / ".gemini" / "extensions" / "maxkernel"
    folder.mkdir(parents=True)
    (folder / ".gemini-extension-install.json").write_text('{"source": "/x", "type": "link"}')
    _refused(capsys, ["integrate", "gemini", "--root", str(root)], "gemini extensions uninstall maxkernel")
    assert _files(folder) == {".gemini-extension-install.json": '{"source": "/x", "type": "link"}'}


def test_gemini_leaves_another_extensions_manifest_alone(capsys, home, root):
    folder = home / ".gemini" / "extensions" / "maxkernel"
    folder.mkdir(parents=True)
    (folder / "gemini-extension.json").write_text('{"name": "someone-else", "version": "1"}')
    _refused(capsys, ["integrate", "gemini", "--root", str(root)], "another extension's")
    (folder / "gemini-extension.json").write_text("{not json")
    _refused(capsys, ["integrate", "gemini", "--root", str(root)], "is not valid JSON")
    assert list(_files(folder)) == ["gemini-extension.json"]


# -- claude ---------------------------------------------------------------------------------------------------
def test_claude_writes_the_project_server_its_approval_and_the_skill_in_the_root(capsys, home, root):
    out = _ok(capsys, ["integrate", "claude", "--root", str(root)])
    assert out.count("\n") == 1 and str(root / ".mcp.json") in out, out
    entry = json.loads((root / ".mcp.json").read_text())["mcpServers"]["maxkernel"]
    assert [entry["command"], *entry["args"]] == [*maxkernel_command(), "mcp", "--root", str(root.resolve())]
    assert entry["type"] == "stdio"
    assert json.loads((root / ".claude" / "settings.local.json").read_text()) == {"enabledMcpjsonServers":
                                                                                   ["maxkernel"]}
    assert (root / ".claude" / "skills" / "maxkernel" / "SKILL.md").read_text() == clients.claude_skill()
    assert not any(home.iterdir())  # nothing outside the root
    doc = json.loads(_ok(capsys, ["integrate", "claude", "--root", str(root), "--json"]))
    assert doc["outside_root"] == [] and doc["config"] == str(root / ".mcp.json")


def test_claude_merges_with_the_other_servers_and_settings_and_never_clobbers_them(capsys, home, root):
    (root / ".mcp.json").write_text(json.dumps({"mcpServers": {"other": {"command": "other-server"},
                                                               "maxkernel": {"command": "old"}}, "extra": [1]}))
    (root / ".claude").mkdir()
    (root / ".claude" / "settings.local.json").write_text(json.dumps({"enabledMcpjsonServers": ["other"],
                                                                      "permissions": {"allow": ["Bash(ls)"]}}))
    _ok(capsys, ["integrate", "claude", "--root", str(root)])
    _ok(capsys, ["integrate", "claude", "--root", str(root)])  # twice: still one entry, one approval
    config = json.loads((root / ".mcp.json").read_text())
    assert config["extra"] == [1] and config["mcpServers"]["other"] == {"command": "other-server"}
    assert config["mcpServers"]["maxkernel"]["command"] == maxkernel_command()[0]
    settings = json.loads((root / ".claude" / "settings.local.json").read_text())
    assert settings == {"enabledMcpjsonServers": ["other", "maxkernel"], "permissions": {"allow": ["Bash(ls)"]}}


@pytest.mark.parametrize("rel, text, words", [
    (".mcp.json", '{"mcpServers": {', "is not valid JSON (line 1"),
    (".mcp.json", "[1, 2]", "holds a JSON list, not an object"),
    (".mcp.json", '{"mcpServers": []}', "mcpServers is not an object"),
    (".claude/settings.local.json", "{,}", "is not valid JSON"),
    (".claude/settings.local.json", '{"enabledMcpjsonServers": "x"}', "enabledMcpjsonServers is not a list"),
    (".claude/skills/maxkernel/SKILL.md", "my own skill", "was not written by maxkernel"),
])
def test_claude_refuses_a_malformed_or_foreign_file_and_writes_nothing(capsys, home, root, rel, text, words):
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)
    before = _files(root)
    _refused(capsys, ["integrate", "claude", "--root", str(root)], words)
    assert _files(root) == before


@pytest.mark.parametrize("link", [".claude", ".mcp.json"])
def test_claude_writes_nothing_through_a_link_in_the_root(capsys, home, root, tmp_path, link):
    outside = tmp_path / "outside"
    outside.mkdir()
    if link == ".mcp.json":
        (outside / "x.json").write_text("{}")
        (root / link).symlink_to(outside / "x.json")
    else:
        (root / link).symlink_to(outside)
    _refused(capsys, ["integrate", "claude", "--root", str(root)], "is a link")
    assert _files(outside) == ({"x.json": "{}"} if link == ".mcp.json" else {})
    assert [p.name for p in root.iterdir()] == [link]


def test_claude_print_shows_the_merged_file_and_writes_nothing(capsys, home, root):
    (root / ".mcp.json").write_text('{"mcpServers": {"other": {"command": "x"}}}')
    out = _ok(capsys, ["integrate", "claude", "--root", str(root), "--print"])
    assert set(json.loads(out)["mcpServers"]) == {"other", "maxkernel"}
    assert _files(root) == {".mcp.json": '{"mcpServers": {"other": {"command": "x"}}}'}


def test_an_unknown_client_is_a_usage_error(capsys):
    _refused(capsys, ["integrate", "cursor"], "'cursor' is not one of 'gemini', 'claude'")
