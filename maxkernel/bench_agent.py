"""`maxkernel bench agent`: the agent over many tasks, one frozen record per task, resumable, with a summary."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import jaxbench

__all__ = ["BenchError", "run_bench_agent", "load_records", "MODES", "RECORD_VERSION"]

MODES = ("auto", "search")
RECORD_VERSION = 1
DEFAULT_OUT = Path("runs") / "bench-agent"


class BenchError(ValueError):
    """A usage problem found before any task ran (unknown task, mode, or a model that cannot run them)."""


def load_records(out: str | Path) -> list[dict]:
    """The finished task records under out/records, in suite order."""
    folder = Path(out) / "records"
    records = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            rec = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # a torn file is impossible with atomic writes; anything else is not ours
        if rec.get("finished"):
            records.append(rec)
    order = {n: i for i, n in enumerate(jaxbench.task_names())}
    return sorted(records, key=lambda r: (order.get(r.get("task"), len(order)), r.get("task", "")))


def _write_json(path: Path, doc) -> None:
    """Atomic: a reader (or a resumed run) sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def _check(tasks: list[str], mode: str, model: str | None, size: str) -> dict[str, str]:
    """Usage problems raise BenchError; returns the tasks to skip, with why."""
    from maxkernel.agents.models import is_replay, model_name
    from maxkernel.agents.sub_agents import ROLES
    from maxkernel.tasks import TaskError, load_task

    if mode not in MODES:
        raise BenchError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    if not tasks:
        raise BenchError("no tasks: give --tasks A,B,... or --all")
    for t in tasks:
        try:
            task = load_task(t)
        except TaskError as exc:
            raise BenchError(str(exc)) from None
        if size not in task.sizes:
            raise BenchError(f"task {task.name} has no size {size!r}")
    if any(is_replay(model_name(role, override=model)) for role in ROLES):
        from maxkernel.agents.replay.model import recorded_tasks

        # The offline model replays recorded turns: a task it has none for is skipped (and said), not failed.
        return {t: f"the replay model has no recording for {t} (it has {', '.join(recorded_tasks())})"
                for t in tasks if Path(t).name not in recorded_tasks()}
    return {}


def _session_state(uri: str, session_id: str) -> dict:
    from maxkernel.agents.services import session_service
    from maxkernel.optimize import USER_ID

    async def read():
        s = await session_service(uri).get_session(app_name="auto", user_id=USER_ID, session_id=session_id)
        return dict(s.state) if s else {}

    return asyncio.run(read())


def _last_attempt(uri: str, session_id: str) -> tuple[Path | None, str]:
    """The last kernel the loop wrote and why it was not kept (the loop's own note), from session state."""
    state = _session_state(uri, session_id)
    history = (state.get("loop") or {}).get("history") or []
    note = history[-1].get("note", "") if history else ""
    ws = state.get("workspace")
    return (Path(ws) / "kernel.py" if ws else None), note


def _run_auto(task, model, size, out: Path, progress) -> tuple[dict, dict]:
    """(the optimize document, what to judge): the answer if there is one, else the last attempt."""
    from maxkernel.optimize import run_optimize

    uri = f"sqlite:///{(out / 'sessions' / f'{task}.db').resolve()}"
    # A session id fixed per folder and task: an interrupted task resumes its loop where it stopped, and two
    # result folders never share a workspace (workspaces are named by session id).
    folder_id = hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:8]
    doc = run_optimize(task, mode="auto", model=model, size=size, out=out / "kernels" / task, session_uri=uri,
                       artifact_uri=f"file://{(out / 'artifacts').resolve()}", session_id=f"bench-{folder_id}-{task}",
                       progress=progress)
    if doc.get("kernel"):
        return doc, {"kernel": doc["kernel"], "verdict": doc.get("verdict"), "judged": "answer"}
    kernel, note = _last_attempt(uri, doc["session_id"])
    return doc, {"kernel": kernel, "verdict": None, "judged": "last_attempt", "note": note}


