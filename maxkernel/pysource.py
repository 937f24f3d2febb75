"""`ast.parse` that is safe to call from several threads at once.

CPython 3.11 keeps the recursion depth of its AST-to-object conversion in state shared by every thread. When
a garbage-collection callback (JAX installs one) lets another thread run in the middle of a conversion, and
that thread is parsing too, the count goes wrong and `ast.parse` raises
`SystemError: AST constructor recursion depth mismatch`. The agents judge kernels from worker threads (two
`adk eval` cases at once, a search's branches), so every parse in maxkernel goes through one lock here.
"""

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)`, one thread at a time; raises what ast.parse raises."""
    with _LOCK:
        return ast.parse(source, filename=filename)
