"""A CPython audit hook (PEP 578), armed in a sandboxed job just before a candidate kernel runs: the layer under
the static allow-list that refuses by event, not by enumerating Python's names.

Policy, from `arm` on, for the rest of the process:

- always refused: walks of the object graph (`gc.get_objects`, `gc.get_referrers`, `gc.get_referents`), other
  threads' frames and exceptions, `sys.settrace`/`sys.setprofile`/`sys.addaudithook`, building code or function
  objects (`code.__new__`, which `code.replace` raises too, `function.__new__`), every `ctypes.*` and `socket.*`
  event, and starting processes (`os.system`, `os.exec*`, `os.fork*`, `os.posix_spawn*`, `os.spawn*`,
  `subprocess.Popen`, `pty.spawn`);
- always checked: `compile`, `exec` and `marshal.loads` run only code that is (byte for byte) a file under the
  install roots or the harness's own packages, the kernel's own code object, the methods `dataclasses` and
  `collections.namedtuple` generate from checked identifiers (the generator is identified by the code object of the
  calling frame, never by a file name), and typing's compile of a forward reference that is a plain type name;
- while any frame of the kernel is on the stack (its module globals, which nothing else can share once code
  building is refused): every event outside a short list is refused; on that list, `open` reads only under the
  install roots (the kernel file itself aside) and never writes, `import` loads no process-level module and nothing
  of the harness, frame access (`sys._getframe`, `tb_frame`, `gi_frame`, `f_code` ...) is left to the few library
  functions that only read a module name from it, and setting a special attribute is allowed on the kernel's own
  classes and functions only.

The harness's own work after the import (tracing, Mosaic lowering, compiling, running, saving outputs into the
scratch folder, writing the result) runs with no kernel frame on the stack and is not refused. The hook keeps its
state in a closure and binds every builtin it calls when armed, so that nothing the kernel rebinds runs inside it.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from pathlib import Path

__all__ = ["arm", "armed", "jobs_guarded", "unguarded"]

# In the trusted parent: whether the jobs it builds arm the hook (the default). Only tests that prove the layers
# behind it (the sandbox, copy-out) turn it off, for the jobs started inside `unguarded()`; it is never a setting.
_GUARD_JOBS = contextvars.ContextVar("maxkernel_guard_jobs", default=True)


def jobs_guarded() -> bool:
    """Whether jobs built now should arm the audit hook (the job's "guard" field)."""
    return _GUARD_JOBS.get()


@contextlib.contextmanager
def unguarded():
    """Jobs built inside run their kernel without the audit hook: for tests of the layers behind it only."""
    token = _GUARD_JOBS.set(False)
    try:
        yield
    finally:
        _GUARD_JOBS.reset(token)

_AUDIT = sys.audit  # taken at import, before any candidate code: later kernels register through it
_ADD_EVENT = "maxkernel.guard.add"
_ARMED: list = []  # kernel files armed in this process (bookkeeping only: the policy lives in the hook's closure)

# Refused after arming whatever the stack holds.
ALWAYS = frozenset({
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._current_frames", "sys._current_exceptions",
    "sys.settrace", "sys.setprofile", "sys.addaudithook", "code.__new__", "function.__new__", "os.system",
    "subprocess.Popen", "pty.spawn", "os.startfile", "setopencodehook", "cpython.remote_debugger_script"})
ALWAYS_PREFIXES = ("ctypes.", "socket.", "os.exec", "os.fork", "os.posix_spawn", "os.spawn", "_posixsubprocess.",
                   "_winapi.", "winreg.", "msvcrt.", "sys.monitoring")
# Events a kernel's own code (or a library it calls) may raise; each but the first is checked further.
WHILE_KERNEL_RUNS = frozenset({"builtins.id", "object.__getattr__", "object.__setattr__", "object.__delattr__",
                               "import", "open", "os.listdir", "os.scandir", "sys._getframe"})
# Attributes audited by object.__getattr__ that lead to frames (3.11 audits f_code, tb_frame, gi_/cr_/ag_ frame and
# code; f_back, f_globals and f_locals are not audited, so frames themselves must never reach the kernel).
FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code",
                              "f_code", "f_back", "f_globals", "f_locals", "f_builtins", "f_trace"})
