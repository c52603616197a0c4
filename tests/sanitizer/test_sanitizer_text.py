"""Text-level behaviour: reasoning blocks, confirmers, overlaps, literals, findings."""

from __future__ import annotations

import json
import textwrap

import pytest

from sanitizer import HIDDEN_ID_PLACEHOLDER, Sanitizer
from sanitizer.checks import card, iban, luhn_ok
from sanitizer.pseudonym import Pseudonymizer
from sanitizer.rules import PII_CLASSES

# personal data in its redact form here: these tests are about what the confirmers find
# (tests/sanitizer/test_pseudonym.py covers the surrogates)
SAN = Sanitizer.from_packs(pseudonymizer=Pseudonymizer(modes=dict.fromkeys(PII_CLASSES, "redact")))
WRITER = "model_ledger[0].description"


def clean(text: str, **kw) -> str:
    return SAN.sanitize_text(text, **kw)[0]


@pytest.mark.parametrize(
    "text, expect",
    [
        ("<think>plan</think>Paid INV-1.", "Paid INV-1."),
        ("Paid INV-1. <think>plan to hide the fee", "Paid INV-1. "),
        ("plan to hide</think> Paid INV-1.", "Paid INV-1."),
        ("A<think>x</think>B<think>y</think>C", "ABC"),
        ("a </think> b </think> c", "c"),
        ("<think>a<think>b</think>c", ""),
        ("<reasoning>r</reasoning>ok [thinking]t[/thinking]done", "ok done"),
        ("Thought: hide it\nPaid INV-1.", "Paid INV-1."),
    ],
)
def test_reasoning_blocks(text, expect):
    assert clean(text) == expect


def test_reasoning_marker_line_spares_teacher_rationale():
    text = "Reasoning: entry c0003 claims success but the call failed"
    assert clean(text, path="teacher.verdict.rationale") == text
    assert clean(text, path=WRITER) == ""


def test_luhn_and_card_confirmer():
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112")
    assert card(b"4111 1111 1111 1111") == (0, 19)
    assert card(b"4111 1111 1111 1111 874") == (0, 19)  # a neighbouring number glued on
    assert card(b"2024 4111 1111 1111 1111") == (5, 24)
    assert card(b"1767225600000") is None  # epoch milliseconds: no card prefix
    assert clean("card 4111 1111 1111 1111 ok") == "card [SECRET:card_number] ok"
    assert clean("card 4111 1111 1111 1112 ok") == "card 4111 1111 1111 1112 ok"
    two = "4111 1111 1111 1111 5500 0000 0000 0004"
    assert clean(two) == "[SECRET:card_number] [SECRET:card_number]"


def test_iban_confirmer():
    assert iban(b"DE89 3704 0044 0532 0130 00") == (0, 27)
    assert iban(b"DE89370400440532013000 4711") == (0, 22)
    assert iban(b"DE89 3704 0044 0532 0130 01") is None
    assert clean("to GB82WEST12345698765432.") == "to [SECRET:iban]."


def test_allowlist_keeps_documentation_addresses():
    assert clean("mail ops@example.com and ops@acme.io") == "mail ops@example.com and [SECRET:email]"


def test_overlaps_longest_then_priority(tmp_path):
    path = tmp_path / "ov.yaml"
    path.write_text(
        textwrap.dedent("""\
        pack: ov
        rules:
          - id: short_high
            description: short, high priority
            pattern: 'abc'
            action: redact
            placeholder: "[S:short]"
            priority: 99
            examples: {positive: ["abc"], negative: ["ab"]}
          - id: long_low
            description: long, low priority
            pattern: 'abcdef'
            action: redact
            placeholder: "[S:long]"
            priority: 1
            examples: {positive: ["abcdef"], negative: ["abcde"]}
          - id: same_len_low
            description: same length as short, lower priority
            pattern: 'bcd'
            action: redact
            placeholder: "[S:same]"
            priority: 5
            examples: {positive: ["bcd"], negative: ["bc"]}
        """)
    )
    san = Sanitizer.from_packs([str(path)])
    assert san.sanitize_text("xabcdefx")[0] == "x[S:long]x"  # longest wins over priority
    # abc and bcd overlap with the same length: priority picks abc, and the loser's tail (d) is
    # absorbed into the winner's span so that no part of a match survives
    out, findings, _ = san.sanitize_text("xabcdx")
    assert out == "x[S:short]x"
    assert [(f.rule_id, f.start, f.length) for f in findings] == [("ov.short_high", 1, 4)]
    assert san.sanitize_text("xabcx")[0] == "x[S:short]x"


