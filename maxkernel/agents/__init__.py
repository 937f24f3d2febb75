"""The agent library: one pool of sub-agents, and the root policies (auto, hitl, search) routing over it."""

from maxkernel.agents.app import build_app, build_root, POLICIES

__all__ = ["build_app", "build_root", "POLICIES"]
