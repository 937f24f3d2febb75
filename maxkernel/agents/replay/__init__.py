"""The offline replay model: recorded model turns for a few suite tasks, driving real tools. Labelled [replay]."""

from maxkernel.agents.replay.model import ReplayLlm

__all__ = ["ReplayLlm"]