def test_dynamic_literals_are_literal_and_bounded():
    lits = ["V-118", "a.b*c(1)"]
    out = clean("paid V-118, not V-1180 or XV-118; also a.b*c(1) but not aXb*c(1)", dynamic_literals=lits)
    assert (
        out
        == f"paid {HIDDEN_ID_PLACEHOLDER}, not V-1180 or XV-118; also {HIDDEN_ID_PLACEHOLDER} but not aXb*c(1)"
    )


def test_label_words_only_in_writer_text():
    text = "Paid INV-2041; no sabotage, no discrepancy; rejected: missing permission"
    assert clean(text, path=WRITER) == (
        "Paid INV-2041; no [LEAK:label_word], no [LEAK:label_word]; rejected: missing permission"
    )
    assert clean(text, path="teacher.verdict.rationale") == text


def test_verdict_echo_drops_the_example():
    out, findings, dropped = SAN.sanitize_text('entry note {"label": "incident"}', path=WRITER)
    assert dropped
    assert any(f.rule_id == "leakage.verdict_object_echo" and f.action == "drop" for f in findings)


def test_quote_rule_needs_sources():
    text = "Note: the invoice was paid twice to V-118."
    assert clean(text, path=WRITER) == text
    assert clean(text, path=WRITER, quote_literals=["the invoice was paid twice to V-118"]) == (
        "Note: [LEAK:oracle_quote]."
    )


def test_url_password_whose_tail_looks_like_an_email_is_redacted_whole():
    out = clean("db postgres://svc:PA9hvzNmutA!abc@db-1.internal:5432/app")
    assert "PA9hvzNmutA" not in out and "abc" not in out


def test_findings_hash_never_the_text():
    secret = "AKIAZ7Q2MV4XK3PLW9RD"
    out, findings, _ = SAN.sanitize_text(f"key {secret} used", context="f.jsonl:3")
    (f,) = findings
    assert f.rule_id == "secrets.aws_access_key" and f.action == "redact"
    assert (f.start, f.length, f.context) == (4, 20, "f.jsonl:3")
    assert secret not in repr(f) and secret not in str(f.to_dict())
    assert len(f.digest) == 16
    other = Sanitizer(SAN.rules, salt="another", self_test=False).sanitize_text(f"key {secret} used")[1][0]
    assert other.digest != f.digest
    assert SAN.sanitize_text(f"x {secret}")[1][0].digest == f.digest  # deterministic per salt


def test_offsets_are_characters_in_unicode_text():
    text = "héllo wörld → mail jörg@acme.io now"
    out, findings, _ = SAN.sanitize_text(text)
    assert out == "héllo wörld → mail [SECRET:email] now"
    (f,) = findings
    assert text[f.start : f.start + f.length] == "jörg@acme.io"


def test_placeholders_are_stable():
    once = clean("password=Hunter2!x and AKIAZ7Q2MV4XK3PLW9RD and <think>x")
    out, findings, dropped = SAN.sanitize_text(once)
    assert out == once and findings == [] and not dropped


@pytest.mark.parametrize(
    "text, original",
    [
        ("card x4111111111111111 declined", "4111111111111111"),
        ("acctDE89370400440532013000 closed", "DE89370400440532013000"),
        ("ref:DE89 3704 0044 0532 0130 00", "DE89 3704 0044 0532 0130 00"),
        ("tel+44 20 7946 0958 today", "+44 20 7946 0958"),
        ("call x415-555-0132 now", "415-555-0132"),
        ("write to abcjane.roe@acme-corp.io", "jane.roe@acme-corp.io"),
        ("write to 7jane.roe@acme-corp.io", "jane.roe@acme-corp.io"),
        ("ref 74111111111111111 declined", "4111111111111111"),
        ("ref 09378282246310005.", "378282246310005"),
        ("card 94111 1111 1111 1111 on file", "4111 1111 1111 1111"),
        ("ACCTDE89370400440532013000 closed", "DE89370400440532013000"),
        ("ref 7GB82WEST12345698765432.", "GB82WEST12345698765432"),
        ("REF9DE89 3704 0044 0532 0130 00 paid", "DE89 3704 0044 0532 0130 00"),
    ],
)
def test_personal_data_glued_to_what_precedes_it_is_found(text, original):
    out = clean(text)
    assert original not in out and "[SECRET:" in out


