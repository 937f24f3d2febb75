"""Verdict v3: the static allow-list and the audit hook under it (harness/sandbox/guard.py), each proven by attacking it.

Every eval route is refused twice: by the hardened static check, and with that check off by the guard at run time
(in a subprocess that arms it and imports the kernel as a sandboxed job would, then traces, lowers and writes like
the harness). Honest kernels, the shipped ones and jax's own Pallas ops, run under the armed guard unchanged.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from maxkernel.harness.sandbox.static_check import check_file, check_source

ROOT = Path(__file__).resolve().parents[2]
V3 = Path(__file__).parent / "kernels" / "verdict_v3"
RMS, FLASH = "12p_RMSNorm", "1p_Flash_Attention"

# A sandboxed job in miniature: each kernel is copied into the scratch folder (beside its inputs), imported with
# load_kernel(guard=scratch), traced as a v5e sees it and under the strict interpreter, lowered for TPU (the
# lowering written into scratch, as the harness does), compiled and run on CPU, its outputs saved into scratch.
# Prints one JSON line per kernel: the stage that failed and the error, or ok. argv: scratch, guard (1/0), then
# task=kernel pairs; a task of '-' imports the kernel only.
RUNNER = textwrap.dedent('''
    import json, shutil, sys, time
    from pathlib import Path
    import ctypes  # loaded before any job, as the isolated worker's privilege check does
    import jax
    from jax.experimental.pallas import tpu as pltpu
    from maxkernel import chips
    from maxkernel.harness.verdict.arrays import save_arrays
    from maxkernel.harness.jobs.candidate_job import load_kernel
    from maxkernel.tasks import load_task

    scratch, guard = Path(sys.argv[1]), sys.argv[2] == "1"
    for pair in sys.argv[3:]:
        task_name, kernel = pair.split("=")
        copy = scratch / Path(kernel).name
        shutil.copy(kernel, copy)
        stage, t0 = "import", time.perf_counter()
        try:
            if task_name != "-":
                task = load_task(task_name)
                structs = jax.eval_shape(lambda: task.create_inputs(size="smoke", seed=0))
                inputs = task.create_inputs(size="smoke", seed=1)
                save_arrays(scratch / "inputs_0.npz", [jax.device_get(x) for x in inputs])
            module = load_kernel(copy, guard=scratch if guard else None)
            if task_name != "-":
                stage = "trace"
                with chips.trace_context(chips.get("v5e")):
                    plain = jax.jit(module.workload).trace(*structs)
                params = pltpu.InterpretParams(detect_races=True)
                with pltpu.force_tpu_interpret_mode(params):
                    traced = jax.jit(module.workload).trace(*structs)
                stage = "lower"
                (scratch / "lowered_tpu.mlir").write_text(plain.lower(lowering_platforms=("tpu",)).as_text())
                stage = "run"
                with pltpu.force_tpu_interpret_mode(params):
                    out = jax.block_until_ready(traced.lower().compile()(*inputs))
                save_arrays(scratch / "out_0.npz", [jax.device_get(x) for x in jax.tree_util.tree_leaves(out)])
            result = {"ok": True}
        except Exception as exc:
            result = {"ok": False, "error": type(exc).__name__, "message": str(exc)[:500]}
        name = Path(kernel).name if Path(kernel).name != "kernel.py" else Path(kernel).parent.name + "/kernel.py"
        result.update(kernel=name, stage=stage, seconds=round(time.perf_counter() - t0, 2))
        print(json.dumps(result), flush=True)
''')


def _run(scratch: Path, pairs, guard: bool = True, timeout: int = 600) -> dict[str, dict]:
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(scratch), "1" if guard else "0", *pairs], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(pairs), proc.stdout[-3000:] + proc.stderr[-5000:]
    return {r["kernel"]: r for r in results}


def _refused(result: dict, stage: str, event: str, *words: str) -> None:
    assert not result["ok"] and result["error"] == "PermissionError", result
    assert result["stage"] == stage, result
    assert result["message"].startswith(f"maxkernel guard: {event} is not allowed in a kernel"), result
    for w in words:
        assert w in result["message"], result


# -- layer 1: the static allow-list -------------------------------------------------------------------------------
EVAL_ROUTES = [  # (kernel, its line that is refused, words of the rule)
    ("guard_type_hints.py", 'def _probe(x: "', "string annotations are not allowed"),
    ("guard_singledispatch.py", "@functools.singledispatch", "'singledispatch' is not allowed: it evaluates strings"),
    ("guard_future_annotations.py", "from __future__ import annotations", "'from __future__ import annotations'"),
    ("guard_dataclass_fields.py", "__annotations__ = {", "the name '__annotations__' is not allowed"),
]


@pytest.mark.unit
@pytest.mark.parametrize("kernel,line,words", EVAL_ROUTES, ids=[k for k, _, _ in EVAL_ROUTES])
def test_the_static_check_refuses_every_eval_route_naming_line_and_rule(kernel, line, words):
    lines = (V3 / kernel).read_text().splitlines()
    lineno = next(i for i, text in enumerate(lines, 1) if text.strip().startswith(line))
    reason = check_file(V3 / kernel)
    assert reason.startswith(f"{kernel} line {lineno}: ") and words in reason, reason


HEADER = "import functools\nimport typing\nimport dataclasses\n"  # lines 1-3
NEW_REJECTED = [  # (code from line 4, words of the rule)
    ("typing.get_type_hints(f)", "'get_type_hints' is not allowed: it evaluates strings as code"),
    ("r = typing.ForwardRef('x')", "'ForwardRef' is not allowed"),
    ("from typing import ForwardRef", "'typing.ForwardRef' is not allowed"),
    ("class A:\n    m = functools.singledispatchmethod(f)", "'singledispatchmethod' is not allowed"),
    ("import numpy as np\nm = np.bmat('a b')", "'bmat' is not allowed"),
    ("def f(x: 'int'): pass", "string annotations are not allowed"),
    ("def f(x) -> typing.List['jax.Array']: pass", "string annotations are not allowed"),
    ("def f(*args: 'a', **kw: 'b'): pass", "string annotations are not allowed"),
    ("x: 'open(1)' = 1", "string annotations are not allowed"),
    ("class A:\n    x: typing.Optional['B'] = None", "string annotations are not allowed"),
    ("def f():\n    y: 'int' = 1", "string annotations are not allowed"),
    ("s = \"__import__('gc').get_objects()\"", "the string holding '__import__'"),
    ("s = 'f.__globals__'", "the string holding '__globals__'"),
    ("s = b'__import__'", "'__import__'"),
    ("s = f'{1}__class__'", "'__class__'"),
    ('"""Docstrings count: __subclasses__."""', "'__subclasses__'"),
]


@pytest.mark.unit
@pytest.mark.parametrize("code,words", NEW_REJECTED, ids=[c.splitlines()[-1][:40] for c, _ in NEW_REJECTED])
def test_the_hardened_rules_refuse(code, words):
    reason = check_source(HEADER + code + "\n")
    assert reason is not None, code
    lines = range(4, 4 + len(code.splitlines()))
    assert reason.startswith(tuple(f"kernel.py line {n}: " for n in lines)), reason
    assert words in reason, reason


@pytest.mark.unit
def test_the_future_import_is_refused_at_the_head_of_a_module():
    assert check_source('"""Doc."""\nfrom __future__ import annotations\n').startswith(
        "kernel.py line 2: 'from __future__ import annotations' is not allowed")
    assert check_source("from __future__ import division\n") is None


@pytest.mark.unit
def test_what_stays_allowed():
    source = HEADER + textwrap.dedent('''
        import collections

        Tile = collections.namedtuple("Tile", ["rows", "cols"])


        @dataclasses.dataclass(frozen=True)
        class BlockSizes:
            rows: int = 8
            cols: typing.Optional[int] = None

            def __post_init__(self):
                """Checks __init__'s arguments."""

            @classmethod
            def fit(cls, n: int) -> "BlockSizes":
                return cls(min(n, 8))


        def workload(x: "BlockSizes") -> tuple:
            return (x,)


        if __name__ == "__main__":
            print("__main__")
    ''')
    assert check_source(source) is None
    assert check_file(V3 / "guard_honest_python.py") is None and check_file(V3 / "guard_library_ops.py") is None


@pytest.mark.unit
def test_no_shipped_kernel_postpones_annotations():
    out = subprocess.run(["git", "grep", "-l", "from __future__ import annotations", "--", "jaxbench/*/kernel.py",
                          "maxkernel/agents/replay/kernels", "tests/harness/kernels", "tests/tools/kernels*"], cwd=ROOT,
                         capture_output=True, text=True).stdout.split()
    assert [p for p in out if not p.endswith("guard_future_annotations.py")] == []


# -- layer 2: the audit hook, with the static check off ----------------------------------------------------------
HOSTILE = {  # kernel: (stage at which it is refused, event, words of the reason)
    "guard_type_hints.py": ("import", "compile", "code compiled from a string"),
    "guard_singledispatch.py": ("import", "compile", "code compiled from a string"),
    "guard_future_annotations.py": ("import", "compile", "code compiled from a string"),
    "guard_dataclass_fields.py": ("import", "compile", "code compiled from a string"),
    "guard_gc_memo.py": ("import", "gc.get_objects", ""),
    "guard_frame_walk.py": ("import", "sys._getframe", "frame access"),
    "guard_traceback_frame.py": ("import", "object.__getattr__", "reading tb_frame"),
    "guard_ctypes.py": ("import", "ctypes.dlopen", ""),
    "guard_read_inputs.py": ("trace", "open", "reading", "inputs_0.npz"),
    "guard_write_lowering.py": ("import", "open", "writing", "lowered_tpu.mlir"),
    "guard_patch_write_text.py": ("lower", "open", "writing", "lowered_tpu.mlir"),  # last: its patch stays
}


@pytest.fixture(scope="module")
def hostile_results(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("guard_scratch")
    return _run(scratch, [f"{RMS}={V3 / k}" for k in HOSTILE])


@pytest.mark.unit
@pytest.mark.parametrize("kernel", list(HOSTILE))
def test_the_guard_refuses_each_route_at_run_time(hostile_results, kernel):
    stage, event, *words = HOSTILE[kernel]
    _refused(hostile_results[kernel], stage, event, *words)


@pytest.mark.unit
def test_the_routes_are_real_without_the_guard(tmp_path):
    """The same kernels, unguarded: each attack works (the eval routes return gc's object list, and so on)."""
    kernels = [k for k in HOSTILE if k != "guard_patch_write_text.py"]
    results = _run(tmp_path, [f"-={V3 / k}" for k in kernels], guard=False)
    assert all(r["ok"] for r in results.values()), results


@pytest.mark.unit
def test_no_other_hook_or_tracer_joins_once_armed(tmp_path):
    """A hook the kernel adds (to see the harness's events) is never installed: CPython drops a hook whose
    installation an earlier hook refuses. The same holds for the harness; tracing is refused outright."""
    kernel = tmp_path / "k.py"
    kernel.write_text("import sys\nsys.addaudithook(lambda event, args: print('KERNEL HOOK SAW', event))\n"
                      "def workload(x):\n    return x\n")
    code = textwrap.dedent(f'''
        import sys
        from maxkernel.harness.jobs.candidate_job import load_kernel
        load_kernel({str(kernel)!r}, guard=True)
        sys.addaudithook(lambda event, args: print("LATE HOOK SAW", event))
        id(1)
        try:
            sys.settrace(None)
        except PermissionError as e:
            print("refused:", e)
    ''')
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120).stdout
    assert "HOOK SAW" not in out and "refused: maxkernel guard: sys.settrace is not allowed" in out, out


# -- layer 2 end to end: a real sandboxed evaluation with the static check and the watch off ------------------------
@pytest.fixture(scope="module")
def raw(evaluator):
    from maxkernel.harness.verdict.evaluate import Evaluator

    return Evaluator(evaluator.pool, static_check=False, watch=False)


@pytest.mark.integration
@pytest.mark.parametrize("kernel", ["guard_type_hints.py", "guard_singledispatch.py", "guard_gc_memo.py",
                                    "guard_frame_walk.py", "guard_read_inputs.py", "guard_patch_write_text.py"])
def test_a_sandboxed_evaluation_of_each_route_is_never_correct(raw, kernel):
    v = raw.evaluate(RMS, V3 / kernel)
    assert v.status != "correct" and not v.ok, v.model_dump_json(indent=1)[:3000]
    assert "maxkernel guard" in (v.reason or "") or v.status in ("error", "rejected"), v.reason


# -- honest code under the armed guard -------------------------------------------------------------------------------
# One shipped kernel per family of Python it is written in (the tiled GEMM with its dataclass, the norm, the
# attention with its fori_loop, an epilogue loop, a row softmax): every other shipped kernel is judged under the
# same armed guard by its verdict in `bench kernels`, whose table is committed (benchmarks/results/kernels).
FAMILIES = ("8p_GEMM", "12p_RMSNorm", "1p_Flash_Attention", "27k_Matmul_Mish_Mish", "50k_Matmul_GELU_Softmax")


def _label(pair: str) -> str:
    """The runner's name for a pair's kernel: a shipped kernel.py by its task folder (they share a file name)."""
    path = Path(pair.split("=")[1])
    return path.name if path.name != "kernel.py" else f"{path.parent.name}/kernel.py"


def _shipped_pairs() -> list[str]:
    pairs = [f"{t}={ROOT / 'jaxbench' / t / 'kernel.py'}" for t in FAMILIES]
    pairs += [f"{p.parent.parent.name}={p}" for p in sorted(ROOT.glob("jaxbench/realworld/*/kernel.py"))]
    for p in sorted((ROOT / "maxkernel/agents/replay/kernels").glob("*.py")):
        task = next((t for t in ("8p_GEMM", "12p_RMSNorm") if p.name.startswith(t + "_")), "-")
        pairs.append(f"{task}={p}")
    return pairs


@pytest.mark.slow
def test_a_shipped_kernel_of_each_family_and_every_replay_kernel_run_under_the_armed_guard(tmp_path):
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    pairs = _shipped_pairs()
    on = _run(tmp_path / "on", pairs)
    bad = {k: r for k, r in on.items() if not r["ok"] and "maxkernel guard" in r.get("message", "")}
    assert not bad, bad
    # A kernel that fails for its own reasons (the replay's deliberately faulty first drafts) fails the same way
    # without the guard.
    failed = [p for p in pairs if not on[_label(p)]["ok"]]
    if failed:
        off = _run(tmp_path / "off", failed, guard=False)
        for pair in failed:
            name = _label(pair)
            assert (off[name]["stage"], off[name]["error"]) == (on[name]["stage"], on[name]["error"]), (on, off)
    assert sum(r["ok"] for r in on.values()) >= 5


@pytest.mark.slow
def test_ordinary_python_and_jax_pallas_ops_run_under_the_armed_guard(tmp_path):
    results = _run(tmp_path, [f"{RMS}={V3 / 'guard_honest_python.py'}", f"{FLASH}={V3 / 'guard_library_ops.py'}"])
    assert all(r["ok"] for r in results.values()), results
