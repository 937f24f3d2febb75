from . import agent  # noqa: F401
