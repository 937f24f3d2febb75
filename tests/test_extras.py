"""tests/_extras.py: a missing test dependency skips locally and fails in CI or under --require-extras."""

import sys

import _extras
import pytest
from _extras import OPTION, missing, need_binary, need_module


@pytest.fixture
def local(monkeypatch):
    """A developer's run: no CI variable, no --require-extras."""
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(_extras, "_required_by_option", False)


def test_the_option_reaches_the_helpers(request):
    assert _extras._required_by_option is request.config.getoption(OPTION)


@pytest.mark.parametrize("ci", ["", "0", "false", "False"])
def test_a_local_run_skips(local, monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.skip.Exception, match="needs the thing"):
        missing("needs the thing")


@pytest.mark.parametrize("ci", ["1", "true", "yes"])
def test_ci_fails(local, monkeypatch, ci):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception, match=r"needs the thing \[required: CI is set"):
        missing("needs the thing")


def test_require_extras_fails(local, monkeypatch):
    monkeypatch.setattr(_extras, "_required_by_option", True)
    with pytest.raises(pytest.fail.Exception, match="--require-extras"):
        need_module("maxkernel_no_such_module", extra="ray")


def test_need_module_and_need_binary(local):
    assert need_module("json") is sys.modules["json"]
    with pytest.raises(pytest.skip.Exception, match=r"maxkernel_no_such_module.*pip install -e '\.\[eval\]'"):
        need_module("maxkernel_no_such_module", extra="eval")
    assert need_binary("sh").endswith("/sh")
    with pytest.raises(pytest.skip.Exception, match="Debian package chromium"):
        need_binary("/nonexistent/chromium", package="chromium")
