"""`maxkernel optimize` end to end: the replay model through the real Runner, tools and harness; usage errors."""

import json
import re
from pathlib import Path

import pytest
from _optimize_helpers import agent_env, in_process, mk


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def replay_run(tmp_path_factory):
    """One optimize run on 12p_RMSNorm with the replay model, as a newcomer types it (smoke size, the default on a
    CPU; TPU estimates on, as by default), copying the answer to --out."""
    base = tmp_path_factory.mktemp("optimize")
    out = base / "out"
    # cwd is a scratch folder so no developer .env can supply credentials or settings; PYTHONPATH: the child
    # imports this checkout, whatever copy an editable install points at.
    env = {**agent_env(base / "data"), "PYTHONPATH": str(ROOT), "MAXKERNEL_ESTIMATE": "true"}
    r = mk("optimize", "--task", "12p_RMSNorm", "--model", "replay", "--out", str(out), "--json", env=env, cwd=base,
           timeout=1400)
    return r, out


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(1500)  # the module's optimize run, estimates included, is paid by whichever test comes first
def test_replay_run_answers_a_correct_kernel_with_its_costs(replay_run):
    r, out = replay_run
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)  # exactly one JSON document on stdout
    assert doc["status"] == "correct"
    assert doc["kernel"] == str((out / "kernel.py").resolve()) and (out / "kernel.py").is_file()
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict == doc["verdict"] and verdict["status"] == "correct"
    assert verdict["correctness"]["seeds"][0] >= 1000  # the held-out seeds, not the ones the agent saw
    assert doc["iterations"] == 1 and doc["llm_calls"] > 0 and doc["tokens"] > 0 and doc["cost_usd"] == 0.0
    assert doc["replay"] is True and doc["model"] == "replay" and "replay" in doc["model_label"]
    assert doc["session_id"]
    # Progress went to stderr: the replay label, the sub-agents and their tool calls.
    assert "model: replay (offline replay model" in r.stderr
    assert "implementer -> write_file(" in r.stderr and "debugger:" in r.stderr
    # The debug round's line carries the compiler's reason, not just the heading of a multi-line message.
    assert re.search(r"Debug round 1: compile_kernel for v5e failed: \S", r.stderr), r.stderr[-3000:]


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_answer_is_priced_and_said_whole_with_path_verdict_and_estimate(replay_run):
    """A new user's first answer: the kernel's path, its held-out verdict and its TPU estimate against XLA's, in
    the JSON, at the end of the text and in the agent's own last answer."""
    from maxkernel.optimize import render_text

    r, out = replay_run
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    kernel = out / "kernel.py"
    assert doc["status"] == "correct" and doc["kernel"] == str(kernel.resolve()) and kernel.is_file()
    assert Path(doc["workspace_kernel"]).read_text() == kernel.read_text()
    est = doc["verdict"]["estimate"]
    assert est["ok"] and est["chip"] == "v5e", est
    summary = doc["summary"]
    assert summary.startswith(f"returned kernel {kernel.resolve()}: held-out verdict CORRECT; "), summary
    assert f"TPU estimate on v5e: {est['estimated_ms']:.3g} ms vs XLA {est['baseline_estimated_ms']:.3g} ms" in summary
    assert f"{est['speedup_estimate']:.3g}x" in summary and "…" not in summary
    assert render_text(doc).splitlines()[-1] == summary  # the text ends with it, whole
    assert "TPU estimate on v5e" in r.stderr.split("Done (")[-1]  # and so does the agent's own last answer


@pytest.mark.integration
@pytest.mark.slow
def test_the_answer_is_rejudged_correct_by_evaluate(replay_run, tmp_path):
    _, out = replay_run
    r = mk("evaluate", "--task", "12p_RMSNorm", "--kernel", str(out / "kernel.py"), "--json",
           env=agent_env(tmp_path / "data"), cwd=tmp_path)  # no .env of the checkout is read
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["status"] == "correct"


def test_gemini_without_credentials_exits_2_before_any_work(tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    code, out, err = in_process(["optimize", "--task", "12p_RMSNorm", "--model", "gemini-2.5-flash", "--json"],
                                 data, tmp_path, monkeypatch, capsys)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "GOOGLE_API_KEY" in lines[0] and "--model replay" in lines[0]
    assert not data.exists()  # no session store, workspace or artifact was created


@pytest.mark.parametrize("args,needle", [
    (["--mode", "hitl", "--model", "replay"], "adk web"),
    (["--task", "no_such_task", "--model", "replay"], "unknown task"),
    (["--task", "2p_GQA_Attention", "--model", "replay"], "recordings only for"),
])
def test_usage_errors_exit_2_with_one_line(tmp_path, monkeypatch, capsys, args, needle):
    if "--task" not in args:
        args = ["--task", "12p_RMSNorm", *args]
    data = tmp_path / "data"
    code, out, err = in_process(["optimize", *args], data, tmp_path, monkeypatch, capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err
    assert not data.exists()


@pytest.mark.integration
@pytest.mark.slow
def test_optimize_works_on_a_task_folder_outside_the_suite(tmp_path):
    """A task given as a folder (here a copy of the suite's RMSNorm, so the replay model has turns for it) goes
    through the whole loop: the folder is handed to every sandboxed job, and the answer is judged on it."""
    import shutil

    from maxkernel.tasks import load_task

    folder = tmp_path / "mine" / "12p_RMSNorm"
    folder.mkdir(parents=True)
    shutil.copy(load_task("12p_RMSNorm").baseline_file, folder / "baseline.py")  # no shipped reference kernel
    assert load_task(str(folder)).source == "folder"
    r = mk("optimize", "--task", str(folder), "--model", "replay", "--size", "smoke", "--out", str(tmp_path / "out"),
           "--json", env=agent_env(tmp_path / "data"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["status"] == "correct" and doc["verdict"]["task"] == "12p_RMSNorm", doc.get("verdict")
