"""Screen a kernel's source in the trusted parent, before its sandbox imports it, for ways to reach the harness."""

from __future__ import annotations

import ast
import re
import string
from pathlib import Path

from maxkernel.harness.sandbox.idioms import PRIVATE_MODULES, honest_nodes
from maxkernel import pysource

__all__ = ["check_source", "check_file", "ALLOWED_MODULES"]

# Array math and pure-Python helpers: nothing here opens files, starts threads or walks the interpreter.
_ALLOWED = ("jax", "numpy", "ml_dtypes", "functools", "math", "dataclasses", "typing", "itertools", "operator",
            "enum", "collections", "abc", "numbers", "__future__")
ALLOWED_MODULES = frozenset(_ALLOWED)

# The groups below are names that may appear nowhere: not as `x.name`, not imported, not in an import path.
# Reading or writing files: the inputs and the result file sit next to the kernel.
FILE_IO = frozenset({"load", "loadtxt", "fromfile", "tofile", "save", "savez", "savez_compressed", "savetxt",
                     "memmap", "genfromtxt", "fromregex", "DataSource", "dump", "ctypeslib", "lib", "testing", "f2py",
                     "distutils", "array_serialization", "dlpack",
                     # numpy.ma.mrecords hands out open files (openfile's raw FileIO opens any path) and reads them;
                     # format.open_memmap maps one; jax.export.deserialize loads a program from bytes
                     "mrecords", "openfile", "fromtextfile", "open_memmap", "deserialize"})
# Python run on the host from inside a computation, out of the harness's sight and timing.
HOST_CALLBACKS = frozenset({"pure_callback", "io_callback", "debug_callback", "callback", "host_callback",
                            "buffer_callback", "ffi", "ffi_call", "colocated_python"})
# Process-wide settings: the harness picks the interpreter, the race detector, precision and jit itself.
INTERPRETER_SETTINGS = frozenset({
    "config", "clear_caches", "clear_backends", "force_tpu_interpret_mode", "reset_tpu_interpret_mode_state",
    "set_tpu_interpret_mode", "InterpretParams", "enable_debug_checks", "print_environment_info", "profiler",
    "monitoring", "compilation_cache", "disable_jit", "debug_nans", "debug_infs", "debug_key_reuse", "log_compiles",
    "enable_checks", "check_tracer_leaks", "checking_leaks", "default_device", "default_matmul_precision",
    "default_prng_impl", "enable_custom_prng", "legacy_prng_key", "numpy_dtype_promotion", "numpy_rank_promotion",
    "softmax_custom_jvp", "thread_guard", "threefry_partitionable", "explain_cache_misses", "no_execution",
    "array_garbage_collection_guard", "no_tracing", "transfer_guard", "transfer_guard_device_to_device",
    "transfer_guard_device_to_host", "transfer_guard_host_to_device", "allow_f16_reductions", "auto_pcast", "seterr",
    "seterrcall", "collect_profile", "cloud_tpu_init"})
# jax internals, and every name under which a public jax, numpy or stdlib module hands out jax._src, jaxlib or a
# process module (dataclasses.sys, enum.bltns, jax.version.os, pallas.ops.tpu.random.philox.prng): found by
# walking the attributes of every importable public module of jax 0.10 and numpy 2.
JAX_INTERNALS = frozenset({
    "extend", "interpreters", "core", "distributed", "multihost_utils", "serialize_executable", "jax2tf", "mosaic",
    "version", "tools", "test_util", "source_mapper", "transfer", "jshmap", "jax_util", "traceback_util", "sys", "os",
    "builtins", "bltns", "inspect", "subprocess", "pathlib", "tempfile", "time", "types", "warnings", "codecs",
    "fileinput", "weakref", "copyreg", "tests", "conftest", "testutils", "fused", "roofline", "rooflines", "jet",
    "sparse", "rnn", "scheduling_groups", "topologies", "ode", "matlib", "matrixlib", "xb", "gpu", "jtu", "prng",
    "threefry2x32", "all_gather"})
