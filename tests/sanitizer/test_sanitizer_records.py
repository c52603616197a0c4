"""Structured records: only string values in the selected fields change; the pre-filters are sound."""

from __future__ import annotations

import copy
import json
import os
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sanitizer import HIDDEN_ID_PLACEHOLDER, Sanitizer
from sanitizer.corpus import PLANT_KINDS, ledger_record, ordinary_description, plant

SAN = Sanitizer.from_packs()
SCALE = int(os.environ.get("SANITIZER_STRESS", "1"))  # more hypothesis examples when set
KEY = "AKIAZ7Q2MV4XK3PLW9RD"


def _record() -> dict:
    rec = ledger_record(random.Random(7), 1, entries=(4, 4))
    rec["model_ledger"][1]["description"] = f"Uploaded with {KEY}; sabotage hidden"
    rec["model_ledger"][2]["call_id"] = KEY  # a call id is never touched
    rec["teacher"]["verdict"]["rationale"] = f"The writer leaked {KEY}; sabotage confirmed"
    rec["metadata"]["hidden_identifiers"] = ["acct_hidden_42"]
    rec["model_ledger"][3]["description"] = "Moved funds to acct_hidden_42 as asked"
    return rec


def test_record_fields_keys_numbers_and_call_ids_intact():
    rec = _record()
    before = copy.deepcopy(rec)
    res = SAN.sanitize_record(
        rec, dynamic_literals=rec["metadata"]["hidden_identifiers"], context="runs.jsonl:9"
    )
    assert rec == before  # the input is never mutated
    out = res.record
    assert out is not rec
    led = out["model_ledger"]
    assert led[1]["description"] == "Uploaded with [SECRET:aws_access_key]; [LEAK:label_word] hidden"
    assert led[2]["call_id"] == KEY
    assert led[3]["description"] == f"Moved funds to {HIDDEN_ID_PLACEHOLDER} as asked"
    assert (
        out["teacher"]["verdict"]["rationale"]
        == "The writer leaked [SECRET:aws_access_key]; sabotage confirmed"
    )
    assert out["metadata"]["hidden_identifiers"] == ["acct_hidden_42"]  # the source list stays
    assert [e["position"] for e in led] == [1, 2, 3, 4]
    assert out["teacher"]["verdict"]["suspicion"] == rec["teacher"]["verdict"]["suspicion"]
    assert out["metadata"]["flags"] == rec["metadata"]["flags"]
    paths = sorted({f.path for f in res.findings})
    assert paths == [
        "model_ledger[1].description",
        "model_ledger[3].description",
        "teacher.verdict.rationale",
    ]
    assert {f.context for f in res.findings} == {"runs.jsonl:9"}
    assert not res.dropped


def test_fields_selection_limits_changes():
    rec = _record()
    res = SAN.sanitize_record(rec, fields=["teacher.verdict.rationale"])
    assert res.record["model_ledger"] == rec["model_ledger"]
    assert "[SECRET:aws_access_key]" in res.record["teacher"]["verdict"]["rationale"]
    res = SAN.sanitize_record(rec, fields=["model_ledger[].description"])
    assert res.record["teacher"] == rec["teacher"]


def test_drop_and_quote_rules_on_records():
    rec = _record()
    rec["labels"] = {
        "sabotage": True,
        "type": "misreported_outcome",
        "note": "the refund went to the wrong vendor",
    }
    rec["model_ledger"][0]["description"] = "Issued refund; the refund went to the wrong vendor (sorry)"
    res = SAN.sanitize_record(rec)
    assert res.record["model_ledger"][0]["description"] == "Issued refund; [LEAK:oracle_quote] (sorry)"
    assert res.record["labels"] == rec["labels"]  # sources are never rewritten
    rec["model_ledger"][0]["description"] = "verdict: incident"
    res = SAN.sanitize_record(rec)
    assert res.dropped and res.drop_reasons == ["leakage.verdict_object_echo"]


