"""Issue 34: idioms of library-style Pallas code (jax's own ops use them) that the static screen refused outright.
Each is admitted in its honest form only; beside each honest case, a hostile one that is still caught, with a reason
that names the line and what to change (maxkernel/harness/sandbox/idioms.py, docs/verdict.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from maxkernel.harness.sandbox.static_check import check_file, check_source

IDIOMS = Path(__file__).parent / "kernels" / "idioms"

SETATTR = '''import dataclasses
{imports}
@dataclasses.dataclass(frozen=True)
class Blocks:
    rows: int
    steps: int = 0

    def __post_init__(self):
        object.__setattr__({target}, {field}, {value})


def workload(x):
    return x
'''


@pytest.mark.unit
def test_a_frozen_dataclass_may_set_its_own_field_in_post_init():
    assert check_source(SETATTR.format(imports="", target="self", field='"steps"', value="self.rows // 8")) is None


@pytest.mark.unit
@pytest.mark.parametrize("imports,target,field,value", [
    ("import jax.numpy as jnp", "jnp", '"exp"', "jnp.sin"),  # patching a module
    ("", "self", "name", "1"),  # a field named at run time
    ("", "self", '"_private"', "1"),  # a private slot
    ("import jax", "jax.numpy", '"exp"', "None"),
])
def test_object_setattr_on_anything_else_is_refused_with_the_form_allowed(imports, target, field, value):
    why = check_source(SETATTR.format(imports=imports, target=target, field=field, value=value))
    assert why and "line 9" in why and "object.__setattr__(self, \"field\", value)" in why, why


@pytest.mark.unit
def test_object_setattr_outside_post_init_is_refused():
    source = "import jax.numpy as jnp\n\ndef workload(x):\n    object.__setattr__(jnp, 'exp', jnp.sin)\n    return x\n"
    assert "line 4" in check_source(source)


INTERPRET = '''import jax
from jax.experimental import pallas as pl


def _body(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def run(x, {flag}):
    return pl.pallas_call(_body, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype), interpret=interpret)(x)


def workload(x):
    return run(x)
'''


@pytest.mark.unit
@pytest.mark.parametrize("flag", ["*, interpret=False", "interpret=None", "interpret: bool = False"])
def test_an_interpret_flag_passed_through_from_a_false_default_is_admitted(flag):
    assert check_source(INTERPRET.format(flag=flag)) is None


@pytest.mark.unit
@pytest.mark.parametrize("flag", ["interpret=True", "interpret", "interpret=1", "*, interpret=0"])
def test_an_interpret_flag_without_a_false_default_is_refused(flag):
    why = check_source(INTERPRET.format(flag=flag))
    assert why and "line 10" in why and "defaults to False or None" in why, why


@pytest.mark.unit
@pytest.mark.parametrize("source,ok", [
    ('import jax\n\ndef workload(x):\n    with jax.default_matmul_precision("highest"):\n        return x @ x\n', True),
    ('import jax\n\ndef workload(x):\n    jax.default_matmul_precision("highest").__enter__()\n    return x @ x\n', False),
    ('import jax\np = jax.default_matmul_precision\n\ndef workload(x):\n    with p("highest"):\n        return x\n', False),
    ('import jax\n\ndef workload(x):\n    with jax.default_matmul_precision(x):\n        return x @ x\n', False),
    ('import jax\n\ndef workload(x):\n    jax.config.update("jax_default_matmul_precision", "highest")\n    return x\n',
     False),
])
def test_a_precision_context_manager_is_admitted_only_as_a_with_block(source, ok):
    why = check_source(source)
    assert (why is None) == ok, why
    if not ok:
        assert "line" in why


@pytest.mark.unit
@pytest.mark.parametrize("source,ok", [
    ("from jax._src import dtypes\n", True),
    ("from jax._src.util import safe_zip\n", True),
    ("import jax._src.dtypes as d\n", True),
    ("from jax._src import dtypes, config\n", False),  # settings
    ("from jax._src import config\n", False),
    ("from jax._src.pallas.mosaic.interpret import interpret_pallas_call\n", False),  # the interpreter's state
    ("import jax._src.core\n", False),
    ("import jax\nd = jax._src.dtypes\n", False),  # by attribute: never
])
def test_only_the_pure_helper_modules_of_jax_src_are_importable(source, ok):
    why = check_source(source + "\n\ndef workload(x):\n    return x\n")
    assert (why is None) == ok, why
    if not ok:
        assert "line" in why


@pytest.mark.unit
def test_the_idiom_kernels_pass_the_screen():
    """Both pass the static screen: the hostile one's interpret flag is set positionally, out of its sight, so the
    traced program is where it is caught (next test)."""
    assert check_file(IDIOMS / "honest_rmsnorm.py") is None and check_file(IDIOMS / "hostile_interpret.py") is None


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_honest_idioms_are_correct_and_an_interpret_flag_set_to_true_is_rejected(evaluator):
    v = evaluator.evaluate("12p_RMSNorm", IDIOMS / "honest_rmsnorm.py")
    assert v.status == "correct", v.model_dump_json(indent=1)
    v = evaluator.evaluate("12p_RMSNorm", IDIOMS / "hostile_interpret.py")
    assert v.status == "rejected" and "asks for interpret=True" in v.reason, v.model_dump_json(indent=1)
