"""The rule set's pass also answers whether a text holds invisible characters (no rule index for it)."""

import pytest

from sanitizer import Sanitizer
from sanitizer.core import INVISIBLE_CHARS, has_invisible
from sanitizer.engine import confirmed_spans

SAN = Sanitizer.from_packs()


@pytest.mark.parametrize("ch", list(INVISIBLE_CHARS))
def test_marker_matches_every_invisible_character(ch):
    text = f"AKIA{ch}IOSFODNN7EXAMPLE — caf\u00e9"
    hits, invisible = SAN._engine.scan(text.encode())
    assert invisible is True and has_invisible(text)
    assert -1 not in hits and hits == SAN._engine.hits(text.encode())


def test_marker_silent_on_other_text():
    for text in ("plain ascii", "em — dash, caf\u00e9, \u2014", ""):
        assert SAN._engine.scan(text.encode()) == (SAN._engine.hits(text.encode()), False)


def test_scan_turns_marks_the_turn_with_an_invisible_character():
    texts = ["a clean turn \u2014 nothing here", "an invisible\u200b joiner", "another clean turn"]
    paths = ["writer_action.user", "writer_action.assistant", "writer_action.user"]
    _names, touched, _hits = SAN.scan_turns(texts, paths)
    assert touched == [1]


def _examples_joined() -> bytes:
    texts = [ex.text for r in SAN.rules for ex in (*r.positive, *r.negative)]
    return "\n".join(texts).encode("utf-8", "surrogatepass")


def test_every_match_overlaps_a_raw_match_the_search_met():
    """What lets scan_turns mark turns from the name rules' search instead of searching again."""
    b = _examples_joined()
    for cr in SAN._engine.set_rules:
        if cr.kind != "regex":
            continue
        seen: list[tuple[int, int]] = []
        list(confirmed_spans(cr, b, None, seen))
        for pos in range(0, len(b), 7):
            spans = cr.match(b, pos, len(b))
            if spans is None:
                break
            s, e = spans[0]
            assert any(s0 < max(e, s + 1) and s < max(e0, s0 + 1) for s0, e0 in seen), (cr.id, pos)


def test_scan_turns_touches_the_turns_a_name_changes():
    texts = [
        "Dear Priya Raman, the refund is done.",
        "nothing here",
        "Priya Raman approved it.",
        "Calendar of Grace Period",
    ]
    paths = ["writer_action.user"] * len(texts)
    names, touched, _hits = SAN.scan_turns(texts, paths)
    assert "Priya Raman" in names
    changed = [i for i, t in enumerate(texts) if SAN.sanitize_text(t, path=paths[i], names=names)[0] != t]
    assert changed == [0, 2] and set(changed) <= set(touched)
