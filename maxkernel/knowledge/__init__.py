"""What the agents know about Pallas, generated from the installed packages rather than written from memory:
the API table and its renames (`api.py`), and the version-stamped cheat sheet built from it (`cheatsheet.py`)."""

from maxkernel.knowledge.api import api_table, lookup, verified_renames
from maxkernel.knowledge.cheatsheet import cheat_sheet

__all__ = ["api_table", "lookup", "verified_renames", "cheat_sheet"]
