"""No code a client could have written runs in the MCP server's process: every file a tool could import (a task
folder's baseline.py, make_task's FILE.py, a module name, a sibling module, a kernel, a port) records the pid of the
process that imported it; after every tool that takes a task, function, source or kernel has run (and done its
work: the folder task is judged correct, the function made a task), none was the server's."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
import textwrap
from pathlib import Path

import pytest
from google.adk.artifacts import InMemoryArtifactService

from maxkernel.mcpserver.tools import ToolHost

# Appends "<pid> <module name>" to MARK when imported; in a sandboxed job the path does not exist (or the job's
# pid differs), so only an import in this process leaves this process's pid.
SIDE_EFFECT = '''
import os as _os
try:
    with open({mark!r}, "a") as _f:
        _f.write(f"{{_os.getpid()}} {{__name__}}\\n")
except OSError:
    pass
'''

BASELINE = '''
import jax.numpy as jnp
from jaxbench._common import dims, draw, keys

CONFIG = {"name": "evil", "rows": 1024, "cols": 512}
SIZES = {"smoke": {"rows": 128, "cols": 256}}


def create_inputs(dtype=jnp.float32, *, size="full", seed=42):
    d = dims(CONFIG, SIZES, size)
    return (draw(keys(seed, 1)[0], (d["rows"], d["cols"]), dtype, seed),)


def workload(x):
    return x * 2.0 + 1.0


def get_flops(size="full"):
    d = dims(CONFIG, SIZES, size)
    return 2 * d["rows"] * d["cols"]
'''

KERNEL = '''
import jax
from jax.experimental import pallas as pl


def _body(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0 + 1.0


def workload(x):
    rows, cols = x.shape
    return pl.pallas_call(_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), grid=(rows // 128,),
                          in_specs=[pl.BlockSpec((128, cols), lambda i: (i, 0))],
                          out_specs=pl.BlockSpec((128, cols), lambda i: (i, 0)))(x)
'''

FUNCTION = '''
def scale(x):
    return x * 3.0


def shapes():  # estimate_program's inputs: the arguments scale takes, never allocated
    import jax
    import jax.numpy as jnp

    return (jax.ShapeDtypeStruct((4096, 1024), jnp.float32),)
'''


def plant(root: Path, mark: Path) -> None:
    """Every name a tool could import, each with the side effect."""
    effect = SIDE_EFFECT.format(mark=str(mark))
    (root / "evil").mkdir()
    (root / "evil" / "baseline.py").write_text(effect + BASELINE)
    (root / "evil" / "helper.py").write_text(effect)
    (root / "kernel.py").write_text(KERNEL)  # honest: judged correct (the allow-list refuses a kernel's open())
    (root / "kmark.py").write_text(effect + KERNEL)
    (root / "fn.py").write_text(effect + FUNCTION)  # FILE.py:scale, and as a module by name: fn:scale, fn.PY:scale
    (root / "sib.py").write_text(effect)
    (root / "fn2.py").write_text(effect + "import sib  # noqa\n" + FUNCTION)  # a sibling module it imports


def imported_here(mark: Path) -> list[str]:
    lines = mark.read_text().splitlines() if mark.exists() else []
    return [ln for ln in lines if ln.split()[0] == str(os.getpid())]


@pytest.fixture
def planted(tmp_path, monkeypatch):
    from maxkernel.settings import get_settings

    root, mark = tmp_path / "root", tmp_path / "mark.txt"
    root.mkdir()
    plant(root, mark)
    monkeypatch.chdir(root)  # the server's working directory is its root, as `maxkernel mcp --root .` runs
    monkeypatch.syspath_prepend(str(root / "evil"))  # even with the folder importable by name
    settings = get_settings()
    monkeypatch.setattr(settings, "drafts_dir", root)
    monkeypatch.setattr(settings, "data_dir", tmp_path / "data")
    before = set(sys.modules)
    yield root, mark
    for name in set(sys.modules) - before:
        if str(root) in str(getattr(sys.modules[name], "__file__", "") or ""):
            pytest.fail(f"module {name} from the root was imported in the server's process")


def _call(host: ToolHost, name: str, args: dict) -> dict:
    return asyncio.run(host.call(name, args))


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_no_tool_imports_a_clients_code_into_the_server(planted):
    root, mark = planted
    host = ToolHost(root, artifacts=InMemoryArtifactService())
    info = _call(host, "task_info", {"task": "evil"})
    assert info["inputs"] == ["float32[128, 256]"] and info["flops"] == 2 * 128 * 256, info
    assert "helper.py" in info["reference_files"]
    for tool in ("compile_kernel", "test_kernel", "evaluate_kernel", "estimate_kernel", "profile_kernel",
                 "tune_kernel"):
        r = _call(host, tool, {"task": "evil", "path": "kernel.py"})
        assert tool == "tune_kernel" or r.get("status") != "error", (tool, r)
        if tool == "evaluate_kernel":
            assert r["status"] == "correct", r  # the folder task is judged, from its facts, by sandboxed jobs
            assert r["correctness"]["check_size"], r  # and the second size was drawn over its code, in a job
    for tool in ("compile_kernel", "evaluate_kernel"):
        assert _call(host, tool, {"task": "evil", "path": "kmark.py"})
    assert _call(host, "read_example", {"task": "evil"}).get("examples")
    made = _call(host, "make_task", {"function": "fn.py:scale", "args": ["f32[T=4096,1024]"]})
    assert made["ok"], made
    assert _call(host, "task_info", {"task": made["path"]})["inputs"]
    for call in ({"args": ["f32[T=4096,1024]"]}, {"inputs": "fn.py:shapes"}):  # traced and counted in a job
        r = _call(host, "estimate_program", {"program": "fn.py:scale", **call})
        assert r["ok"] and r["estimated_ms"] > 0 and r["bound"] == "memory", r
    for function in ("fn:scale", "fn.PY:scale", "fn2.py:scale"):  # a module name, a case-varied file, a sibling
        r = _call(host, "make_task", {"function": function, "args": ["f32[4096,1024]"], "name": "again"})
        assert r.get("status") == "error" or not r.get("ok"), (function, r)
    if importlib.util.find_spec("torch") is not None:
        (root / "orig.py").write_text("import torch\n\ndef scale(x):\n    return x * 3.0\n")
        r = _call(host, "check_port", {"path": "fn.py", "function": "scale", "source": "orig.py",
                                       "args": ["f32[64,128]"]})
        assert r.get("status") != "error", r

    async def race():  # a write and a task_info sent together: nothing the write brings in runs here either
        return await asyncio.gather(
            host.call("write_file", {"path": "evil2/baseline.py", "content": SIDE_EFFECT.format(mark=str(mark))
                                     + BASELINE}),
            host.call("task_info", {"task": "evil2"}))

    asyncio.run(race())
    fresh = ToolHost(root, artifacts=InMemoryArtifactService())  # a restarted server: nothing remembered, nothing run
    assert _call(fresh, "task_info", {"task": "evil2"})["inputs"]
    assert imported_here(mark) == []


@pytest.mark.unit
def test_where_folder_code_is_sandboxed_the_loaders_refuse_it(tmp_path, monkeypatch):
    """The two places folder code enters a process fail closed, whichever caller reaches them."""
    from maxkernel.harness.verdict.task_facts import described
    from maxkernel.tasknew.build import resolve_function
    from maxkernel.tasknew.specs import SpecError
    from maxkernel.tasks import TaskError, _import_file, folder_code_sandboxed, load_task

    mark = tmp_path / "mark.txt"
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "baseline.py").write_text(SIDE_EFFECT.format(mark=str(mark)) + BASELINE)
    (tmp_path / "fn.py").write_text(SIDE_EFFECT.format(mark=str(mark)) + FUNCTION)
    with folder_code_sandboxed(described):
        task = load_task(tmp_path / "t")
        assert task.described
        with pytest.raises(TaskError, match="sandboxed"):
            _import_file(task.baseline_file, "_probe")
        with pytest.raises(SpecError, match="sandboxed"):
            resolve_function(f"{tmp_path / 'fn.py'}:scale")
    assert imported_here(mark) == []
    assert not load_task(tmp_path / "t").described  # outside: a person's own CLI imports their own task


@pytest.mark.unit
def test_a_link_in_a_task_folder_is_never_handed_to_its_code(tmp_path):
    """A task folder's files go to its job read without following links: a link named secret.py beside
    baseline.py would otherwise hand any file this process can read to the task's code (and out via its facts)."""
    from maxkernel.tasks import load_task

    (tmp_path / "outside.txt").write_text("SECRET")
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "baseline.py").write_text(BASELINE)
    (folder / "secret.py").symlink_to(tmp_path / "outside.txt")
    task = load_task(folder)
    spec, files = task.for_job()
    assert spec == "task" and set(files) == {"task/baseline.py"}
    assert all(b"SECRET" not in data for data in files.values())


