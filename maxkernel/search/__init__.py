"""Graph search over candidate kernels: many branches, one trusted scoreboard, crash-safe, local or on Ray."""

from maxkernel.search.config import ConfigMismatch, SearchConfig, make_config
from maxkernel.search.graph import Graph, Node

__all__ = ["SearchConfig", "make_config", "ConfigMismatch", "Graph", "Node", "Controller", "SearchError", "run_search"]


def __getattr__(name):
    # The controller pulls in ADK and the harness; a Ray stage task or `search status` needs neither.
    if name in ("Controller", "SearchError", "run_search"):
        from maxkernel.search import controller

        return getattr(controller, name)
    raise AttributeError(name)
