"""The Pallas knowledge layer is generated from the installed jax: every name in the cheat sheet exists there,
every rename it reports holds there, and pallas_api answers old or misplaced spellings with the installed one."""

from __future__ import annotations

import importlib
import json
import re

import jax
import pytest

from maxkernel.knowledge import api, cheat_sheet, lookup
from maxkernel.knowledge.api import Rename, resolve
from maxkernel.settings import get_settings

pytestmark = pytest.mark.unit


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MAXKERNEL_CACHE_DIR", str(tmp_path))
    get_settings.cache_clear()
    api.api_table.cache_clear()
    yield tmp_path / "knowledge" / f"pallas-api-jax-{jax.__version__}.json"
    api.api_table.cache_clear()
    get_settings.cache_clear()


def test_every_name_in_the_cheat_sheet_exists_in_the_installed_jax():
    sheet = cheat_sheet()
    assert sheet.startswith(f"Pallas API of the installed jax {jax.__version__} ")
    names = re.findall(r"^  ((?:pl|pltpu)\.\w+)", sheet, re.M)
    assert len(names) >= 20 and "pl.pallas_call" in names and "pltpu.CompilerParams" in names
    missing = [n for n in names if resolve(n) is None]
    assert missing == [], f"names in the sheet that jax {jax.__version__} does not have: {missing}"


def test_every_reported_rename_holds_in_the_installed_jax():
    renames = api.verified_renames()
    assert renames, "no rename candidate holds: the table of older spellings needs a look"
    for r in renames:
        assert resolve(r["new"]) is not None, f"{r['new']} does not exist"
        if r["status"] == "removed":
            assert resolve(r["old"]) is None, f"{r['old']} still exists"
        else:  # deprecated: jax's own table says so
            alias, name = r["old"].split(".", 1)
            assert name in importlib.import_module(api.MODULES[alias])._deprecations
    sheet = cheat_sheet()
    assert all(f"{r['old']} -> {r['new']}" in sheet for r in renames)


def test_jaxs_own_deprecations_are_read_from_the_package():
    """pltpu.semaphore_wait moved to pl in this jax; the package says so, and the lookup passes it on."""
    found = {d["old"]: d for d in api.deprecations()}
    if "pltpu.semaphore_wait" not in found:
        pytest.skip(f"jax {jax.__version__} does not mark pltpu.semaphore_wait deprecated")
    assert found["pltpu.semaphore_wait"]["new"] == "pl.semaphore_wait"
    got = lookup("pltpu.semaphore_wait")
    assert got["name"] == "pl.semaphore_wait" and "is deprecated in" in got["note"]


def test_a_rename_that_does_not_hold_is_never_reported(fresh_cache, monkeypatch):
    monkeypatch.setattr(api, "RENAMES", (Rename("pl.BlockSpec", "pl.GridSpec"),  # the old name still exists
                                         Rename("pl.no_such_old", "pl.no_such_new"),  # the new one does not
                                         Rename("pltpu.TPUCompilerParams", "pltpu.CompilerParams")))
    kept = [r["old"] for r in api.verified_renames() if r["status"] == "removed"]
    assert kept == ["pltpu.TPUCompilerParams"]


@pytest.mark.parametrize("asked,name,renamed", [
    ("TPUCompilerParams", "pltpu.CompilerParams", "pltpu.TPUCompilerParams"),
    ("pltpu.TPUCompilerParams", "pltpu.CompilerParams", "pltpu.TPUCompilerParams"),
    ("tpu.repeat", "jnp.repeat", "pltpu.repeat"),
    ("pltpu.ANY", "pl.ANY", "pltpu.ANY"),
    ("pl.load", "pltpu.load", "pl.load"),
])
def test_an_old_spelling_is_answered_with_what_replaced_it(asked, name, renamed):
    got = lookup(asked)
    assert (got["name"], got["renamed_from"]) == (name, renamed), got
    assert f"does not exist in jax {jax.__version__}" in got["note"] and got["signature"]


@pytest.mark.parametrize("asked,name,imports", [
    ("pallas_call", "pl.pallas_call", "from jax.experimental import pallas as pl"),
    ("pltpu.ds", "pl.ds", "from jax.experimental import pallas as pl"),  # the wrong prefix is corrected
    ("CompilerParams", "pltpu.CompilerParams", "from jax.experimental.pallas import tpu as pltpu"),
    ("tpu.make_async_copy", "pltpu.make_async_copy", "from jax.experimental.pallas import tpu as pltpu"),
    ("jax.experimental.pallas.BlockSpec", "pl.BlockSpec", "from jax.experimental import pallas as pl"),
    ("lax.fori_loop", "lax.fori_loop", "from jax import lax"),
    ("pltpu.SemaphoreType.DMA", "pltpu.SemaphoreType.DMA", "from jax.experimental.pallas import tpu as pltpu"),
])
def test_installed_names_come_with_their_import(asked, name, imports):
    got = lookup(asked)
    assert (got["name"], got["import"]) == (name, imports), got
    assert "renamed_from" not in got
    if asked.split(".")[0] in ("pltpu",) and name.startswith("pl."):
        assert "the installed spelling is pl.ds" in got["note"]


def test_block_spec_takes_the_block_shape_first():
    """The positional order models get wrong (index_map first in old JAX): the installed signature says it."""
    assert lookup("BlockSpec")["signature"].startswith("(block_shape")


@pytest.mark.parametrize("asked", ["fooBarBaz", "", "   ", None, 12, "pl.", "pltpu.CompilerParams.nope"])
def test_unknown_or_junk_names_get_an_error_not_an_exception(asked):
    got = lookup(asked)
    assert "error" in got


def test_the_table_is_cached_per_jax_version_and_rebuilt_when_stale(fresh_cache):
    table = api.api_table()
    assert json.loads(fresh_cache.read_text())["jax"] == jax.__version__
    assert "pallas_call" in table["modules"]["pl"]
    fresh_cache.write_text(json.dumps({**table, "jax": "0.0.1", "renames": []}))  # another version's table
    api.api_table.cache_clear()
    assert api.api_table()["renames"] == table["renames"]
    fresh_cache.write_text("{ half a fi")  # a crash mid-write elsewhere
    api.api_table.cache_clear()
    assert api.api_table()["jax"] == jax.__version__


def test_the_implementer_and_debugger_get_the_sheet():
    from maxkernel.agents.sub_agents.debugger.prompt import _build as debugger
    from maxkernel.agents.sub_agents.implementer.prompt import _build as implementer

    state = {"task": "12p_RMSNorm", "chip": "v5e"}
    for build in (implementer, debugger):
        text = build(state)
        assert f"Pallas API of the installed jax {jax.__version__}" in text and "pltpu.CompilerParams(" in text