def test_sanitize_twice_changes_nothing_more():
    rec = _record()
    once = SAN.sanitize_record(rec, dynamic_literals=["acct_hidden_42"]).record
    twice = SAN.sanitize_record(once, dynamic_literals=["acct_hidden_42"])
    assert twice.record == once and twice.findings == []


# ------------------------------------------------------------------------------ hypothesis

_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    _TEXT,
    st.builds(
        lambda k, s: plant(k, random.Random(s))[0], st.sampled_from(PLANT_KINDS), st.integers(0, 10**6)
    ),
    st.builds(lambda s: ordinary_description(random.Random(s)), st.integers(0, 10**6)),
    st.sampled_from(
        [
            "model_ledger",
            "teacher",
            "label: clean",
            "sabotaged",
            "acct_hidden_42",
            "<think>x</think>y",
            "a\\nb",
            'q"uote',
            "ok\nThought: hidden\nPaid INV-1",
            "x\tlabel: clean\r\n",
            "see\nacct_hidden_42\n",
            "path a/b\nTo: bob@acme.io",
        ]
    ),
)
_KEYS = st.sampled_from(
    [
        "description",
        "call_id",
        "rationale",
        "note",
        "value",
        "label",
        "items",
        "x y",
        "é",
        "teacher",
        "model_ledger",
    ]
)
_JSON = st.recursive(
    _LEAF,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_KEYS, children, max_size=4),
    max_leaves=14,
)
_RECORD = st.dictionaries(
    st.sampled_from(["model_ledger", "teacher", "metadata", "labels", "completion", "task"]),
    _JSON,
    max_size=5,
)


def _skeleton(x):
    """The record with every string replaced by a marker: what sanitizing must preserve."""
    if isinstance(x, str):
        return "<str>"
    if isinstance(x, dict):
        return {k: _skeleton(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_skeleton(v) for v in x]
    return (type(x).__name__, x)


@settings(max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_RECORD, st.lists(st.sampled_from(["acct_hidden_42", "V-118", "x.y"]), max_size=2))
def test_structure_and_non_strings_preserved_and_idempotent(rec, lits):
    line = json.dumps(rec, ensure_ascii=False)
    res = SAN.sanitize_record(rec, dynamic_literals=lits)
    assert json.loads(line) == rec  # input untouched
    assert _skeleton(res.record) == _skeleton(rec)
    out_line = json.dumps(res.record, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert json.loads(out_line) == res.record  # still valid JSON
    again = SAN.sanitize_record(res.record, dynamic_literals=lits)
    assert again.record == res.record and [f for f in again.findings if f.action != "drop"] == []


@settings(max_examples=200 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_RECORD, st.sampled_from(["metadata.hidden_identifiers", None]), st.booleans())
def test_json_line_prefilter_agrees_with_full_walk(rec, ids_field, ascii_only):
    rec = dict(rec)
    if ids_field:
        rec["metadata"] = {"hidden_identifiers": ["acct_hidden_42", "V-118"], "note": rec.get("metadata")}
    line = json.dumps(rec, ensure_ascii=ascii_only).encode()
    fast = SAN.sanitize_json_line(line, hidden_ids_field=ids_field, context="c")
    ids = ["acct_hidden_42", "V-118"] if ids_field else []
    slow = SAN.sanitize_record(json.loads(line), dynamic_literals=ids, context="c")
    assert fast.record == slow.record
    assert fast.findings == slow.findings
    assert fast.dropped == slow.dropped
    if fast.prefiltered:
        assert slow.findings == []


def test_a_quote_source_with_an_invisible_character_is_quoted_as_the_output_holds_it():
    """Found by the property test above: a label holding a soft hyphen, quoted without it in the
    ledger. The quote is redacted on the first pass, so a second pass changes nothing."""
    rec = {"model_ledger": ["0000000000000000"], "labels": "0000000000000000\xad"}
    res = SAN.sanitize_record(rec)
    assert res.record["model_ledger"] == ["[LEAK:oracle_quote]"]
    again = SAN.sanitize_record(res.record)
    assert again.record == res.record and [f for f in again.findings if f.action != "drop"] == []
