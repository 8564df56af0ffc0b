"""perfsuite.facts.schema: the one field type behind ``[tool.perfsuite]``, its gate policies and its backend options.

The property tests check that each table accepts exactly what its declared field allows, so a table cannot drift
back to a hand-written check of its own without failing here."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfsuite.facts import backend_options as options
from perfsuite.facts import config, schema
from perfsuite.facts.schema import Field
from perfsuite.verdict import confirm_config, policy

VALUES = st.one_of(st.booleans(), st.integers(-20_000, 20_000), st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from(["", "auto", "cell", "fail", "warn", "3m", "90s", "x", "refuse", "mark"]),
                   st.lists(st.sampled_from(["a", "b"]), max_size=2), st.none())


@pytest.mark.parametrize(("spec", "value", "facet", "phrase"), [
    (Field("int", minimum=1), True, "type", "an integer"),
    (Field("int", minimum=14), 13, "range", ">= 14"),
    (Field("float", minimum=0.01, maximum=1.0), 1.5, "range", "<= 1"),
    (Field("float", minimum=0.0, maximum=0.5, min_open=True), 0.0, "range", "> 0"),
    (Field("float"), math.nan, "type", "a number"),
    (Field("float"), math.inf, "type", "a number"),
    (Field("str", choices=("mp", "uni")), "ray", "choice", 'one of "mp", "uni"'),
    (Field("strs", choices=("float32",)), ["float32", "fp8"], "choice", 'one of "float32"'),
    (Field("strs"), [], "type", "a non-empty list of strings"),
    (Field("table"), {"x": [1]}, "type", "a table of string/number/boolean values"),
    (Field("duration"), "soon", "type", 'a duration such as "90s", "3m" or "1h"'),
])
def test_problem_names_the_first_facet_that_fails(spec, value, facet, phrase):
    assert spec.problem(value) == (facet, phrase)


@pytest.mark.parametrize(("spec", "value"), [
    (Field("int", minimum=0), 0), (Field("float", minimum=0.0, maximum=math.inf), math.inf),
    (Field("str", choices=("all",), fold_case=True), "ALL"), (Field("duration"), "1h30m"), (Field("bool"), False),
    (Field("table"), {"a": 1, "b": "x"}),
])
def test_allowed_values_have_no_problem(spec, value):
    assert spec.problem(value) is None


def test_expects_in_interval_and_in_words():
    f = Field("float", minimum=0.0, maximum=1024.0)
    assert f.expects() == "a number in [0, 1024]" and f.expects(words=True) == "a number from 0 to 1024"
    assert Field("float", minimum=0.0, maximum=0.5, min_open=True, max_open=True).expects(words=True) == \
        "a number in (0, 0.5)"
    assert Field("int", minimum=2).expects() == "an integer >= 2"
    assert Field("str", choices=("fail", "warn")).expects() == 'one of "fail", "warn"'
    with pytest.raises(ValueError, match="Field kind 'number'"):
        Field("number")


def test_checked_wording_of_the_perfsuite_tables():
    with pytest.raises(ValueError, match=r"^\[t\] n must be an integer >= 1, got 0$"):
        schema.checked("[t] n", 0, Field("int", minimum=1))
    with pytest.raises(KeyError, match=r"\[t\] d: 'fp8' is not one of float32, float16"):
        schema.checked("[t] d", ["float32", "fp8"], Field("strs", choices=("float32", "float16")), KeyError)
    assert schema.checked("[t] d", ["float32"], Field("strs")) == ("float32",)
    assert schema.first_unknown({"b": 1, "z": 2, "a": 3}, {"b"}) == "a"


def _accepts(parse, value) -> bool:
    try:
        parse(value)
    except ValueError:
        return False
    return True


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(sorted(policy._TOP_FIELDS)), value=VALUES)
def test_the_gate_table_accepts_what_its_fields_allow(key, value):
    spec = policy._TOP_FIELDS[key]
    assert _accepts(lambda v: policy.parse_config({key: v}), value) == (spec.problem(value) is None)


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(sorted(confirm_config.FIELDS)), value=VALUES)
def test_the_confirmation_keys_accept_what_their_fields_allow(key, value):
    spec = confirm_config.FIELDS[key]
    assert _accepts(lambda v: policy.parse_config({key: v}), value) == (spec.problem(value) is None)


@settings(max_examples=60, deadline=None)
@given(key=st.sampled_from(sorted(config._PREFLIGHT_FIELDS)), value=VALUES)
def test_the_preflight_table_accepts_what_its_fields_allow(key, value):
    spec = config._PREFLIGHT_FIELDS[key]
    assert _accepts(lambda v: config.parse({"preflight": {key: v}}, Path(".")), value) == (spec.problem(value) is None)


@settings(max_examples=80, deadline=None)
@given(backend=st.sampled_from(["onnxruntime-cpu", "onnxruntime-rocm", "vllm", "vllm-llm", "torch-compile"]),
       data=st.data())
def test_backend_options_accept_what_their_fields_allow(backend, data):
    key = data.draw(st.sampled_from(sorted(options.SCHEMAS[backend])))
    value = data.draw(VALUES)
    spec = options.SCHEMAS[backend][key]
    assert _accepts(lambda v: options.validate(backend, {key: v}), value) == (spec.problem(value) is None)


def test_every_table_declares_its_keys_as_fields():
    tables = [policy._TOP_FIELDS, confirm_config.FIELDS, config._PREFLIGHT_FIELDS, config._SCENARIO_FIELDS,
              *options.SCHEMAS.values()]
    assert all(isinstance(f, Field) for t in tables for f in t.values())
