"""What estimate_program's sandboxed job hands back is checked before it becomes a task folder: the job ran the
client's code, so its result names only the folder it was told to write, regular .py/.json files in it, a
baseline.py, and notes that are lines; a link it planted is not followed."""

import json
import os
import types

import pytest

from maxkernel.tasknew.program_sandboxed import _take
from maxkernel.tasknew.specs import SpecError

pytestmark = pytest.mark.unit

KEY = "ab" * 32
NAME = "program_scale"


def job(tmp_path, files: dict, result: dict | None = None, status: str = "ok"):
    folder = tmp_path / "out" / KEY[:16] / NAME
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    result = result if result is not None else {"status": "ok", "folder": f"out/{KEY[:16]}/{NAME}",
                                                "files": sorted(files)}
    return types.SimpleNamespace(status=status, result=result, scratch=tmp_path, stderr_tail="")


GOOD = {"baseline.py": "x = 1\n", "program.json": json.dumps(["a note"]), "arguments.json": '["f32[8]"]'}


def test_an_honest_jobs_folder_is_taken(tmp_path):
    taken, notes = _take(job(tmp_path, GOOD), KEY, NAME)
    assert set(taken) == set(GOOD) and notes == ["a note"]


@pytest.mark.parametrize("change, says", [
    ({"folder": "out/elsewhere/program_scale"}, "not out/"),
    ({"files": ["../../etc/passwd.py"]}, "no program folder has"),
    ({"files": [".hidden.py", "baseline.py", "program.json"]}, "no program folder has"),
    ({"files": ["program.json"]}, "no baseline.py"),
    ({"spec_error": "f32[x]: not a size"}, "not a size"),
])
def test_a_forged_result_is_refused(tmp_path, change, says):
    res = job(tmp_path, GOOD, {"status": "ok", "folder": f"out/{KEY[:16]}/{NAME}", "files": sorted(GOOD), **change})
    with pytest.raises(SpecError, match=says.replace("(", r"\(").replace(".", r"\.")):
        _take(res, KEY, NAME)


@pytest.mark.parametrize("files, says", [
    ({**GOOD, "program.json": '{"not": "a list"}'}, "not a list of lines"),
    ({**GOOD, "arguments.json": "[1, 2]"}, "not a list of specs"),
])
def test_notes_and_arguments_must_be_lines(tmp_path, files, says):
    with pytest.raises(SpecError, match=says):
        _take(job(tmp_path, files), KEY, NAME)


def test_a_link_the_job_planted_is_not_followed(tmp_path):
    secret = tmp_path / "secret.py"
    secret.write_text("TOKEN = 'x'\n")
    res = job(tmp_path, GOOD, {"status": "ok", "folder": f"out/{KEY[:16]}/{NAME}",
                               "files": [*sorted(GOOD), "link.py"]})
    os.symlink(secret, tmp_path / "out" / KEY[:16] / NAME / "link.py")
    with pytest.raises(SpecError, match="could not be taken"):
        _take(res, KEY, NAME)


def test_a_job_that_failed_is_a_spec_error_naming_why(tmp_path):
    res = job(tmp_path, {}, {"status": "error", "error": "ImportError: no module named torch"}, status="ok")
    with pytest.raises(SpecError, match="no module named torch"):
        _take(res, KEY, NAME)
