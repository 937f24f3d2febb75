"""Shared test set-up: CPU-only JAX, a private reference cache, and a shared sandboxed evaluator."""

import os
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # several test processes may compile at once
# References computed by the tests go to a cache of their own, never the user's.
os.environ["MAXKERNEL_CACHE_DIR"] = os.environ.get("MAXKERNEL_TEST_CACHE_DIR") or tempfile.mkdtemp(prefix="mk-test-cache-")

import pytest  # noqa: E402

import _extras  # noqa: E402  (tests/ is on sys.path: pytest puts a conftest's folder there)


def pytest_addoption(parser):
    parser.addoption(_extras.OPTION, action="store_true",
                     help="fail, not skip, a test whose dependency (a dev extra such as ray or google-adk[eval], "
                          "chromium, libtpu) is missing; CI set to anything but 0/false does the same")


def pytest_configure(config):
    _extras.set_required(config.getoption(_extras.OPTION))


@pytest.fixture(scope="session")
def evaluator():
    """One evaluator with one pre-started sandboxed worker, shared by every test that judges kernels."""
    from maxkernel.harness.evaluate import Evaluator
    from maxkernel.harness.sandbox import WorkerPool

    with Evaluator(WorkerPool(size=1)) as ev:
        yield ev
