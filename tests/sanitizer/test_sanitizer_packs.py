"""Rule packs: every pack loads, every rule's own examples pass, bad rules are refused at load."""

from __future__ import annotations

import textwrap

import pytest

from sanitizer import DEFAULT_PACKS, RuleError, Sanitizer, check_rule, load_pack, load_packs
from sanitizer.rules import PII_CLASSES

ALL_RULES = [r for p in load_packs(DEFAULT_PACKS) for r in p.rules]


def test_every_pack_loads_and_self_tests():
    san = Sanitizer.from_packs(["reasoning", "secrets", "leakage"])
    packs = {r.pack for r in san.rules}
    assert packs == {"reasoning", "secrets", "leakage"}
    assert len(san.rules) == len(ALL_RULES) >= 20
    assert san.self_test() == []


@pytest.mark.parametrize("rule", ALL_RULES, ids=[r.id for r in ALL_RULES])
def test_rule_examples_pass(rule):
    assert rule.positive and rule.negative
    assert check_rule(rule, companions=ALL_RULES) == []


def test_packs_cover_the_required_shapes():
    ids = {r.id for r in ALL_RULES}
    for needed in (
        "reasoning.think_block",
        "secrets.aws_access_key",
        "secrets.gcp_api_key",
        "secrets.github_token",
        "secrets.bearer_token",
        "secrets.private_key_block",
        "secrets.jwt",
        "secrets.iban",
        "secrets.card_number",
        "secrets.email",
        "secrets.phone_number",
        "leakage.label_word",
        "leakage.oracle_quote",
    ):
        assert needed in ids
    card = next(r for r in ALL_RULES if r.id == "secrets.card_number")
    assert card.validate == "card"
    assert {r.action for r in ALL_RULES} == {"redact", "strip", "drop", "pseudonymize"}
    assert {r.pii for r in ALL_RULES if r.action == "pseudonymize"} == set(PII_CLASSES)


def _pack(tmp_path, body: str, name: str = "custom"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(body))
    return path


RULE_OK = """\
    pack: custom
    rules:
      - id: token
        description: a token
        pattern: 'tok_[0-9]{4}'
        action: redact
        placeholder: "[SECRET:tok]"
        examples:
          positive: ["x tok_1234 y"]
          negative: ["tok_12"]
"""


def test_custom_pack_loads(tmp_path):
    san = Sanitizer.from_packs([str(_pack(tmp_path, RULE_OK))])
    assert san.sanitize_text("a tok_1234 b")[0] == "a [SECRET:tok] b"


@pytest.mark.parametrize(
    "change, reason",
    [
        (("'tok_[0-9]{4}'", "'(?<=x)tok'"), "RE2 rejected pattern"),
        (("'tok_[0-9]{4}'", "'tok_(['"), "RE2 rejected pattern"),
        (("'tok_[0-9]{4}'", "'\\Atok_[0-9]{4}'"), "\\A is not allowed"),
        (("'tok_[0-9]{4}'", "'^tok_[0-9]{4}'"), "needs multi-line mode"),
        (("'tok_[0-9]{4}'", "'(?:tok_[0-9]{4})?'"), "matches the empty string"),
        (('["x tok_1234 y"]', '["x tok_12 y"]'), "positive example 1 'x tok_12 y' did not match"),
        (('["tok_12"]', '["tok_9999"]'), "negative example 1 'tok_9999' matched"),
        (('placeholder: "[SECRET:tok]"', "placeholder: oops"), "typed placeholder"),
        (("action: redact", "action: burn"), "action must be one of"),
        (("description: a token", "description: a token\n        colour: red"), "unknown keys"),
        (('negative: ["tok_12"]', "negative: []"), "at least one positive and one negative"),
    ],
)
def test_bad_rule_is_refused_with_id_and_reason(tmp_path, change, reason):
    body = RULE_OK.replace(*change)
    assert body != RULE_OK
    with pytest.raises(RuleError) as err:
        Sanitizer.from_packs([str(_pack(tmp_path, body))])
    assert err.value.rule_id == "custom.token"
    assert reason in str(err.value)


def test_expect_mismatch_is_refused(tmp_path):
    body = RULE_OK.replace('positive: ["x tok_1234 y"]', 'positive: [{text: "x tok_1234 y", expect: "x y"}]')
    with pytest.raises(RuleError, match="expected 'x y'"):
        Sanitizer.from_packs([str(_pack(tmp_path, body))])


def test_placeholder_matched_by_another_rule_is_refused(tmp_path):
    body = RULE_OK + textwrap.indent(
        textwrap.dedent("""\
        - id: secret_word
          description: the word SECRET
          pattern: 'SECRET'
          action: redact
          placeholder: "[X:y]"
          examples:
            positive: ["a SECRET b"]
            negative: ["a secret b"]
        """),
        "  ",
    )
    with pytest.raises(RuleError, match="placeholder"):
        Sanitizer.from_packs([str(_pack(tmp_path, body))])


def test_duplicate_ids_and_missing_pack(tmp_path):
    body = RULE_OK + textwrap.indent(RULE_OK.split("rules:\n")[1], "")
    with pytest.raises(RuleError, match="duplicate rule id"):
        load_pack(_pack(tmp_path, body))
    with pytest.raises(RuleError, match="no such pack"):
        load_pack("nope", tmp_path)
