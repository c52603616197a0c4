"""Properties over many cases: idempotence, no planted secret survives, few false redactions."""

from __future__ import annotations

import os
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sanitizer import Sanitizer
from sanitizer.corpus import (
    PLANT_KINDS,
    SEPARATORS,
    ledger_record,
    ordinary_description,
    plant,
    planted_text,
    survives,
)

SAN = Sanitizer.from_packs()
SCALE = int(os.environ.get("SANITIZER_STRESS", "1"))  # more hypothesis examples when set
WRITER = "model_ledger[0].description"
_FILLER = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)


@settings(max_examples=300 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            _FILLER,
            st.builds(
                lambda k, s: plant(k, random.Random(s))[0],
                st.sampled_from(PLANT_KINDS),
                st.integers(0, 2**32),
            ),
            st.sampled_from(
                ["<think>", "</think>", "label: ", "sabotage", "[SECRET:email]", "Thought: ", "\n"]
            ),
        ),
        max_size=6,
    ),
    st.booleans(),
)
def test_sanitize_text_is_idempotent(parts, writer):
    text = "".join(parts)
    path = WRITER if writer else None
    once, _, _ = SAN.sanitize_text(text, ["acct_hidden_42"], path=path)
    twice, findings, _ = SAN.sanitize_text(once, ["acct_hidden_42"], path=path)
    assert twice == once
    assert [f for f in findings if f.action != "drop"] == []


@settings(max_examples=1000 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(PLANT_KINDS),
    st.integers(0, 2**32),
    _FILLER,
    _FILLER,
    st.sampled_from(SEPARATORS),
    st.sampled_from(SEPARATORS),
    st.booleans(),
)
def test_planted_secret_never_survives_random_text(kind, seed, left, right, sep_l, sep_r, writer):
    item, must_vanish = plant(kind, random.Random(seed))
    text = f"{left}{sep_l}{item}{sep_r}{right}"
    out, findings, _ = SAN.sanitize_text(text, path=WRITER if writer else "trajectory[0].result")
    for secret in must_vanish:
        assert not survives(secret, out, left + right), (kind, text, out)
    assert findings


def test_planted_secrets_in_ledger_text_zero_survivors():
    """Thousands of seeded cases: every secret type, at random positions of ordinary ledger lines."""
    r = random.Random(20261129)
    cases = survivors = 0
    for i in range(6000):
        kind = PLANT_KINDS[i % len(PLANT_KINDS)]
        filler = ordinary_description(r)
        text, must_vanish = planted_text(r, kind, filler)
        out, _, _ = SAN.sanitize_text(text, path=WRITER)
        cases += 1
        survivors += any(survives(s, out, filler) for s in must_vanish)
    print(f"\nplanted secrets: {cases} cases, {survivors} survivors")
    assert survivors == 0


def test_false_redaction_rate_on_ordinary_ledger_text():
    r = random.Random(4412)
    lines = changed = 0
    for _ in range(20000):
        text = ordinary_description(r)
        lines += 1
        changed += SAN.sanitize_text(text, ["acct_hidden_42"], path=WRITER)[0] != text
    records = rec_changed = strings = 0
    for i in range(800):
        rec = ledger_record(r, i)
        res = SAN.sanitize_record(rec, dynamic_literals=rec["metadata"]["hidden_identifiers"])
        records += 1
        rec_changed += res.record != rec
        strings += sum(1 for e in rec["model_ledger"] for v in e.values() if isinstance(v, str))
    rate = changed / lines
    print(f"\nfalse redactions: {changed}/{lines} ledger lines ({rate:.4%}), {rec_changed}/{records} records")
    assert rate < 0.01
    assert rec_changed / records < 0.01