def _run_search(task, model, size, out: Path, progress) -> tuple[dict, dict]:
    """(the search result, what to judge): its best kernel, which it already re-checked on held-out seeds."""
    from maxkernel.agents.models import is_replay, model_name
    from maxkernel.agents.sub_agents import ROLES
    from maxkernel.search import make_config, run_search

    def events(ev: dict) -> None:
        if ev.get("event") != "log":  # node-level milestones only; the sub-agents' chatter stays in the graph
            progress(ev.get("text", ""))

    # The folder keeps the graph: re-running resumes the search where it stopped.
    result = run_search(out / "search" / task, make_config(task, size=size, model=model), progress=events)
    totals = result.get("totals") or {}
    doc = {"status": result.get("status"), "stop_reason": result.get("stop_reason"), "model": model,
           "replay": any(is_replay(model_name(r, override=model)) for r in ROLES),
           "iterations": result.get("nodes"), "llm_calls": totals.get("llm_calls"),
           "tokens": totals.get("tokens"), "cost_usd": totals.get("cost_usd"), "session_id": None}
    kernel = (result.get("best") or {}).get("kernel")
    if kernel:
        return doc, {"kernel": kernel, "verdict": None, "judged": "answer"}
    # Nodes correct on the search's seeds that all failed the held-out check are incorrect kernels, not none.
    failure = "incorrect" if result.get("status") == "failed_heldout" else "no_kernel"
    return doc, {"kernel": None, "verdict": None, "judged": None, "failure": failure,
                 "note": f"search ended {result.get('status')}: {result.get('stop_reason')}"}


