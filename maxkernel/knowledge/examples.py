"""Retrieval over real kernels: the reference kernels in jaxbench/, the Pallas kernels that ship inside the
installed jax (flash, splash, paged and ragged paged attention, megablox gmm, matmul, ... for TPU; Triton and
Mosaic GPU ops), and every kernel the agents have proven correct before (per user, under the data folder).

A task is matched by what it computes, not by its name: the query is built from the task's operator and the
operations its baseline calls (einsum, softmax, segment_sum, take, cumsum, ...), and ranked by BM25 over each
kernel's path, docstrings and identifiers. A task's own reference kernel is never returned for it.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from maxkernel.settings import get_settings

__all__ = ["Example", "corpus", "search", "query_terms", "remember_proven", "excerpt", "PROVEN_DIR"]

PROVEN_DIR = "proven"  # under the data folder: proven/<task>/<sha>.py
_K1, _B = 1.2, 0.75
_TITLE = 0.25  # score multiplier per task word found in a kernel's path
_GPU_WEIGHT = 0.4  # a TPU target prefers TPU kernels; a GPU target the reverse
_STOP = frozenset("""a an and as at be by def else for from if import in is it jax jnp lax np numpy of on or pl
pltpu return self the to with none true false int float dtype shape x y i j k n m b s t args kwargs ref refs
kernel kernels pallas call py experimental ops tpu gpu array arrays value values one two use used this that
which when where not are all any may can into out output outputs input inputs list tuple dict str""".split())


@dataclass(frozen=True)
class Example:
    path: str  # where the kernel lives (a repo-relative path, an installed module file, or a proven file)
    kind: str  # "suite" (jaxbench reference), "jax-tpu", "jax-gpu" (shipped in the installed jax), "proven"
    task: str  # the suite task it belongs to, for suite and proven kernels ("" for jax's own)
    terms: tuple[str, ...]
    title: frozenset[str] = frozenset()  # the words of its path (or task name): what the kernel is


def _split_words(text: str) -> list[str]:
    words = re.findall(r"[A-Za-z][a-z]+|[A-Z]+(?![a-z])|[a-z]+|\d+[pk]?", text)
    return [w.lower() for w in words]


def tokens(text: str) -> list[str]:
    return [w for w in _split_words(text) if len(w) > 1 and w not in _STOP]


def _doc_terms(path_words: str, source: str) -> tuple[str, ...]:
    """The path's words count three times (they name the operator), then docstrings and identifiers."""
    return tuple(tokens(path_words) * 3 + tokens(source))


def _jax_files():
    import jax.experimental.pallas.ops.gpu as gpu
    import jax.experimental.pallas.ops.tpu as tpu

    for package, kind in ((tpu, "jax-tpu"), (gpu, "jax-gpu")):
        root = Path(package.__file__).parent
        for f in sorted(root.rglob("*.py")):
            if f.name == "__init__.py":
                continue
            try:
                text = f.read_text()
            except OSError:
                continue
            if "pallas_call" in text or "plgpu.kernel" in text or "pl.kernel" in text:
                yield f, kind, text, f.relative_to(root).with_suffix("").as_posix()


@functools.lru_cache(maxsize=1)
def _static_corpus() -> tuple[tuple[Example, str], ...]:
    import jaxbench

    out = []
    root = Path(jaxbench.__file__).parent
    # The real-world suite's kernels too: they were left out, so paged MLA, MoE dispatch or a chunked delta rule
    # were never shown to an agent writing the next kernel of their family.
    for k in sorted([*root.glob("*/kernel.py"), *root.glob("realworld/*/kernel.py")]):
        task = k.parent.name
        text = k.read_text()
        words = re.sub(r"^(\d+[pk]|rw)_", "", task).replace("_", " ")
        out.append((Example(k.relative_to(root.parent).as_posix(), "suite", task, _doc_terms(words, text),
                            frozenset(tokens(words))), str(k)))
    for f, kind, text, rel in _jax_files():
        out.append((Example(f"jax.experimental.pallas.ops.{kind[4:]}/{rel}.py", kind, "",
                            _doc_terms(rel.replace("/", " "), text), frozenset(tokens(rel.replace("/", " ")))),
                    str(f)))
    return tuple(out)


def _proven() -> list[tuple[Example, str]]:
    folder = get_settings().data_dir / PROVEN_DIR
    out = []
    for f in sorted(folder.glob("*/*.py")) if folder.is_dir() else ():
        try:
            text = f.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        task = f.parent.name
        words = re.sub(r"^\d+[pk]_", "", task).replace("_", " ")
        out.append((Example(str(f), "proven", task, _doc_terms(words, text), frozenset(tokens(words))), str(f)))
    return out


def corpus() -> list[tuple[Example, str]]:
    """(example, file) for every kernel retrieval can return, the proven ones read fresh each call."""
    return list(_static_corpus()) + _proven()


