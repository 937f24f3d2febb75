"""The unit tier's guard holds: inside a unit test, a sandboxed job or a libtpu compile raises."""

import pytest

pytestmark = pytest.mark.unit


def test_a_unit_test_cannot_start_a_sandbox_job():
    from maxkernel.harness.sandbox import pool as sandbox

    with pytest.raises(AssertionError, match="marked unit ran a sandboxed job"):
        sandbox.run_job({"kind": "candidate"})
    with pytest.raises(AssertionError, match="started a sandboxed worker"):
        sandbox.WorkerPool(size=1).acquire()


def test_a_unit_test_cannot_compile_with_libtpu():
    from maxkernel import chips
    from maxkernel.harness.jobs import compile_job

    with pytest.raises(AssertionError, match="started a libtpu compile"):
        compile_job._topology_device(chips.get("v5e"))
