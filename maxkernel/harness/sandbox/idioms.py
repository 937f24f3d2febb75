"""Library-style idioms the static screen admits in their honest form only (docs/verdict.md, "Idioms of library
code"): each names the exact shape it allows, and anything wider stays refused by the general rules."""

from __future__ import annotations

import ast

__all__ = ["PRIVATE_MODULES", "PRECISIONS", "honest_nodes"]

# jax-private modules that jax's own Pallas ops import and that hold pure helpers only (dtype queries, zip/map
# helpers): importing them reaches no setting, interpreter state or process handle. Any other jax._src path is refused.
PRIVATE_MODULES = frozenset({"jax._src.dtypes", "jax._src.util"})
# The values jax.default_matmul_precision takes: a context manager scoped to its `with` block, which changes the
# dots traced inside it (the precision is then part of the traced program that is checked and priced).
PRECISIONS = frozenset({"default", "high", "highest", "bfloat16", "tensorfloat32", "float32", "bfloat16_3x",
                        "tensorfloat32_3x", "fastest", "ANY_F8_ANY_F8_F32", "F32_F32_F32"})


def _literal_str(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _defaults(fn: ast.FunctionDef) -> dict[str, ast.expr | None]:
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    out = {arg.arg: None for arg in (*positional, *a.kwonlyargs)}
    for arg, default in zip(positional[len(positional) - len(a.defaults):], a.defaults):
        out[arg.arg] = default
    for arg, default in zip(a.kwonlyargs, a.kw_defaults):
        out[arg.arg] = default
    return out


def honest_nodes(tree: ast.AST, origin) -> dict[str, set[int]]:
    """The ids of nodes that take an idiom's honest form, per idiom:

    - "setattr": `object.__setattr__` called as `object.__setattr__(self, "<field>", value)` directly inside a
      `__post_init__` of a class (a frozen dataclass setting its own derived field);
    - "interpret": `interpret=<name>` where <name> is a parameter of the enclosing function whose default is False or
      None (a flag passed through; what it holds at run time is checked in the traced program, candidate_job);
    - "precision": `jax.default_matmul_precision("<value>")` as the context expression of a `with` item.
    """
    found: dict[str, set[int]] = {"setattr": set(), "interpret": set(), "precision": set()}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if not (isinstance(fn, ast.FunctionDef) and fn.name == "__post_init__" and fn.args.args
                    and fn.args.args[0].arg == "self"):
                continue
            for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
                f = call.func
                if (isinstance(f, ast.Attribute) and f.attr == "__setattr__" and isinstance(f.value, ast.Name)
                        and f.value.id == "object" and len(call.args) == 3 and not call.keywords
                        and isinstance(call.args[0], ast.Name) and call.args[0].id == "self"
                        and _literal_str(call.args[1]) and not call.args[1].value.startswith("_")):
                    found["setattr"].add(id(f))
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        flags = {name for name, default in _defaults(fn).items()
                 if isinstance(default, ast.Constant) and (default.value is False or default.value is None)}
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            for kw in call.keywords:
                if kw.arg == "interpret" and isinstance(kw.value, ast.Name) and kw.value.id in flags:
                    found["interpret"].add(id(kw.value))
    for with_node in (n for n in ast.walk(tree) if isinstance(n, ast.With)):
        for item in with_node.items:
            call = item.context_expr
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "default_matmul_precision" and origin(call.func.value) == "jax"
                    and len(call.args) == 1 and not call.keywords and _literal_str(call.args[0])
                    and call.args[0].value in PRECISIONS and item.optional_vars is None):
                found["precision"].add(id(call.func))
    return found
