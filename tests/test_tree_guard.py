"""tests/_tree_guard.py: new and changed files in a checkout are found; what every run writes is not."""

import subprocess
import time
from pathlib import Path

import pytest
from _extras import need_binary
from _tree_guard import changes, snapshot


@pytest.fixture
def repo(tmp_path):
    """A git checkout with one committed file, an ignored log folder holding a file, and a stray untracked file."""
    git = need_binary("git")
    root = tmp_path / "repo"
    root.mkdir()
    (root / ".gitignore").write_text("__pycache__/\n*.egg-info/\nlogs/\n")
    (root / "kept.py").write_text("x = 1\n")
    (root / "logs").mkdir()
    (root / "logs" / "old.log").write_text("from before the run\n")
    (root / "draft.txt").write_text("someone's work in progress\n")
    for args in (["init", "-q"], ["add", ".gitignore", "kept.py"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "start"]):
        subprocess.run([git, "-C", str(root), *args], check=True, capture_output=True)
    return root


def test_new_changed_and_outside_files_are_reported(repo, tmp_path):
    outside = (str(tmp_path / "pwned*"),)
    before = snapshot(repo, outside)
    assert before is not None and "draft.txt" in before and "logs/old.log" in before
    assert changes(before, snapshot(repo, outside)) == []
    (repo / "new_dir").mkdir()
    (repo / "new_dir" / "left.json").write_text("{}")  # untracked, in a new folder
    (repo / "logs" / "new.log").write_text("written by a test\n")  # ignored, but new
    (repo / "kept.py").write_text("x = 2\n")  # a tracked file changed
    (repo / "draft.txt").write_text("changed again\n")  # already untracked, changed further
    (tmp_path / "pwned-1").write_text("pwned")
    assert changes(before, snapshot(repo, outside)) == [
        f"outside {tmp_path / 'pwned-1'}", "?? draft.txt", " M kept.py", "!! logs/new.log", "?? new_dir/left.json"]


def test_caches_every_run_writes_are_ignored(repo):
    before = snapshot(repo, ())
    for folder in ("__pycache__", "pkg/__pycache__", ".pytest_cache/v/cache", "maxkernel.egg-info"):
        (repo / folder).mkdir(parents=True)
        (repo / folder / "entry.pyc").write_bytes(b"\0")
    (repo / "pkg" / "stray.pyc").write_bytes(b"\0")
    (repo / "maxkernel.egg-info" / "PKG-INFO").write_text("Name: maxkernel\n")
    after = snapshot(repo, ())
    assert changes(before, after) == []
    assert not [p for p in after if "__pycache__" in p or "egg-info" in p or p.endswith(".pyc")]


def test_outside_a_checkout_there_is_no_snapshot(tmp_path):
    need_binary("git")
    (tmp_path / "plain").mkdir()
    assert snapshot(tmp_path / "plain", ()) is None


def test_this_checkout_is_cheap_to_snapshot():
    t0 = time.perf_counter()
    snap = snapshot(Path(__file__).resolve().parents[1])
    assert snap is not None and time.perf_counter() - t0 < 1.0
