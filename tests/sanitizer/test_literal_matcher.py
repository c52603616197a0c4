"""The find-based literal matcher gives exactly the spans of the RE2 alternation it stands for."""

import random

from sanitizer.core import _hidden_rule
from sanitizer.engine import LITERAL_FIND_MAX, iter_spans, literal_finder, literal_regex, matcher

ALPHABET = ["a", "b", "A", "_", "1", " ", "-", ".", "é", "—", "\n", "ab", "Ab", "V-1"]


def _random_case(rng: random.Random, max_literals: int) -> tuple[tuple[str, ...], bytes]:
    lits = tuple(
        "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 4)))
        for _ in range(rng.randint(1, max_literals))
    )
    text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 30))).encode()
    return lits, text


def test_same_match_as_the_alternation_from_every_position():
    rng = random.Random(11)
    for _ in range(3000):
        lits, text = _random_case(rng, LITERAL_FIND_MAX)
        finder, reference = literal_finder(lits), matcher(literal_regex(lits))
        bound = finder.on(text)
        for pos in range(len(text) + 1):
            ref = reference(text, pos, len(text))
            want = None if ref is None else [ref[0]]
            assert finder.match(text, pos, len(text)) == want, (lits, text, pos)
            assert bound(text, pos, len(text)) == want, (lits, text, pos)
            end = len(text) - 1
            if pos <= end:  # a shorter window: the bound matcher falls back to the finds
                ref = reference(text, pos, end)
                assert bound(text, pos, end) == (None if ref is None else [ref[0]])


def test_more_literals_than_the_finder_takes_use_the_alternation():
    lits = tuple(f"lit{i}" for i in range(LITERAL_FIND_MAX + 1))
    assert literal_finder(lits) is None
    assert literal_finder(("", "")) is None
    lr = _hidden_rule(lits)
    assert not lr.finds
    assert list(iter_spans(lr.match_in(b"x lit3 lit10"), 0, b"x lit3 lit10")) == [(2, 6)]


def test_word_boundaries_and_longest_first():
    finder = literal_finder(("V-118", "V-1180", "ab"))
    b = b"xV-118 V-1180 V-118_ ab-ab cab"
    want = [(7, 13), (21, 23), (24, 26)]
    assert list(iter_spans(finder.match, 0, b)) == want
    assert list(iter_spans(finder.on(b), 0, b)) == want


def test_hidden_rule_compiles_its_regex_only_when_asked():
    lr = _hidden_rule(("WF-77", "acct 9"))
    assert lr.finds and lr._regex is None
    assert lr.regex.search("see WF-77 now") is not None