# Operator features: what a task's words imply about the kernel it needs (a MoE layer is a grouped matmul, a
# convolution is a matmul over patches, cross-entropy is a log-sum-exp reduction).
FEATURES = {
    "moe": "grouped matmul group sizes experts gmm", "experts": "grouped matmul group gmm",
    "ragged": "group sizes grouped gmm", "grouped": "group sizes gmm",
    "gemm": "matmul dot", "bmm": "matmul dot batched", "mlp": "matmul dot", "swiglu": "matmul dot silu",
    "einsum": "matmul dot", "conv": "matmul dot", "triangle": "matmul einsum dot",
    "entropy": "softmax logsumexp max exp reduction", "logsumexp": "softmax max exp reduction",
    "softmax": "max exp sum reduction", "norm": "mean variance rsqrt reduction",
    "attention": "softmax query key value", "retention": "attention decay", "ssd": "attention decay chunk scan",
}


def _features(words: list[str]) -> list[str]:
    return [t for w in words for key, extra in FEATURES.items() if w.startswith(key) for t in extra.split()]


def _named(task) -> list[str]:
    source = task.baseline_source()
    operator = re.search(r'"operator":\s*"([^"]+)"', source)
    words = re.sub(r"^\d+[pk]_", "", task.name).replace("_", " ")
    return tokens(words) + tokens(operator.group(1) if operator else "")


def query_terms(task) -> list[str]:
    """What the task computes: its name and operator words, the kernel features they imply, and the
    operations its baseline calls."""
    source = task.baseline_source()
    ops = re.findall(r"\b(?:jnp|jax\.nn|lax|jax\.lax|nn)\.(\w+)", source)
    doc = re.findall(r'"""(.*?)"""', source, re.S)
    named = _named(task)
    return named * 2 + _features(named) * 2 + tokens(" ".join(ops)) + tokens(" ".join(doc))


def _bm25(query: list[str], docs: list[tuple[str, ...]]) -> list[float]:
    n = len(docs)
    if not n:
        return []
    avg = sum(len(d) for d in docs) / n or 1.0
    df = Counter(t for d in docs for t in set(d))
    counts = [Counter(d) for d in docs]
    q = Counter(query)
    scores = []
    for d, c in zip(docs, counts):
        s = 0.0
        for term, qf in q.items():
            f = c.get(term, 0)
            if not f:
                continue
            idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
            s += qf * idf * f * (_K1 + 1) / (f + _K1 * (1 - _B + _B * len(d) / avg))
        scores.append(s)
    return scores


def search(task, *, k: int = 2, platform: str = "tpu") -> list[dict]:
    """The best `k` kernels for `task` (a maxkernel.tasks.Task): [{path, kind, task, score, file}], best first.
    The task's own reference kernel and its own proven kernels are left out."""
    items = [(e, f) for e, f in corpus() if e.task != task.name]
    scores = _bm25(query_terms(task), [e.terms for e, _ in items])
    named = set(_named(task))
    implied = set(_features(sorted(named)))
    weighted = []
    for (e, f), s in zip(items, scores):
        other = (platform == "tpu" and e.kind == "jax-gpu") or (platform == "gpu" and e.kind == "jax-tpu")
        # A title field: the task's own words in the kernel's name count most, implied features next.
        title = 1 + _TITLE * (2 * len(named & e.title) + len(implied & e.title))
        weighted.append((s * title * (_GPU_WEIGHT if other else 1.0), e, f))
    weighted.sort(key=lambda x: (-x[0], x[1].path))
    return [{"path": e.path, "kind": e.kind, "task": e.task, "score": round(s, 3), "file": f}
            for s, e, f in weighted[:k] if s > 0]


def excerpt(file: str, chars: int = 2500) -> str:
    """The part of a kernel file a reader needs, `chars` at most: from the first kernel body (a function taking
    refs, or one named kernel / *_kernel), else from the function around the first pallas_call."""
    text = Path(file).read_text()
    if len(text) <= chars:
        return text
    m = (re.search(r"^[ \t]*def \w+\([^)]*_ref\b", text, re.M)
         or re.search(r"^[ \t]*def (?:kernel|\w+_kernel)\(", text, re.M))
    if m is None:
        call = text.find("pallas_call(")
        m = None if call < 0 else list(re.finditer(r"^[ \t]*def \w+\(", text[:call], re.M))[-1:] or None
        m = m[0] if m else None
    start = text.rfind("\n", 0, m.start()) + 1 if m else 0
    return text[start:start + chars] + "\n# ... (cut; the whole file is at the path above)"


def remember_proven(task: str, source: str, summary: str = "") -> Path | None:
    """Keep a kernel the harness judged correct, for later retrieval (content-addressed: once per source)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    folder = get_settings().data_dir / PROVEN_DIR / Path(task).name
    path = folder / f"{digest}.py"
    if path.exists():
        return path
    try:
        folder.mkdir(parents=True, exist_ok=True)
        head = f"# proven correct on {Path(task).name} by maxkernel ({time.strftime('%Y-%m-%d')}): {summary[:200]}\n"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(head + source)
        tmp.replace(path)
    except OSError:
        return None
    return path
