"""Hand-offs between a job and the parent while the job runs: the parent drops a JSON file into the job's scratch
folder (written to a temporary name, then renamed, so it appears whole) and the job waits for it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

__all__ = ["post", "wait_for", "INPUTS_MADE", "INPUTS_READY", "JUDGE_READY", "TIME_GO", "JUDGE_GO"]

INPUTS_MADE = "inputs.made.json"  # judge -> parent: the inputs are written (references still to come)
INPUTS_READY = "inputs.ready.json"  # parent -> candidate: the inputs are in your scratch (or: abort)
JUDGE_READY = "judge.ready.json"  # judge -> parent: references and calibration are written, the judge is idle
TIME_GO = "time.go.json"  # parent -> candidate: the judge is idle; time now (or: abort)
JUDGE_GO = "judge.go.json"  # parent -> judge: the candidate is done; time the baseline, census this lowering


def post(folder: Path, name: str, payload: dict) -> None:
    tmp = Path(folder) / f".{name}.{os.getpid()}.{time.monotonic_ns()}"
    tmp.write_text(json.dumps(payload))
    tmp.replace(Path(folder) / name)


def wait_for(folder: Path, name: str, poll_s: float = 0.005, give_up=None) -> dict | None:
    """The payload of `name` once it appears in `folder`; None when `give_up()` turns true first."""
    path = Path(folder) / name
    while True:
        if path.is_file() and not path.is_symlink():
            try:
                return json.loads(path.read_text())
            except FileNotFoundError:  # the folder went with its worker (a kill or a cancel): ask give_up again
                pass
        if give_up is not None and give_up():
            return None
        time.sleep(poll_s)
