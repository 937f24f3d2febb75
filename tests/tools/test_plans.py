"""Versioned plans and a person's drafts in HITL sessions: the approval names a version and stops counting
when the plan changes; a draft is read only from the drafts folder, never from the agents' own data folder."""

from __future__ import annotations

import pytest

from maxkernel.settings import get_settings
from maxkernel.tools import plans
from maxkernel.tools.drafts import DraftError, read_draft

pytestmark = pytest.mark.unit


def _hitl() -> dict:
    return {"require_plan_approval": True}


def test_each_submitted_plan_is_a_new_version():
    state = _hitl()
    assert plans.propose(state, "v1 text") == 1
    assert plans.propose(state, "v1 text") == 1  # the resumed approval call re-proposes the same text
    assert plans.propose(state, "v2 text") == 2
    assert [(v["version"], v["status"]) for v in state["plans"]] == [(1, "superseded"), (2, "pending")]
    assert state["plan"] == "v2 text" and plans.gate(state).startswith("no approved plan")


def test_a_new_plan_does_not_overwrite_the_approved_one():
    state = _hitl()
    plans.propose(state, "tile by 8")
    assert plans.decide(state, "tile by 8", approved=True) == 1
    assert plans.gate(state) is None and state["plan_approved"] is True
    assert plans.status_line(state) == "plan v1 approved and current"
    plans.propose(state, "tile by 16")  # the planner again: the approval does not move to it
    assert state["approved_plan_version"] == 1 and state["approved_plan"] == "tile by 8"
    assert state["plan_approved"] is False
    assert "plan v1 was approved" in plans.gate(state) and "newest v2" in plans.gate(state)
    assert plans.status_line(state) == "plan v2 is pending; v1 was approved earlier"
    assert plans.decide(state, "tile by 16", approved=True) == 2
    assert [v["status"] for v in state["plans"]] == ["superseded", "approved"]
    assert plans.gate(state) is None


def test_the_same_words_submitted_again_need_a_new_answer():
    state = _hitl()
    plans.decide(state, "tile by 8", approved=True)
    assert plans.propose(state, "tile by 8") == 2
    assert state["plan_approved"] is False and "newest v2" in plans.gate(state)


def test_a_plan_changed_outside_submit_plan_resets_the_approval():
    state = _hitl()
    plans.decide(state, "tile by 8", approved=True)
    state["plan"] = "edited by the planner's output_key"
    assert plans.gate(state) is not None
    assert plans.status_line(state) == "the current plan has not been submitted; v1 was approved earlier"


def test_a_rejection_keeps_the_earlier_approval_but_not_the_new_plan():
    state = _hitl()
    plans.decide(state, "a", approved=True)
    plans.propose(state, "b")
    assert plans.decide(state, "b", approved=False) == 2
    assert [v["status"] for v in state["plans"]] == ["approved", "rejected"]
    assert plans.gate(state) is not None  # the current plan is b, which was rejected


def test_outside_hitl_there_is_no_gate():
    assert plans.gate({}) is None and plans.gate({"plan": "x"}) is None


@pytest.fixture
def drafts(tmp_path, monkeypatch):
    folder = tmp_path / "drafts"
    folder.mkdir()
    monkeypatch.setenv("MAXKERNEL_DRAFTS_DIR", str(folder))
    monkeypatch.setenv("MAXKERNEL_DATA_DIR", str(folder / ".maxkernel"))
    get_settings.cache_clear()
    yield folder
    get_settings.cache_clear()


def test_a_draft_is_read_from_the_drafts_folder(drafts):
    (drafts / "mine.py").write_text("def workload(x):\n    return x\n")
    assert read_draft("mine.py").startswith("def workload")
    assert read_draft(str(drafts / "mine.py")).startswith("def workload")


def test_drafts_outside_the_folder_or_in_the_data_folder_are_refused(drafts, tmp_path):
    (tmp_path / "secret.txt").write_text("token")
    (drafts / "door").symlink_to(tmp_path / "secret.txt")
    ws = drafts / ".maxkernel" / "workspaces" / "s1"
    ws.mkdir(parents=True)
    (ws / "kernel.py").write_text("the model's own file")
    (drafts / "huge.py").write_text("x" * (300 * 1024))
    (drafts / "bin.py").write_bytes(b"\xff\xfe\x00")
    for path, why in [("../secret.txt", "drafts are read from"), ("/etc/hostname", "drafts are read from"),
                      ("door", "drafts are read from"), (".maxkernel/workspaces/s1/kernel.py", "data folder"),
                      ("missing.py", "no draft file"), ("huge.py", "over"), ("bin.py", "not a readable text"),
                      ("", "give the draft"), ("a\x00b", "give the draft")]:
        with pytest.raises(DraftError, match=why):
            read_draft(path)