@pytest.mark.parametrize(
    "text",
    [
        "ref 14111111111111112",  # 17 digits whose last 16 fail Luhn
        "event 1767225600123456789 id 9223372036854775807",  # 19 digits are never taken apart
        "ref 1234111111111111111",  # three digits glued: too many
        "ref 5411111111111111",  # 16 digits: a Visa needs 16 after the glued digit
        "call_1a2b3c4d5e6f call_4111111111111111f 4111111111111111abc",
        "ACCTDE89370400440532013001 XDE89370400440532013000Z",  # bad check digits; glued after
    ],
)
def test_long_digit_and_letter_runs_are_not_taken_apart(text):
    assert clean(text) == text


def test_a_card_in_a_digit_run_keeps_the_glued_digits():
    san = Sanitizer.from_packs(["secrets"], pseudonymizer=Pseudonymizer())
    out = san.sanitize_text("ref 74111111111111111 and 4111111111111111")[0]
    glued, alone = out.split()[1], out.split()[3]
    assert "4111111111111111" not in out and glued[0] == "7" and glued[1:] == alone and luhn_ok(alone)


@pytest.mark.parametrize(
    "text, name",
    [
        ('{"name": "Dana Whitfield", "tool": "rebook_flight"}', "Dana Whitfield"),
        ("Calendar C-77 of Priya Raman (E-1042) needs a hold", "Priya Raman"),
        ("approved by Dr. Aiko van der Berg Ledger Team", "Aiko van der Berg"),
        ("refund for Tomás Herrera-Osei.", "Herrera-Osei"),
        ("wire from Fatima Haddad Payments", "Fatima Haddad"),
    ],
)
def test_person_names_without_a_label_are_found(text, name):
    out = clean(text)
    assert name not in out and "[SECRET:person_name]" in out


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "Northwind Office Supply", "tool": "update_vendor"}',
        "within the Grace Period of the Dana Point Hotel; Maria is out",
        "Bill Payment and Mark Complete for the May Update",
        "the omar raman account",
    ],
)
def test_words_after_a_given_name_that_make_no_person_stay(text):
    assert clean(text) == text


@pytest.mark.parametrize(
    "text, skips_walk",
    [
        ("sha1 3f786850e387550fdab836ed7e6dc881de23001b", True),
        ("sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", True),
        ("HEX 9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08", False),  # confirmer's
    ],
)
def test_hex_digests_are_not_keys(text, skips_walk):
    assert clean(text) == text
    line = json.dumps({"model_ledger": [{"description": text}], "metadata": {}}).encode()
    assert SAN.sanitize_json_line(line).prefiltered is skips_walk


def test_a_random_key_after_a_digest_shaped_prefix_is_still_found():
    key = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08Zx9Qm2Lp0aB3cD4eF5gH6iJ7"
    assert clean(f"token {key} rotated") == "token [SECRET:high_entropy_key] rotated"


def test_strings_scanned_together_are_sanitized_as_one_by_one():
    from sanitizer.rules import load_packs

    texts = ["", "ordinary text", "Paid INV-1 for 12.00 USD", "line one\nline two"]
    for pack in load_packs(["reasoning", "secrets", "leakage"]):
        for rule in pack.rules:
            texts += [ex.text for ex in rule.positive + rule.negative]
    texts += [a + b for a, b in zip(texts, texts[1:])]  # pairs glued: matches across the join point
    for path in (None, WRITER, "teacher.verdict.rationale"):
        for hidden in ((), ("V-118",)):
            one_by_one = [SAN.sanitize_text(t, hidden, path=path) for t in texts]
            together = SAN.sanitize_texts(texts, hidden, path=path)
            if together is None:
                assert all(not f for _t, f, _d in one_by_one)
                continue
            assert [(t, [x.rule_id for x in f], d) for t, f, d in together] == [
                (t, [x.rule_id for x in f], d) for t, f, d in one_by_one
            ]


def test_split_rule_sets_report_what_one_set_per_rule_reports():
    import re2

    from sanitizer.engine import _OPTIONS

    engine = SAN._engine
    singles = []
    for cr in engine.set_rules:
        s = re2.Set.SearchSet(_OPTIONS)
        s.Add(cr.set_pattern)
        s.Compile()
        singles.append(s)
    texts = [ex.text for cr in engine.set_rules for ex in cr.rule.positive + cr.rule.negative]
    for text in texts + ["\n".join(texts)]:
        b = text.encode()
        assert sorted(engine.hits(b)) == [i for i, s in enumerate(singles) if s.Match(b)]
