import json
import math

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from data_prep.canonical import MAX_SAFE_INT, StrictJSONError, canonical_bytes, digest, loads_strict


def test_rfc8785_known_answer_numbers_strings_literals():
    text = (
        '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
        ' "literals": [null, true, false]}'
    )
    expected = (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        '"string":"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
    )
    assert canonical_bytes(loads_strict(text)) == expected.encode("utf-8")


def test_rfc8785_known_answer_key_order_is_utf16():
    obj = {
        "\u20ac": "Euro",
        "\r": "CR",
        "\ufb33": "Hebrew",
        "1": "One",
        "\U0001f600": "Smiley",
        "\u0080": "Ctl",
        "\u00f6": "o",
    }
    out = canonical_bytes(obj).decode("utf-8")
    keys = [k for k, _ in json.loads(out, object_pairs_hook=lambda p: p)]
    assert keys == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]


def test_digest_is_domain_separated_and_stable():
    assert digest("a/v1", {"x": 1}) == digest("a/v1", {"x": 1})
    assert digest("a/v1", {"x": 1}) != digest("b/v1", {"x": 1})
    assert digest("a/v1", {"x": 1, "y": 2}) == digest("a/v1", {"y": 2, "x": 1})
    assert digest("a/v1", {"x": 1}).startswith("sha256:") and len(digest("a/v1", {})) == 71


@pytest.mark.parametrize(
    "text,path,problem",
    [
        ('{"a": 1, "a": 2}', "$.a", "duplicate key"),
        ('{"x": {"b": [1, {"k": 1, "k": 2}]}}', "$.x.b[1].k", "duplicate key"),
        ('{"a": NaN}', "$", "non-finite"),
        ('{"a": Infinity}', "$", "non-finite"),
        ('{"a": -Infinity}', "$", "non-finite"),
        ('{"a": 1e400}', "$.a", "non-finite"),
        ('{"big": [9007199254740992]}', "$.big[0]", "outside"),
        ('{"neg": -9007199254740992}', "$.neg", "outside"),
        ('{"a": ', "$", "invalid JSON"),
    ],
)
def test_strict_parse_rejects_with_path(text, path, problem):
    with pytest.raises(StrictJSONError) as err:
        loads_strict(text)
    assert err.value.path == path
    assert problem in err.value.problem


def test_strict_parse_accepts_limits():
    assert loads_strict(f"[{MAX_SAFE_INT}, -{MAX_SAFE_INT}]") == [MAX_SAFE_INT, -MAX_SAFE_INT]


def test_lone_surrogate_is_refused():
    with pytest.raises(StrictJSONError):
        canonical_bytes({"a": "\ud800"})


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INT, max_value=MAX_SAFE_INT)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=6), children, max_size=4
        )
    ),
    max_leaves=20,
)


@settings(max_examples=600, deadline=None)
@given(json_values)
def test_fast_path_equals_rfc8785(value):
    assert canonical_bytes(value) == rfc8785.dumps(value)


def _small_floats(value):
    if isinstance(value, float):
        return abs(value) < 2**53
    if isinstance(value, list):
        return all(_small_floats(v) for v in value)
    if isinstance(value, dict):
        return all(_small_floats(v) for v in value.values())
    return True


@settings(max_examples=300, deadline=None)
@given(json_values.filter(_small_floats))
def test_canonical_roundtrip_is_fixed_point(value):
    # Floats of 2^53 and beyond print as integer literals, which strict parsing refuses (I-JSON).
    once = canonical_bytes(value)
    parsed = loads_strict(once)
    assert canonical_bytes(parsed) == once
    if isinstance(value, float) and not math.isnan(value):
        assert parsed == value


@settings(max_examples=3000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False) | st.floats(min_value=1e-5, max_value=1e17))
def test_float_fast_path_matches_ecmascript_formatting(x):
    assert canonical_bytes({"amount": x, "n": [x, -x]}) == rfc8785.dumps({"amount": x, "n": [x, -x]})


@pytest.mark.parametrize(
    "value,path",
    [
        ({"a": 2**53}, "$.a"),
        ({"a": [1, -(2**53)]}, "$.a[1]"),
        ([{"k": {"n": 2**60}}], "$[0].k.n"),
    ],
)
def test_canonical_refuses_unsafe_integers_with_path(value, path):
    with pytest.raises(StrictJSONError) as err:
        canonical_bytes(value)
    assert err.value.path == path


def test_strict_parse_reports_the_first_violation_path_after_fast_attempt():
    # the fast parse only notices that something is wrong; the slow one names where
    text = '{"ok": [1, 2], "deep": {"list": [{"a": 1}, {"b": 1, "b": 2}]}}'
    with pytest.raises(StrictJSONError) as err:
        loads_strict(text)
    assert err.value.path == "$.deep.list[1].b"
    assert loads_strict(b'{"a": {"b": [1.5, "x", null, true]}}') == {"a": {"b": [1.5, "x", None, True]}}


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["system", "user", "assistant"]), "content": st.text(max_size=20)}
        )
        | st.dictionaries(st.sampled_from(["role", "content", "name"]), json_values, max_size=3),
        max_size=4,
    )
)
def test_canonical_chat_equals_canonical_bytes(messages):
    from data_prep.canonical import canonical_chat

    try:
        want = canonical_bytes(messages)
    except StrictJSONError:
        with pytest.raises(StrictJSONError):
            canonical_chat(messages)
        return
    assert canonical_chat(messages) == want
