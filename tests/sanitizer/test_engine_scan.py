"""The rule set's pass also answers whether a text holds invisible characters (no rule index for it)."""

import pytest

from sanitizer import Sanitizer
from sanitizer.core import INVISIBLE_CHARS, has_invisible

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
