"""Which library kernels a candidate uses. Calling jax's own flash attention (jax.experimental.pallas.ops) or
another packaged kernel can be a legitimate answer, but it is not the agent's kernel: the verdict says so
(`uses_library_kernel`), reports show it, and a setting forbids it. Read from the source the judge holds,
never from the candidate's process; the static check's allow-list (no getattr, importlib, eval or __import__)
leaves imports, names and attribute chains as the only ways to reach a module, and all three are followed.
"""

from __future__ import annotations

import ast

from maxkernel import pysource

__all__ = ["LIBRARY_PACKAGES", "library_kernels"]

# Packages of ready-made kernels: anything at or under these paths is a library kernel.
LIBRARY_PACKAGES = ("jax.experimental.pallas.ops", "tokamax", "jax_triton", "flash_attn", "torchax")


def _is_library(path: str) -> bool:
    return any(path == p or path.startswith(p + ".") for p in LIBRARY_PACKAGES)


def _chain(node: ast.AST) -> list[str] | None:
    """["a", "b", "c"] for the expression a.b.c; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def library_kernels(source: str) -> list[str]:
    """The library-kernel modules (or names in them) the source reaches, sorted; [] when it reaches none or does
    not parse (a file that does not parse is rejected by the static check anyway)."""
    try:
        tree = pysource.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    bound: dict[str, str] = {}  # a name -> the module path it stands for
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _is_library(a.name):
                    found.add(a.name)
                bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                path = f"{node.module}.{a.name}"
                if _is_library(node.module) or _is_library(path):
                    found.add(path if _is_library(path) else node.module)
                bound[a.asname or a.name] = path
    # Names assigned an attribute chain off a module name (o = pl.ops): followed until nothing changes.
    assigns = [n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and n.value]
    while True:
        before = dict(bound)
        for node in assigns:
            parts = _chain(node.value)
            if parts and parts[0] in bound:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        bound[t.id] = ".".join([bound[parts[0]], *parts[1:]])
        if bound == before:
            break
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Name)):
            parts = _chain(node)
            if parts and parts[0] in bound:
                path = ".".join([bound[parts[0]], *parts[1:]])
                if _is_library(path):
                    found.add(path)
            elif isinstance(node, ast.Attribute) and node.attr == "ops" and (parts is None or parts[0] not in bound):
                # `.ops` off a name or expression the bindings above cannot follow ([pl][0].ops, f().ops): the way
                # to jax's packaged kernels without naming the module, so it counts as reaching them.
                found.add(f"{LIBRARY_PACKAGES[0]} (reached through an expression, line {node.lineno})")
    # Report the deepest path per library module reached (a.b.c covers a.b).
    return sorted(p for p in found if not any(q != p and q.startswith(p + ".") for q in found))
