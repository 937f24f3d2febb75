"""Reading the agent's answer and bucketing verdicts: the parts of re-judging that need no harness run."""

import pytest

from maxkernel.evals.judging import failure_category, find_kernel, find_task_and_size, judge_kernel, speedup_spread

pytestmark = pytest.mark.unit


def test_the_kernel_is_read_from_the_orchestrators_answer():
    final = ("Done (2 iterations without a faster kernel). Best kernel: /data/ws/abc/best_kernel.py from iteration 2, "
             "re-judged on held-out seeds [7919, 7920, 7921]: CORRECT — matches")
    assert find_kernel(["Iteration 1: planning.", final]) == "/data/ws/abc/best_kernel.py"
    assert find_kernel(["Best kernel: /a b/best_kernel.py from iteration 1"]) == "/a b/best_kernel.py"
    assert find_kernel(["Best kernel: /x/k.py", "Best kernel: /y/k.py"]) == "/y/k.py"  # the last answer wins
    assert find_kernel(["Done (budget used) without a kernel the harness judged correct."]) is None


def test_task_and_size_come_from_the_request():
    assert find_task_and_size(["optimize 12p_RMSNorm smoke"]) == ("12p_RMSNorm", "smoke")
    assert find_task_and_size(["please optimize 8p_GEMM at full size"]) == ("8p_GEMM", "full")
    assert find_task_and_size(["optimize 8p_GEMM", "go on"]) == ("8p_GEMM", "smoke")
    assert find_task_and_size(["hello"]) == (None, "smoke")
    # The real-world suite's tasks by name too: bench agent over it asked the auto root "optimize rw_rglru_scan
    # smoke", and the root answered "Which task?" for every one of them.
    assert find_task_and_size(["optimize rw_rglru_scan smoke"]) == ("rw_rglru_scan", "smoke")
    assert find_task_and_size(["optimize rw_no_such_op"]) == (None, "smoke")


@pytest.mark.parametrize("verdict, bucket", [
    ({"status": "correct"}, None),
    ({"status": "error", "stage": "import"}, "compile"),
    ({"status": "error", "stage": "trace"}, "compile"),
    ({"status": "error", "stage": "compile"}, "compile"),
    ({"status": "error", "stage": "run"}, "runtime"),
    ({"status": "error", "stage": "sandbox"}, "runtime"),
    ({"status": "incorrect"}, "incorrect"),
    ({"status": "timeout"}, "timeout"),
    ({"status": "rejected"}, "rejected"),
    (None, "no_kernel"),
])
def test_verdicts_fall_into_the_fields_failure_buckets(verdict, bucket):
    assert failure_category(verdict) == bucket


def test_speedup_spread_brackets_the_median():
    v = {"baseline": {"samples_ms": [10, 11, 12, 13]}, "kernel": {"samples_ms": [5, 5.5, 6, 6.5]}}
    low, high = speedup_spread(v)
    assert low < 11.5 / 5.75 < high
    assert speedup_spread({"baseline": None, "kernel": None}) == (None, None)


def test_a_missing_kernel_is_judged_without_running_anything(tmp_path):
    j = judge_kernel("12p_RMSNorm", None, "smoke")
    assert (j.status, j.failure, j.correct) == ("no_kernel", "no_kernel", False)
    j = judge_kernel("12p_RMSNorm", tmp_path / "gone.py", "smoke")
    assert j.failure == "no_kernel" and "does not exist" in j.reason