# Modules a kernel may not load: the process, the interpreter, the harness.
DENIED_IMPORTS = frozenset({
    "maxkernel", "jaxbench", "tests", "conftest", "pytest", "_pytest", "ctypes", "_ctypes", "gc", "inspect",
    "subprocess", "_posixsubprocess", "socket", "_socket", "ssl", "select", "selectors", "os", "posix", "nt", "pty",
    "tty", "termios", "fcntl", "signal", "threading", "_thread", "multiprocessing", "_multiprocessing", "concurrent",
    "asyncio", "importlib", "imp", "zipimport", "pkgutil", "runpy", "sys", "builtins", "marshal", "pickle", "_pickle",
    "shelve", "dbm", "code", "codeop", "pdb", "bdb", "trace", "tracemalloc", "faulthandler", "resource", "mmap",
    "shutil", "tempfile", "pathlib", "io", "_io", "sqlite3", "urllib", "http", "webbrowser", "sysconfig", "site",
    "atexit", "traceback", "linecache", "dis", "types", "weakref", "_weakref", "copyreg", "readline", "cProfile",
    "profile", "timeit", "glob", "fnmatch", "zipfile", "tarfile", "gzip", "lzma", "bz2", "_winapi", "msvcrt"})
_TYPE_NAME = r"[^\W\d]\w*(\.[^\W\d]\w*)*"  # a forward reference typing may compile: a (dotted) name, or a subscript
_FORWARD_REF = rf"{_TYPE_NAME}(\[[\w., |\[\]]*\])?( \| {_TYPE_NAME})*"


def armed() -> list[str]:
    """The kernel files armed in this process (bookkeeping, for reports; the candidate can rewrite it)."""
    return list(_ARMED)


def arm(kernel_path: Path, scratch: Path, *, code=None, module=None) -> None:
    """Install the audit hook (once per process: a hook cannot be removed) for the kernel at `kernel_path`.

    `code` is the kernel's code object, compiled by the caller from the file's bytes: its exec is the one allowed.
    `module` is the module it will run in: frames with its globals count as the kernel's. Without them, the file is
    compiled here and frames are recognised by file name. A second call adds a kernel (a group of kernels in one
    trusted test process); it is refused while kernel code runs.
    """
    kernel_path = Path(kernel_path)
    if code is None:
        code = compile(kernel_path.read_bytes(), str(kernel_path), "exec", dont_inherit=True)
    entry = (code.co_filename, code, None if module is None else module.__dict__, str(Path(scratch).resolve()))
    if _ARMED:
        _AUDIT(_ADD_EVENT, entry)
    else:
        sys.addaudithook(_make_hook(entry))
    _ARMED.append(code.co_filename)