# Attribute access or attribute copying by string, which no static check can follow.
STRING_ATTRIBUTE_ACCESS = frozenset({"attrgetter", "methodcaller", "format_map", "update_wrapper", "wraps"})
# Helpers of the allowed modules that evaluate a string as code with the kernel's real builtins: typing resolves
# forward references (string annotations) with eval, and singledispatch's register resolves annotations through
# get_type_hints. numpy's bmat looks names up in its caller's frame.
EVALUATING_HELPERS = frozenset({"get_type_hints", "ForwardRef", "singledispatch", "singledispatchmethod",
                                "get_annotations", "evaluate_forward_ref", "bmat"})
# Frames, cells and code objects: the way from a kernel's function up into the harness's stack.
FRAME_INTROSPECTION = frozenset({
    "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_frame", "ag_code", "f_back",
    "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "tb_frame", "tb_next", "cell_contents"})
# Identity of live buffers: finding the harness's own arrays, or deleting them.
BUFFER_IDENTITY = frozenset({
    "live_arrays", "live_buffers", "live_executables", "unsafe_buffer_pointer", "addressable_data",
    "on_device_size_in_bytes", "delete", "is_deleted", "device_buffer", "device_buffers", "ctypes"})
# Outputs that compute later, when the harness flattens or converts them, outside the timed region.
LAZY_OUTPUTS = frozenset({"register_pytree_node", "register_pytree_node_class", "register_pytree_with_keys",
                          "register_pytree_with_keys_class", "register_dataclass", "register_static", "make_dataclass"})
_WHY = {name: why for names, why in (
    (FILE_IO, "file I/O is not available to a kernel"),
    (HOST_CALLBACKS, "host callbacks run Python the harness cannot see"),
    (INTERPRETER_SETTINGS, "the harness owns interpreter and jax settings"),
    (JAX_INTERNALS, "it reaches jax internals or the process"),
    (STRING_ATTRIBUTE_ACCESS, "string-based attribute access cannot be checked"),
    (EVALUATING_HELPERS, "it evaluates strings as code (annotations, forward references)"),
    (FRAME_INTROSPECTION, "frame introspection reaches the harness"),
    (BUFFER_IDENTITY, "buffer identity reaches the harness's arrays"),
    (LAZY_OUTPUTS, "outputs must be plain arrays")) for name in names}
DENIED_NAMES = frozenset(_WHY)

# Denied names that are safe on one module: Pallas TPU's strided ref load (pltpu.load) is no file read.
ALLOWED_MODULE_ATTRIBUTES = frozenset({("load", "jax.experimental.pallas.tpu")})

# Builtins that reach the interpreter, files or the terminal: rejected wherever they are read.
DENIED_BUILTINS = frozenset({"open", "eval", "exec", "compile", "__import__", "globals", "locals", "vars", "getattr",
                             "setattr", "delattr", "breakpoint", "input", "exit", "quit", "help", "dir", "id",
                             "memoryview", "__builtins__", "__loader__", "__spec__", "__file__"})
# Dunder names harmless as plain names or strings (`if __name__ == "__main__"`, `__all__`, `__slots__`).
ALLOWED_DUNDER_NAMES = frozenset({"__name__", "__doc__", "__all__", "__slots__", "__main__", "__future__"})
# Dunder methods of ordinary value classes; the rest (__jax_array__, __getattr__, __del__...) hook jax or Python.
ALLOWED_DUNDER_METHODS = frozenset({
    "__init__", "__post_init__", "__call__", "__repr__", "__str__", "__hash__", "__eq__", "__lt__", "__le__", "__gt__",
    "__ge__", "__ne__", "__len__", "__iter__", "__getitem__", "__contains__", "__bool__", "__enter__", "__exit__"})
# A dunder-looking run anywhere inside a string: '__import__("gc")' is as much a dunder as '__import__'.
_DUNDER_IN_TEXT = re.compile(r"__[A-Za-z]\w*?__")
# Methods whose format string is run through str.format on the host (jax.debug.print, pl.debug_print).
FORMAT_PRINTERS = frozenset({"print", "debug_print"})


def _dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _safe_format(text) -> bool:
    """Whether a str.format template (a str, or an ast node holding one) reads no attribute: no '.', '[' or '__'."""
    if not isinstance(text, str):
        return isinstance(text, ast.Constant) and isinstance(text.value, str) and _safe_format(text.value)
    try:
        fields = list(string.Formatter().parse(text))
    except ValueError:
        return False
    return all(field is None or not (any(c in field for c in ".[") or "__" in field) for _, field, _, _ in fields) \
        and all(_safe_format(spec) for _, _, spec, _ in fields if spec and "{" in spec)


def _head_future_imports(tree: ast.AST) -> list[ast.ImportFrom]:
    """The __future__ imports that take effect: those at the head of the module (elsewhere one does not compile)."""
    body = getattr(tree, "body", [])
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]  # the docstring
    head = []
    for node in body:
        if not (isinstance(node, ast.ImportFrom) and node.module == "__future__"):
            break
        head.append(node)
    return head


def _root(node: ast.expr) -> ast.expr:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node


def _is_call_to(node, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def _origins(tree: ast.AST) -> dict[str, str | None]:
    """Each import-bound name's module path, or None where it is bound twice or also some other way."""
    found: dict[str, set] = {}
    for node in ast.walk(tree):
        for alias in node.names if isinstance(node, (ast.Import, ast.ImportFrom)) else ():
            name = alias.asname or alias.name.split(".")[0]
            path = f"{node.module}.{alias.name}" if isinstance(node, ast.ImportFrom) else alias.asname and alias.name
            found.setdefault(name, set()).add(path or name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names = (node.id,)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names = node.names
        elif isinstance(node, (ast.arg, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler,
                               ast.MatchAs, ast.MatchStar, ast.MatchMapping)):
            names = (getattr(node, "arg", None), getattr(node, "name", None), getattr(node, "rest", None))
        else:
            continue
        for name in names:
            if name in found:
                found[name].add(None)
    return {name: next(iter(paths)) if len(paths) == 1 else None for name, paths in found.items()}


def _module_names(tree: ast.AST, origins) -> set[str]:
    """Names bound by imports, plus names assigned a plain attribute chain off one of them, or type(...)."""
    names = set(origins)
    assigns = [n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and n.value]
    while True:
        before = len(names)
        for node in assigns:
            root = _root(node.value)
            if _is_call_to(node.value, "type") or (isinstance(root, ast.Name) and root.id in names):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(t.id for t in targets if isinstance(t, ast.Name))
        if len(names) == before:
            return names


class _Checker(ast.NodeVisitor):
    def __init__(self, tree: ast.AST):
        self.found: list[tuple] = []
        self.origins = _origins(tree)
        self.modules = _module_names(tree, self.origins)
        self.call_funcs = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        self.class_names = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        self.honest = honest_nodes(tree, self.origin)  # library idioms in their honest form (idioms.py)
        self.future_imports = {id(n) for n in _head_future_imports(tree)}
        self.format_templates = {id(n.func.value) for n in ast.walk(tree) if isinstance(n, ast.Call)
                                 and isinstance(n.func, ast.Attribute) and n.func.attr == "format"} | {
            id(n.args[0]) for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in FORMAT_PRINTERS and n.args}

    def bad(self, node, message: str) -> None:
        where = [getattr(node, k, 0) or 0 for k in ("lineno", "col_offset", "end_lineno", "end_col_offset")]
        self.found.append((*where, len(self.found), message))  # inner expressions first, then rule order

    def import_path(self, node, path: str) -> None:
        parts = path.split(".")
        if any(path == m or path.startswith(m + ".") for m in PRIVATE_MODULES):
            return None  # a private module of pure helpers that jax's own ops import (idioms.py)
        if parts[0] not in ALLOWED_MODULES:
            return self.bad(node, f"import of '{parts[0]}' is not allowed (a kernel may import {', '.join(_ALLOWED)})")
        for part in parts[1:]:
            if part.startswith("_"):
                return self.bad(node, f"import of '{path}' is not allowed: '{part}' is private (of jax._src, only "
                                      f"{' and '.join(sorted(PRIVATE_MODULES))} may be imported)")
            if part in DENIED_NAMES:
                return self.bad(node, f"import of '{path}' is not allowed: {_WHY[part]}")

    def bound(self, node, name: str | None) -> None:
        if name and _dunder(name) and name not in ALLOWED_DUNDER_NAMES:
            self.bad(node, f"binding the name '{name}' is not allowed: dunder names reach Python's internals")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.import_path(node, alias.name)
            self.bound(node, alias.asname)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            return self.bad(node, "relative imports are not allowed: a kernel is a single file")
        if node.module == "jax._src" and all(f"jax._src.{a.name}" in PRIVATE_MODULES for a in node.names):
            for alias in node.names:  # `from jax._src import dtypes`: each name is one of the admitted modules
                self.bound(node, alias.asname)
            return None
        self.import_path(node, node.module)
        for alias in node.names:
            if id(node) in self.future_imports and alias.name == "annotations":
                self.bad(node, "'from __future__ import annotations' is not allowed: it makes every annotation a "
                               "string, which typing evaluates as code")
            if alias.name == "*":
                self.bad(node, f"'from {node.module} import *' is not allowed: import names explicitly")
            elif alias.name in DENIED_NAMES or alias.name.startswith("_") and node.module != "__future__":
                self.import_path(node, f"{node.module}.{alias.name}")
            self.bound(node, alias.asname)

    def attr_rule(self, node, attr: str, base: ast.expr | None) -> None:
        if attr.startswith("__"):
            if id(node) in self.honest["setattr"]:
                return None  # object.__setattr__(self, "field", v) in __post_init__: a frozen dataclass's own field
            if not (attr in ALLOWED_DUNDER_METHODS and _is_call_to(base, "super")):
                self.bad(node, f"attribute '{attr}' is not allowed: dunder attributes reach Python's internals"
                         + (" (the one form allowed: object.__setattr__(self, \"field\", value) inside a class's "
                            "__post_init__)" if attr == "__setattr__" else ""))
        elif attr.startswith("_") and not (isinstance(base, ast.Name) and base.id in ("self", "cls")):
            self.bad(node, f"attribute '{attr}' is not allowed: private attributes are off limits")
        elif attr in DENIED_NAMES and (attr, self.origin(base)) not in ALLOWED_MODULE_ATTRIBUTES \
                and id(node) not in self.honest["precision"]:
            self.bad(node, f"'{attr}' is not allowed: {_WHY[attr]}" + (
                " (the one form allowed: `with jax.default_matmul_precision(\"highest\"):` and the like)"
                if attr == "default_matmul_precision" else ""))
        elif attr == "format" and not _safe_format(base):
            self.bad(node, "'.format' is allowed only on a string literal whose fields have no '.', '[' or '__'")
        elif attr in FORMAT_PRINTERS and id(node) not in self.call_funcs:
            self.bad(node, f"'.{attr}' may only be called directly, with a literal format string")

    def origin(self, node) -> str | None:
        """The module path an expression names for sure: a once-imported name, or attributes of one."""
        if isinstance(node, ast.Name):
            return self.origins.get(node.id)
        base = self.origin(node.value) if isinstance(node, ast.Attribute) else None
        return base and f"{base}.{node.attr}"

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self.attr_rule(node, node.attr, node.value)
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            root = _root(node)
            if not isinstance(root, ast.Name):
                self.bad(node, "setting an attribute of a computed object is not allowed")
            elif root.id in self.modules:
                self.bad(node, f"'{ast.unparse(node)}' rebinds an attribute of module {root.id}: not allowed")
        self.generic_visit(node)

    def visit_MatchClass(self, node: ast.MatchClass) -> None:  # `case C(attr=...)` reads attributes by name
        for attr in node.kwd_attrs:
            self.attr_rule(node, attr, None)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        name = node.id
        if name in DENIED_BUILTINS and (isinstance(node.ctx, ast.Load) or _dunder(name)):
            self.bad(node, f"'{name}' is not allowed: it reaches the interpreter, files or the terminal")
        elif _dunder(name) and name not in ALLOWED_DUNDER_NAMES and not (
                isinstance(node.ctx, ast.Store) and name in ALLOWED_DUNDER_METHODS):
            self.bad(node, f"the name '{name}' is not allowed: dunder names reach Python's internals")

    def visit_Call(self, node: ast.Call) -> None:
        if _is_call_to(node, "type") and len(node.args) + len(node.keywords) != 1:
            self.bad(node, "type() with more than one argument is not allowed: no dynamic class creation")
        if _is_call_to(node.func, "type"):
            self.bad(node, "calling type(...) is not allowed: no dynamic class creation")
        for kw in node.keywords:
            self.interpret_rule(kw.arg, kw.value)
            if kw.arg and _dunder(kw.arg):
                self.bad(kw.value, f"keyword '{kw.arg}' is not allowed: dunder names reach Python's internals")
        if isinstance(node.func, ast.Attribute) and node.func.attr in FORMAT_PRINTERS:
            fmt = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "fmt"), None)
            if not _safe_format(fmt):
                self.bad(node, f"'.{node.func.attr}' needs a literal format string with no '.', '[' or '__' fields")
        self.generic_visit(node)

    def interpret_rule(self, key, value: ast.expr) -> None:
        literal = value.value if isinstance(value, ast.Constant) else "not a literal"
        if key == "interpret" and id(value) in self.honest["interpret"]:
            return  # a flag passed through from a parameter that defaults to False (its value is checked when traced)
        if key == "interpret" and literal is not False and literal is not None:
            self.bad(value, "interpret= must be False or None, or a parameter of the enclosing function that "
                            "defaults to False or None: the harness chooses the interpreter itself")

    def visit_Dict(self, node: ast.Dict) -> None:  # **{"interpret": True}
        for key, value in zip(node.keys, node.values, strict=True):
            if isinstance(key, ast.Constant):
                self.interpret_rule(key.value, value)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:  # {"__jax_array__": f}, "__import__('gc')" for an eval
        value = node.value
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        if not isinstance(text, str) or id(node) in self.format_templates and not _safe_format(node):
            return  # a template whose fields read attributes: the format rule names it
        for found in _DUNDER_IN_TEXT.findall(text):
            if found not in ALLOWED_DUNDER_NAMES | ALLOWED_DUNDER_METHODS:
                shown = f"'{text}'" if found == text else f"holding '{found}'"
                return self.bad(node, f"the string {shown} is not allowed: dunder names reach Python's internals")

    def annotation_rule(self, annotation: ast.expr | None) -> None:
        """A string in an annotation is code that typing evaluates: only the quoted name of a class here may be."""
        for sub in ast.walk(annotation) if annotation is not None else ():
            if isinstance(sub, ast.Constant) and isinstance(sub.value, (str, bytes)) \
                    and sub.value not in self.class_names:
                self.bad(sub, "string annotations are not allowed: typing evaluates them as code (write the type "
                              "itself; a quoted name of a class defined in this file is the one exception)")

    def visit_FunctionDef(self, node) -> None:
        if _dunder(node.name) and node.name not in ALLOWED_DUNDER_METHODS:
            self.bad(node, f"defines {node.name}: outputs must be plain arrays, and Python's hooks are off limits")
        if isinstance(node, ast.FunctionDef):
            a = node.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
                self.annotation_rule(arg.annotation if arg is not None else None)
            self.annotation_rule(node.returns)
        self.generic_visit(node)

    visit_ClassDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.annotation_rule(node.annotation)
        self.generic_visit(node)

    def visit_AsyncFunctionDef(self, node) -> None:
        self.bad(node, "async code is not allowed in a kernel")
        self.generic_visit(node)

    visit_Await = visit_AsyncFor = visit_AsyncWith = visit_AsyncFunctionDef


def check_source(source: str, filename: str = "kernel.py") -> str | None:
    """None when the kernel source passes, else its first violation in source order, naming the line."""
    try:
        tree = pysource.parse(source, filename)
    except SyntaxError as exc:
        return f"{filename} line {exc.lineno or 0}: does not parse: {exc.msg}"
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        return f"{filename} line 0: does not parse: {type(exc).__name__}"
    checker = _Checker(tree)
    try:
        checker.visit(tree)
    except RecursionError:
        return f"{filename} line 0: is nested too deeply to check"
    if not checker.found:
        return None
    first = min(checker.found)
    return f"{filename} line {first[0]}: {first[-1]}"


def check_file(path) -> str | None:
    """check_source on a file's bytes, decoded as UTF-8."""
    path = Path(path)
    data = path.read_bytes()
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        return f"{path.name} line {line}: is not UTF-8 text (byte {exc.start}): a kernel must be UTF-8"
    return check_source(source, path.name)
