"""The README says what is true: every `maxkernel` command it shows parses against the real CLI, every link it
makes stays in the repository, the demo output it shows has the shape the demo prints, and its model-driven
examples, run offline as written, are refused up front with what to set instead of failing after work."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CREDENTIALS = ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_CLOUD_PROJECT",
               "GOOGLE_CLOUD_LOCATION", "GOOGLE_APPLICATION_CREDENTIALS", "MAXKERNEL_MODEL", "MAXKERNEL_ROLE_MODELS")

pytestmark = pytest.mark.unit


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", README, re.M | re.S)


def commands() -> list[list[str]]:
    """Every `maxkernel ...` invocation in the README's bash blocks, continuation lines joined, comments and
    leading VAR=value assignments dropped."""
    found = []
    for block in blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                words = words[1:]
            if words[:1] == ["maxkernel"]:
                found.append(words[1:])
    return found


def test_the_readme_shows_commands_to_check():
    names = {c[0] for c in commands()}
    assert {"optimize", "task", "evaluate", "port"} <= names, names


@pytest.mark.parametrize("argv", commands(), ids=lambda a: " ".join(a)[:70])
def test_each_readme_command_parses_against_the_real_cli(argv):
    """An option the CLI lacks, a bad choice or a missing required option fails here, not for the reader."""
    from maxkernel.cli import cli

    ctx = cli.make_context("maxkernel", list(argv), resilient_parsing=False)
    cmd_name, cmd, rest = cli.resolve_command(ctx, list(argv))
    while isinstance(cmd, click.Group):  # `task new`, `bench agent`, ...
        sub_ctx = cmd.make_context(cmd_name, rest, parent=ctx)
        cmd_name, cmd, rest = cmd.resolve_command(sub_ctx, rest)
        ctx = sub_ctx
    cmd.make_context(cmd_name, rest, parent=ctx)  # raises click.UsageError on anything unknown or missing


def test_every_link_in_the_readme_stays_in_the_repository_and_exists():
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
               for h in re.findall(r"^#+ (.+)$", README, re.M)}
    for target in re.findall(r"\]\(([^)\s]+)\)", README):
        if target.startswith("#"):
            assert target[1:] in anchors, target
            continue
        assert "://" not in target and not target.startswith(("/", "..")), target
        assert (ROOT / target.split("#")[0]).exists(), target


def test_the_words_a_newcomer_meets_are_explained():
    words = README.split("### Words used here", 1)[1].split("\n## ", 1)[0]
    for word in ("Task tiers", "fast_p", "Mosaic", "LLO", "Census"):
        assert f"**{word}**" in words, word


def test_the_demo_output_shown_has_the_shape_the_demo_prints():
    """The README shows the demo's last lines; the last one is render_text's summary: the returned kernel's path,
    its held-out verdict and its TPU estimate against XLA on v5e."""
    shown = blocks("text")[0].strip().splitlines()
    assert shown[0].startswith("CORRECT: ") and shown[-1].startswith("returned kernel "), shown
    assert re.search(r"held-out verdict CORRECT; TPU estimate on v5e: [\d.]+ ms vs XLA [\d.]+ ms, [\d.]+x "
                     r"\(libtpu static profile: estimated, not measured\)$", shown[-1]), shown[-1]
    assert any(line.startswith("session: ") for line in shown)


def _offline(tmp_path, monkeypatch, capsys, argv):
    """`maxkernel ARGV` in-process, in `tmp_path`, with no credentials and no model setting."""
    from maxkernel.cli import main
    from maxkernel.settings import get_settings

    for key in CREDENTIALS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MAXKERNEL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)  # no developer .env
    get_settings.cache_clear()
    try:
        code = main(argv)
    finally:
        get_settings.cache_clear()
    out, err = capsys.readouterr()
    return code, out, err


def _readme_optimize_of_own_task() -> list[str]:
    (argv,) = [c for c in commands() if c[:1] == ["optimize"] and "tasks/gated_rms" in c]
    return argv


@pytest.mark.parametrize("model", [None, "replay"])
def test_the_readme_optimize_of_a_users_task_is_refused_up_front_offline(tmp_path, monkeypatch, capsys, model):
    """As written (a real model: no credentials here) and with the replay model (no recording for the folder):
    one line naming what to set, exit 2, in seconds, and no session or workspace made."""
    folder = tmp_path / "tasks" / "gated_rms"
    shutil.copytree(ROOT / "jaxbench" / "12p_RMSNorm", folder, ignore=shutil.ignore_patterns("kernel.py"))
    argv = _readme_optimize_of_own_task() + (["--model", model] if model else [])
    code, out, err = _offline(tmp_path, monkeypatch, capsys, argv)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "GOOGLE_API_KEY" in err and "GOOGLE_CLOUD_PROJECT" in err, err
    if model == "replay":
        assert "no recording for gated_rms" in err and "12p_RMSNorm" in err, err
    else:
        assert "MAXKERNEL_MODEL=replay" in err or "--model replay" in err, err
    assert not (tmp_path / "data").exists()  # refused before any session, workspace or artifact


def test_the_readme_says_which_examples_need_a_model():
    byo = README.split("### Bring your own workload", 1)[1].split("\n## ", 1)[0]
    assert "needs a model" in byo and "MAXKERNEL_MODEL=replay" in README
    port = README.split("### Port GPU code", 1)[1].split("\n## ", 1)[0]
    assert "--optimize" in port and "needs a model" in port
    assert "`adk web maxkernel/apps`" in README and "first answer in the chat says what to set" in README
