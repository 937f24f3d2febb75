"""Shared test set-up: CPU-only JAX, a private reference cache, a shared sandboxed evaluator, and a run that
fails when it leaves files behind."""

import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # several test processes may compile at once
# A TPU estimate costs several profiled compiles per correct verdict: off for the suite, on in the tests of it
# (tests/test_estimate.py, and those that pass estimate=True or set MAXKERNEL_ESTIMATE themselves).
os.environ.setdefault("MAXKERNEL_ESTIMATE", "false")
# References computed by the tests go to a cache of their own, never the user's; one made here goes at the end.
_OWN_CACHE = None if os.environ.get("MAXKERNEL_TEST_CACHE_DIR") else tempfile.mkdtemp(prefix="mk-test-cache-")
os.environ["MAXKERNEL_CACHE_DIR"] = os.environ.get("MAXKERNEL_TEST_CACHE_DIR") or _OWN_CACHE

import pytest  # noqa: E402

import _extras  # noqa: E402  (tests/ is on sys.path: pytest puts a conftest's folder there)
import _tree_guard  # noqa: E402

_REPO = Path(__file__).resolve().parents[1]
_BEFORE = pytest.StashKey[dict]()
_LEFT = pytest.StashKey[list]()


def pytest_addoption(parser):
    parser.addoption(_extras.OPTION, action="store_true",
                     help="fail, not skip, a test whose dependency (a dev extra such as ray or google-adk[eval], "
                          "chromium, libtpu) is missing; CI set to anything but 0/false does the same")


def pytest_configure(config):
    _extras.set_required(config.getoption(_extras.OPTION))


def pytest_unconfigure(config):
    if _OWN_CACHE:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


def pytest_sessionstart(session):
    if hasattr(session.config, "workerinput"):
        return  # a pytest-xdist worker: the controller's snapshot covers the whole run
    before = _tree_guard.snapshot(_REPO)  # None outside a git checkout: nothing to compare against
    if before is not None:
        session.config.stash[_BEFORE] = before


def pytest_sessionfinish(session, exitstatus):
    """A run that wrote into the checkout or the hostile kernels' targets fails, even if every test passed."""
    before = session.config.stash.get(_BEFORE, None)
    after = _tree_guard.snapshot(_REPO) if before is not None else None
    left = _tree_guard.changes(before, after) if after is not None else []
    if left:
        session.config.stash[_LEFT] = left
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    left = config.stash.get(_LEFT, [])
    if left:
        terminalreporter.section("files that appeared or changed during the run", red=True)
        for line in left:
            terminalreporter.write_line(line)
        terminalreporter.write_line("A test wrote outside its tmp_path (or the checkout was edited during the run): "
                                    "give it a path under tmp_path, or have it clean up.", red=True)


@pytest.fixture(scope="session")
def evaluator():
    """One evaluator with two pre-started sandboxed workers (the candidate's and the judge's), shared by every test
    that judges kernels."""
    from maxkernel.harness.verdict.evaluate import Evaluator
    from maxkernel.harness.sandbox.pool import WorkerPool

    with Evaluator(WorkerPool(size=2)) as ev:
        yield ev


@pytest.fixture(autouse=True)
def _sandbox_env_left_alone():
    """A test that leaves a variable the sandbox passes to its jobs changed (pool._ENV_PASS) changes every later job
    of its process: a unit test that ran the estimate-compile job in-process left LIBTPU_INIT_ARGS naming an LLO
    profile dump, and every later compile of that pytest worker dumped profiles and died out of memory (CI, twice).
    The variable is put back and the test fails."""
    from maxkernel.harness.sandbox.pool import _ENV_PASS

    before = {k: os.environ.get(k) for k in _ENV_PASS}
    yield
    changed = sorted(k for k, v in before.items() if os.environ.get(k) != v)
    for k in changed:
        if before[k] is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = before[k]
    if changed:
        pytest.fail(f"the test left {', '.join(changed)} changed in os.environ, which every later sandboxed job of "
                    "this process inherits: use monkeypatch.setenv")


@pytest.fixture(autouse=True)
def _unit_tier_is_light(request, monkeypatch):
    """Tests marked `unit` may not start sandboxed jobs or libtpu compiles (tests/_tiers.py)."""
    if request.node.get_closest_marker("unit") is not None:
        from _tiers import forbid_heavy_work

        forbid_heavy_work(monkeypatch)
    yield
