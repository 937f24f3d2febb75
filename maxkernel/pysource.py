"""`ast.parse` that is safe to call from several threads at once, and what a kernel declares tunable (read, not run).

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


def declared_tunables(source: str) -> tuple[dict[str, tuple], dict]:
    """(TUNABLES, defaults) read from a kernel's source without running it.

    TUNABLES must be a module-level literal mapping of keyword name -> candidate values; defaults are the
    keyword-only defaults of workload().
    """
    tree = parse(source)
    space, defaults = {}, {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "TUNABLES" for t in node.targets):
            space = {str(k): tuple(v) for k, v in ast.literal_eval(node.value).items()}
        if isinstance(node, ast.FunctionDef) and node.name == "workload":
            for arg, default in zip(node.args.kwonlyargs, node.args.kw_defaults):
                if default is not None:
                    try:
                        defaults[arg.arg] = ast.literal_eval(default)
                    except ValueError:
                        pass
    return space, defaults