@pytest.mark.unit
def test_the_facts_a_job_reads_become_what_the_harness_reads(tmp_path):
    """Described: the declared names, shapes and FLOPs at every size, and create_inputs/workload refusing."""
    from maxkernel.harness.verdict.task_facts import Described
    from maxkernel.harness.jobs.task_job import facts_of
    from maxkernel.tasks import TaskError, load_task

    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "baseline.py").write_text(textwrap.dedent(BASELINE))
    task = load_task(folder)
    facts = facts_of(str(folder))
    d = Described("t", facts)
    assert d.CONFIG == task.config and d.SIZES == task.module.SIZES and d.get_flops("smoke") == task.flops("smoke")
    ins, outs = d.structs("smoke")
    real_in, real_out = task.structs("smoke")
    assert [(x.shape, x.dtype) for x in ins + outs] == [(x.shape, x.dtype) for x in real_in + real_out]
    with pytest.raises(TaskError, match="sandboxed"):
        d.workload(*ins)
    with pytest.raises(TaskError, match="sandboxed"):
        d.create_inputs(size="smoke", seed=0)


@pytest.mark.unit
def test_a_file_swapped_for_a_link_after_the_check_is_not_handed_to_a_job(tmp_path):
    """The server resolves a kernel path inside its root, then hands the file to a job: a local process that swaps
    it (or a folder on its way) for a link in between hands the job nothing, because the copy follows no link.
    A person's own CLI may still hand a file through a link of theirs."""
    from maxkernel.harness.sandbox.copyout import CopyOutError
    from maxkernel.harness.sandbox.pool import _copy_in
    from maxkernel.harness.verdict.task_facts import described
    from maxkernel.tasks import folder_code_sandboxed

    (tmp_path / "secret.txt").write_text("SECRET")
    (tmp_path / "root" / "real").mkdir(parents=True)
    (tmp_path / "root" / "real" / "k.py").write_text("x = 1\n")
    (tmp_path / "root" / "kernel.py").symlink_to(tmp_path / "secret.txt")
    (tmp_path / "root" / "via").symlink_to(tmp_path / "root" / "real")
    dest = tmp_path / "dest.py"
    _copy_in(tmp_path / "root" / "kernel.py", dest)
    assert dest.read_text() == "SECRET"  # the CLI: the person's own link
    with folder_code_sandboxed(described):
        for linked in (tmp_path / "root" / "kernel.py", tmp_path / "root" / "via" / "k.py"):
            with pytest.raises(CopyOutError, match="link"):
                _copy_in(linked, tmp_path / "never.py")
        _copy_in(tmp_path / "root" / "real" / "k.py", dest)
    assert dest.read_text() == "x = 1\n" and not (tmp_path / "never.py").exists()