def _roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(install roots a kernel may read under, code roots whose files may be compiled and run)."""
    import os
    import sysconfig

    paths = sysconfig.get_paths()
    install = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)}
    install |= {sys.prefix, sys.base_prefix, sys.exec_prefix}
    install = {os.path.realpath(p) for p in install}
    code = set(install)
    for name in ("maxkernel", "jaxbench"):
        mod = sys.modules.get(name)
        for p in getattr(mod, "__path__", ()) or ():
            code.add(os.path.realpath(p))
    return tuple(sorted(install)), tuple(sorted(code))


def _make_hook(first):  # noqa: C901  (one closure on purpose: its state is reachable from nowhere else)
    import _thread
    import collections
    import dataclasses
    import enum
    import os
    import re
    import types
    import typing

    import jax  # noqa: F401  (its lazy loader must exist to be recognised)
    from jax._src import lazy_loader

    bootstrap_external = sys.modules["_frozen_importlib_external"]
    getframe, get_ident, realpath, fsdecode = sys._getframe, _thread.get_ident, os.path.realpath, os.fsdecode
    sep, open_ = os.sep, open
    str_, bytes_, int_, type_, issubclass_, tuple_, len_, dict_ = str, bytes, int, type, issubclass, tuple, len, dict
    permission_error, base_exception, value_error, os_error = PermissionError, BaseException, ValueError, OSError
    code_type, function_type = types.CodeType, types.FunctionType
    code_of = function_type.__dict__["__code__"].__get__
    type_module = type.__dict__["__module__"].__get__
    field_type, field_name = dataclasses.Field, dataclasses.Field.__dict__["name"].__get__
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    namedtuple_lambda = re.compile(
        r"lambda _cls, (?P<a>(?:[^\W\d]\w*(?:, [^\W\d]\w*)*,?)?): _tuple_new\(_cls, \((?P=a)\)\)")
    forward_ref = re.compile(_FORWARD_REF)
    install_roots, code_roots = _roots()
    # The policy's tables, bound here: the module's names can be rebound by anything that reaches the module.
    always, always_prefixes, while_kernel_runs = ALWAYS, ALWAYS_PREFIXES, WHILE_KERNEL_RUNS
    frame_attributes, denied_imports, add_event = FRAME_ATTRIBUTES, DENIED_IMPORTS, _ADD_EVENT
    kernel_files, kernel_codes, kernel_globals, kernel_names, scratches = set(), [], [], set(), set()
    task_sources: dict = {}  # the task folder the parent copied into the scratch (scratch/task/*.py), as armed
    busy: set = set()
    real_cache: dict = {}

    # Library functions identified by the code object their frame runs.
    # (By identity: code objects compare equal by content, and a kernel can copy a function's bytecode.)
    dataclass_codes = tuple_(v.__code__ for v in vars(dataclasses).values() if type_(v) is function_type)
    # The text dataclasses generates is built by its module's functions and builtins: rebinding any of them (which
    # no audit event sees) would let a kernel choose the text, so they must be as they were when armed.
    import builtins

    pinned = [(ns, tuple_(ns.items())) for ns in (vars(dataclasses), vars(builtins), vars(dataclasses.Field))]
    create_fn, process_class = dataclasses._create_fn.__code__, dataclasses._process_class.__code__
    namedtuple_code = collections.namedtuple.__code__
    forward_ref_init = typing.ForwardRef.__init__.__code__
    compile_bytecode = bootstrap_external._compile_bytecode.__code__
    import ast

    ast_parse = ast.parse.__code__  # always compiles to a syntax tree only (inspect.signature parses with it)
    # Those that read only a module name from the frame they ask for.
    frame_readers = [namedtuple_code, typing._caller.__code__, enum.EnumType.__dict__["_create_"].__code__,
                     lazy_loader.attach.__code__]
    try:  # a dependency of jax: its _collect_parameters replaces typing's, and it has a NamedTuple of its own
        import typing_extensions as extensions
    except ImportError:
        extensions = None
    for name in ("_caller", "_has_generic_or_protocol_as_origin"):
        fn = getattr(extensions, name, None)
        if type_(fn) is function_type:
            frame_readers.append(fn.__code__)
    frame_readers = tuple_(frame_readers)
    # The metaclasses that set the bases of the NamedTuple class they have just made.
    bases_setters = tuple_(m.__dict__["__new__"].__func__.__code__ for m in (
        getattr(typing, "NamedTupleMeta", None), getattr(extensions, "_NamedTupleMeta", None))
        if m is not None and type_(m.__dict__.get("__new__")) is staticmethod)
    bootstrap = sys.modules["_frozen_importlib"]
    import_files = frozenset({"<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>"})
    import_entries = (bootstrap._find_and_load.__code__, bootstrap._handle_fromlist.__code__)
    jax_dirs = tuple_(realpath(p) for m in ("jax", "jaxlib") for p in sys.modules[m].__path__)

    def add(entry) -> None:
        filename, code, globals_, scratch = entry
        kernel_files.add(filename)
        kernel_codes.append(code)
        if globals_ is not None:
            kernel_globals.append(globals_)
            kernel_names.add(globals_["__name__"])
        scratches.add(scratch)
        folder = scratch + sep + "task"
        try:
            names = os.listdir(folder)
        except os_error:
            names = []
        for name in names:  # a folder task's baseline.py and the modules it loads lazily (function.py)
            if name.endswith(".py"):
                path = realpath(folder + sep + name)
                with open_(path, "rb") as f:
                    task_sources[path] = f.read()

    add(first)

    def among(x, items) -> bool:
        for item in items:
            if item is x:
                return True
        return False

    def pinned_unchanged() -> bool:
        for ns, items in pinned:
            for key, value in items:
                if ns.get(key) is not value:
                    return False
        return True

    def shown(x) -> str:
        return x[:80] if type_(x) is str_ else "an object"

    def real(path) -> str:
        got = real_cache.get(path)
        if got is None:
            got = real_cache[path] = realpath(path)
        return got

    def under(path: str, roots) -> bool:
        for root in roots:
            if path == root or path.startswith(root + sep):
                return True
        return False

    def in_scratch(path: str) -> bool:
        return under(path, scratches)

    def file_bytes(path: str):
        with open_(path, "rb") as f:
            return f.read()

    def is_kernel_frame(f) -> bool:
        g = f.f_globals
        for kg in kernel_globals:
            if g is kg:
                return True
        return len_(kernel_files) > len_(kernel_globals) and f.f_code.co_filename in kernel_files

    def kernel_entry(top):
        """(whether a kernel frame is on the stack, the library frame the innermost kernel frame called)."""
        f, prev = top, None
        while f is not None:
            if is_kernel_frame(f):
                return True, prev
            prev, f = f, f.f_back
        return False, None

    def same_file(path, source, anywhere: bool) -> bool:
        """Whether `source` is the bytes of the file `path` names, under the code roots unless `anywhere`."""
        if type_(path) is not str_ or path.startswith("<"):
            return False
        if type_(source) is str_:
            source = source.encode()
        if type_(source) is not bytes_:
            return False
        rp = real(path)
        try:
            return (anywhere or under(rp, code_roots) and not in_scratch(rp)) and file_bytes(rp) == source
        except os_error:
            return False

    def dataclass_fields_ok(top) -> bool:
        """A dataclasses-generated method: called through dataclasses only, for fields named by identifiers."""
        f = top.f_back
        while f is not None and f.f_code is not process_class:
            if not among(f.f_code, dataclass_codes):
                return False
            f = f.f_back
        if f is None:
            return False
        fields = f.f_locals.get("fields")
        if type_(fields) is not dict_:
            return False
        for key, value in fields.items():
            if type_(key) is not str_ or not key.isidentifier() or type_(value) is not field_type:
                return False
            name = field_name(value)
            if type_(name) is not str_ or not name.isidentifier():
                return False
        return pinned_unchanged()

    def task_source(path, source) -> bool:
        """Whether `source` is a task file the parent placed in the scratch, unchanged since arming."""
        if type_(path) is not str_ or path.startswith("<"):
            return False
        data = source.encode() if type_(source) is str_ else source
        return task_sources.get(real(path)) == data

    def check_compile(args, top):
        source, filename = args[0], args[1]
        if task_source(filename, source) and (top is None or not kernel_entry(top)[0]):
            return None  # the harness importing the task's own files (no kernel frame: nobody else's doing)
        if type_(filename) is str_ and filename in kernel_files and type_(source) in (bytes_, str_):
            data = source.encode() if type_(source) is str_ else source
            if data == file_bytes(filename):
                return None
        if same_file(filename, source, anywhere=top is None or not kernel_entry(top)[0]):
            return None  # an import, or the harness compiling the next kernel's file (its exec is still refused)
        code = top.f_code if top is not None else None
        text = source.decode() if type_(source) is bytes_ else source
        if code is create_fn and type_(text) is str_ and dataclass_fields_ok(top):
            return None
        if code is namedtuple_code and type_(text) is str_ and namedtuple_lambda.fullmatch(text):
            return None
        if code is ast_parse:
            return None
        if code is forward_ref_init and type_(text) is str_ and "__" not in text and forward_ref.fullmatch(text):
            return None
        return f"code compiled from a string ({shown(filename)})"

    def check_exec(args, top):
        code = args[0]
        if type_(code) is not code_type:
            return "not a code object"
        if among(code, kernel_codes):
            return None
        name = code.co_filename
        if name.startswith("<frozen "):
            return None
        if not name.startswith("<"):
            rp = real(name)
            if under(rp, code_roots) and not in_scratch(rp) and name not in kernel_files:
                return None
            if rp in task_sources and (top is None or not kernel_entry(top)[0]):
                try:  # compiled from the armed bytes (check_compile); the file must still hold them
                    if file_bytes(rp) == task_sources[rp]:
                        return None
                except os_error:
                    pass
        caller = top.f_code if top is not None else None
        if name == "<string>" and (caller is create_fn or caller is namedtuple_code):
            return None  # the text was checked when it was compiled, in the same call
        return f"code that is no installed file ({shown(name)})"

    def check_marshal(args, top):
        if top is not None and top.f_code is compile_bytecode:
            path = top.f_locals.get("bytecode_path")
            if type_(path) is str_:
                rp = real(path)
                if under(rp, code_roots) and not in_scratch(rp) and file_bytes(rp)[16:] == args[0]:
                    return None
        return "bytecode that is no installed file"

    def check_open(args):
        path, mode, flags = args
        if type_(path) is bytes_:
            path = fsdecode(path)
        if type_(path) is not str_:
            return "opening a file descriptor"
        if (type_(mode) is str_ and ("w" in mode or "a" in mode or "x" in mode or "+" in mode)) or \
                (type_(flags) is int_ and flags & write_flags):
            return f"writing {path}"
        rp = realpath(path)
        if rp in kernel_files or path in kernel_files:
            return None  # its own source: warnings and tracebacks show lines from it
        if in_scratch(rp) or not under(rp, install_roots):
            return f"reading {path}"
        return None

    def check_setattr(args, top):
        """3.11 audits only special attributes: a class's __name__, __qualname__, __module__, __doc__, __bases__
        and a function's __code__, __defaults__, __kwdefaults__. Those of the kernel's own classes and functions
        may change, and a library may set the names and documentation of the classes it makes (namedtuple sets
        __module__, dataclasses __doc__) and namedtuple its __new__'s defaults; bases and code never change."""
        obj, name = args[0], args[1]
        if type_(name) is not str_ or name == "__code__":
            return "setting a function's code"
        library = top is not None and under(real(top.f_code.co_filename), code_roots)
        if issubclass_(type_(obj), type_):
            module = type_module(obj)
            if type_(module) is str_ and module in kernel_names or library and name != "__bases__" \
                    or name == "__bases__" and among(top.f_code, bases_setters):
                return None
            return "changing a class that is not the kernel's own"
        if type_(obj) is function_type and (is_kernel_code(code_of(obj)) or among(top.f_code, (namedtuple_code,))):
            return None
        return f"setting {name}"

    def is_kernel_code(code) -> bool:
        return code.co_filename in kernel_files

    def imported_by_kernel(top) -> bool:
        f = top
        while f is not None and not is_kernel_frame(f):
            if f.f_code.co_filename not in import_files:
                return False
            f = f.f_back
        return True

    def frame_reader_ok(top, entry) -> bool:
        """Frames read by a library function that keeps them to itself: a known module-name reader, a library's
        module body run by an import the kernel made (absl's flags ask for their caller's module), or jax's
        traceback filtering of an error raised under a jax call the kernel made."""
        if top is not None and among(top.f_code, frame_readers):
            return True
        if top is not None and top.f_code.co_filename.endswith(sep + "traceback_util.py") \
                and under(real(top.f_code.co_filename), jax_dirs):
            return True  # jax filtering its own frames out of an error the kernel's call raised
        if entry is None:
            return False
        return among(entry.f_code, import_entries) or under(real(entry.f_code.co_filename), jax_dirs)

    def decide(event, args):
        if event in always or event.startswith(always_prefixes):
            return "refused in a process that runs candidate code"
        try:
            top = getframe(2)  # 0 decide, 1 hook, 2 the Python frame whose call raised the event
        except value_error:
            top = None
        if event == "compile":
            return check_compile(args, top)
        if event == "exec":
            return check_exec(args, top)
        if event == "marshal.loads":
            return check_marshal(args, top)
        on, entry = kernel_entry(top) if top is not None else (False, None)
        if event == add_event:
            if on:
                return "arming from kernel code"
            add(args[0])
            return None
        if not on:
            return None
        if event not in while_kernel_runs:
            return "refused while kernel code runs"
        if event == "open":
            return check_open(args)
        if event == "import":  # the kernel's own imports; a library module it loads imports what it needs
            name = args[0]
            if type_(name) is not str_ or name.partition(".")[0] in denied_imports and imported_by_kernel(top):
                return f"importing {shown(name)}"
            return None
        if event in ("os.listdir", "os.scandir"):
            path = args[0]
            if type_(path) is bytes_:
                path = fsdecode(path)
            if type_(path) is str_ and under(realpath(path), install_roots) and not in_scratch(realpath(path)):
                return None
            return f"listing {shown(path)}"
        if event == "sys._getframe":
            return None if frame_reader_ok(top, entry) else "frame access"
        if event == "object.__getattr__":
            name = args[1]
            if name in frame_attributes and not frame_reader_ok(top, entry):
                where = top.f_code.co_filename if top is not None else "?"
                return f"reading {name} (from {shown(where)})"
            return None
        if event in ("object.__setattr__", "object.__delattr__"):
            return check_setattr(args, top)
        return None  # builtins.id

    benign_attributes = frozenset({"__code__", "__defaults__", "__kwdefaults__"})

    def hook(event, args):
        if event == "builtins.id" or (event == "object.__getattr__" and args[1] in benign_attributes):
            return
        tid = get_ident()
        if tid in busy:
            return  # the hook's own frame access and file reads
        busy.add(tid)
        try:
            reason = decide(event, args)
        except base_exception as exc:  # a check that trips on something odd refuses
            reason = f"could not be checked ({type_(exc).__name__})"
        finally:
            busy.discard(tid)
        if reason is not None:
            raise permission_error(f"maxkernel guard: {event} is not allowed in a kernel: {reason}")

    return hook