def _record(task: str, mode: str, model: str | None, size: str, out: Path, progress) -> dict:
    from maxkernel.evals.judging import judge_kernel
    from maxkernel.optimize import OptimizeError

    started = time.monotonic()
    base = {"record_version": RECORD_VERSION, "task": task, "tier": jaxbench.tier_of(task),
            "suite": jaxbench.suite_of(task) or "folder", "mode": mode,
            "size": size, "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    try:
        doc, pick = (_run_auto if mode == "auto" else _run_search)(task, model, size, out, progress)
    except OptimizeError:
        raise  # a usage problem (credentials, recordings): stop the whole bench
    except Exception as exc:  # noqa: BLE001 - one task's crash is that task's result, not the bench's
        return {**base, "finished": True, "correct": False, "failure": "agent_error", "status": "agent_error",
                "reason": f"{type(exc).__name__}: {exc}"[:2000], "model": model, "wall_s": time.monotonic() - started,
                "llm_calls": None, "tokens": None, "cost_usd": None}
    answer = pick["judged"] == "answer"
    if pick.get("note", "").startswith("compile_kernel") and not answer:
        # The loop's last kernel failed the TPU compile gate; the harness (an interpreter on CPU) cannot say more.
        j = None
    else:
        j = judge_kernel(task, pick["kernel"], size, verdict=pick.get("verdict"))
    correct = bool(answer and j is not None and j.correct)
    rec = {**base, "finished": True, "correct": correct, "judged": pick["judged"],
           "agent_status": doc.get("status"), "stop_reason": doc.get("stop_reason"),
           "model": doc.get("model", model), "replay": doc.get("replay", False),
           "iterations": doc.get("iterations"), "llm_calls": doc.get("llm_calls"), "tokens": doc.get("tokens"),
           "cost_usd": doc.get("cost_usd"), "session_id": doc.get("session_id")}
    if j is None:
        rec.update(status="error", failure="compile", reason=pick["note"][:2000], kernel=str(pick["kernel"]))
    elif pick["kernel"] is None and pick.get("failure"):
        rec.update({k: v for k, v in j.as_dict().items() if k not in ("task", "size")})
        rec.update(failure=pick["failure"], reason=pick.get("note", ""))
    else:
        rec.update({k: v for k, v in j.as_dict().items() if k not in ("task", "size")})
        if not correct:
            # Only a kernel the agent answered with counts; a last attempt keeps its category, not its speed.
            rec.update(failure=j.failure or "incorrect", speedup=None, speedup_low=None, speedup_high=None,
                       speedup_vs_reference=None, roofline_fraction=None, rank_speedup=None, estimated_speedup=None)
            if j.correct:  # passed the harness, yet the loop's own gates (strict tests) turned it down
                rec["status"] = "unanswered"
                rec["reason"] = f"not answered by the agent ({pick.get('note', '')[:300]}); {j.reason}"
    rec["wall_s"] = time.monotonic() - started
    rec["finished_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return rec


def _ray_task(job: tuple) -> dict:
    """One task's record, made in a Ray worker: its progress lines come back with it."""
    from maxkernel.optimize import OptimizeError
    from maxkernel.search.ray_backend import where
    from maxkernel.settings import get_settings

    task, mode, model, size, out = job
    get_settings.cache_clear()  # the settings of the env Ray handed this worker, not of an earlier task's
    lines: list[str] = []
    try:
        rec = _record(task, mode, model, size, Path(out), lines.append)
    except OptimizeError as exc:
        return {"usage_error": str(exc), "lines": lines}
    return {"record": {**rec, "ran_on": where("ray")}, "lines": lines}


def _on_threads(todo: list[str], concurrency: int, one) -> None:
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="bench-agent") as pool:
        futures = [pool.submit(one, t) for t in todo]
        finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = [f for f in finished if f.exception() is not None]
        if failed:
            for f in futures:
                f.cancel()
            exc = failed[0].exception()
            from maxkernel.optimize import OptimizeError

            if isinstance(exc, OptimizeError):
                raise BenchError(str(exc)) from None
            raise exc


def _on_ray(todo: list[str], job: tuple, concurrency: int, address: str | None, progress, keep) -> None:
    """The tasks as Ray tasks; each record is written here, in the driver, as its task finishes."""
    from maxkernel.search.ray_backend import RayBackendError, run_each

    def done(task: str, result: dict) -> None:
        for line in result.get("lines", []):
            progress(f"[{task}] {line}")
        if "usage_error" in result:
            raise BenchError(result["usage_error"])
        keep(task, result["record"])

    try:
        run_each(_ray_task, [(t, *job) for t in todo], concurrency=concurrency, address=address,
                 on_start=lambda item: progress(f"[{item[0]}] started (as a Ray task)"),
                 on_done=lambda item, result: done(item[0], result))
    except RayBackendError as exc:
        raise BenchError(str(exc)) from None


def run_bench_agent(tasks: list[str], mode: str = "auto", model: str | None = None, out: str | Path | None = None,
                    concurrency: int = 1, progress: Callable[[str], None] | None = None,
                    size: str = "smoke", backend: str = "local", ray_address: str | None = None) -> dict:
    """Run the agent on each task (at most `concurrency` at once) and return records plus their summary.

    Each task's record is written atomically to out/records/<task>.json as soon as it is done; a task whose
    record is already there is not run again, so re-running the same command resumes an interrupted bench.
    backend "ray" runs each task as a Ray task (a local cluster, or the one at `ray_address`); the records, their
    folder and resuming are the same, and `ran_on` says which process made each.
    """
    from maxkernel.evals.stats import summarize

    progress = progress or (lambda _line: None)
    out = Path(out) if out else DEFAULT_OUT
    if concurrency < 1:
        raise BenchError("--concurrency must be at least 1")
    if backend not in ("local", "ray"):
        raise BenchError(f"unknown backend {backend!r}; choose local or ray")
    if backend == "ray":
        from maxkernel.search.ray_backend import ray_available

        why = ray_available()
        if why:
            raise BenchError(why)
    skipped = _check(tasks, mode, model, size)
    if skipped:
        progress(f"bench agent: skipping {len(skipped)} of {len(tasks)} tasks: {next(iter(skipped.values()))}")
        tasks = [t for t in tasks if t not in skipped]
    records = load_records(out)
    # A task that crashed (agent_error: a dead endpoint, a bug) is run again on resume; other results stand.
    retry = sorted(r["task"] for r in records if r.get("failure") == "agent_error" and r["task"] in tasks)
    done = {r["task"] for r in records} - set(retry)
    todo = [t for t in tasks if t not in done]
    progress(f"bench agent: {len(tasks)} tasks, {len(tasks) - len(todo)} already recorded in {out}, "
             f"{len(todo)} to run ({mode}, at most {concurrency} at once)"
             + (f"; retrying {len(retry)} that ended in agent_error: {', '.join(retry)}" if retry else ""))
    _write_json(out / "meta.json", {"mode": mode, "model": model, "size": size, "tasks": tasks,
                                    "skipped": [{"task": t, "reason": why} for t, why in skipped.items()]})

    def keep(task: str, rec: dict) -> dict:
        _write_json(out / "records" / f"{task}.json", rec)
        verdict = "CORRECT" if rec["correct"] else f"failed ({rec['failure']})"
        rank = rec.get("rank_speedup") or rec.get("speedup")
        speed = f", {rank:.3g}x vs XLA ({rec.get('rank_label') or 'measured'})" if rank else ""
        progress(f"[{task}] done: {verdict}{speed} in {rec['wall_s']:.0f} s")
        return rec

    def one(task: str) -> dict:
        from maxkernel.search.ray_backend import where

        progress(f"[{task}] started")
        rec = _record(task, mode, model, size, out, lambda line: progress(f"[{task}] {line}"))
        return keep(task, {**rec, "ran_on": where("local")})

    if backend == "ray" and todo:
        _on_ray(todo, (mode, model, size, str(out.resolve())), concurrency, ray_address, progress, keep)
    else:
        _on_threads(todo, concurrency, one)

    records = [r for r in load_records(out) if r["task"] in set(tasks)]
    summary = summarize(records)
    _write_json(out / "summary.json", summary)
    return {"out": str(out), "mode": mode, "model": model, "size": size, "backend": backend, "ran": todo,
            "resumed": [t for t in tasks if t in done], "tasks": records, "summary": summary,
            "skipped": [{"task": t, "reason": why} for t, why in skipped.items()]}
