"""The search steering app: `adk web maxkernel/apps`, pick "search", give it a search's --out folder."""

from google.adk import Agent
from google.adk.apps import App

from maxkernel.agents.models import resolve_model
from maxkernel.agents.usage import UsagePlugin
from maxkernel.apps._setup import app_or_setup
from maxkernel.search import steer

from . import prompt

NAME = "search_steer"


def build(model=None) -> Agent:
    """The steering root; `model` is a model name, a BaseLlm instance, or None for the settings' choice."""
    llm = model if model is not None and not isinstance(model, str) else resolve_model("search", override=model)
    return Agent(name=NAME, model=llm,
                 description="Shows a live search's frontier; pins or prunes branches; adds strategies.",
                 instruction=prompt.INSTRUCTION,
                 tools=[steer.open_search, steer.show_frontier, steer.show_node, steer.pin_node, steer.prune_branch,
                        steer.add_strategy])


app = app_or_setup("search", ["search"], lambda: App(name="search", root_agent=build(), plugins=[UsagePlugin()]))
