"""Versioned plans for human-in-the-loop sessions: every plan shown for approval gets a version number, the
person's approval names that version, and code may be written only while the session's current plan is the
approved one. The planner writes its output to state["plan"], so a new plan replaces the draft but never the
approval: the approval stops counting the moment the current plan differs from the approved text.

State keys: "plan" (the current plan's text), "current_plan_version", "plans" (every version: number, text,
status, source), "approved_plan_version", "approved_plan", "plan_approved" (kept in step for the root's
instruction). A plan resubmitted with the same words is still a new version that needs its own answer.
"""

from __future__ import annotations

__all__ = ["propose", "decide", "gate", "status_line", "PLAN_STATUSES"]

PLAN_STATUSES = ("pending", "approved", "rejected", "superseded")


def _versions(state) -> list[dict]:
    return [dict(v) for v in (state.get("plans") or [])]


def propose(state, text: str, source: str = "planner") -> int:
    """Record `text` as the current plan awaiting approval; returns its version. Proposing the text of the
    newest pending version again returns that version (a resumed approval request re-runs the call)."""
    versions = _versions(state)
    if versions and versions[-1]["status"] == "pending" and versions[-1]["text"] == text:
        return versions[-1]["version"]
    for v in versions:
        if v["status"] == "pending":
            v["status"] = "superseded"
    number = len(versions) + 1
    versions.append({"version": number, "text": text, "status": "pending", "source": source})
    state["plans"] = versions
    state["plan"] = text
    state["current_plan_version"] = number
    state["plan_approved"] = _approved(state)
    return number


def decide(state, text: str, approved: bool) -> int:
    """The person's answer on the newest pending version with `text` (proposed first if there is none);
    returns the version decided. An approval makes it the approved plan and the current plan."""
    versions = _versions(state)
    match = [v for v in versions if v["text"] == text and v["status"] == "pending"]
    if not match:
        propose(state, text)
        versions = _versions(state)
        match = [versions[-1]]
    number = match[-1]["version"]
    for v in versions:
        if v["version"] == number:
            v["status"] = "approved" if approved else "rejected"
        elif approved and v["status"] == "approved":
            v["status"] = "superseded"
    state["plans"] = versions
    if approved:
        state.update({"approved_plan_version": number, "approved_plan": text, "plan": text})
    state["current_plan_version"] = number
    state["plan_approved"] = _approved(state)
    return number


def _approved(state) -> bool:
    number = state.get("approved_plan_version")
    return (number is not None and state.get("current_plan_version", number) == number
            and (state.get("plan") or "") == (state.get("approved_plan") or ""))


def gate(state) -> str | None:
    """None when code may be written now, else why not, naming the versions."""
    if not state.get("require_plan_approval"):
        return None
    number = state.get("approved_plan_version")
    if number is None:
        return "no approved plan yet: call submit_plan for the person's approval before writing code"
    if not _approved(state):
        latest = _versions(state)[-1]["version"] if _versions(state) else number + 1
        return (f"the current plan is not the approved one (plan v{number} was approved; the plan has changed "
                f"since, newest v{latest}): call submit_plan with the current plan for the person's approval")
    return None


def status_line(state) -> str:
    """One line for the root's instruction: which plan is current and whether it is approved."""
    versions = _versions(state)
    if not versions and state.get("approved_plan_version") is None:
        return "no plan yet"
    number = state.get("approved_plan_version")
    if _approved(state):
        return f"plan v{number} approved and current"
    newest = versions[-1] if versions else None
    current = (f"plan v{newest['version']} is {newest['status']}" if newest and newest["text"] == state.get("plan")
               else "the current plan has not been submitted")
    return current + (f"; v{number} was approved earlier" if number is not None else "; none approved yet")
