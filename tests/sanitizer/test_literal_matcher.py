"""The find-based literal matcher gives exactly the spans of the RE2 alternation it stands for."""

import random

from sanitizer.core import _hidden_rule
from sanitizer.engine import LITERAL_FIND_MAX, iter_spans, literal_matcher, literal_regex, matcher

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
        found, reference = literal_matcher(lits), matcher(literal_regex(lits))
        for pos in range(len(text) + 1):
            ref = reference(text, pos, len(text))
            assert found(text, pos, len(text)) == (None if ref is None else [ref[0]]), (lits, text, pos)


def test_same_spans_with_many_literals():
    rng = random.Random(12)
    for _ in range(300):
        lits, text = _random_case(rng, 3 * LITERAL_FIND_MAX)
        want = list(iter_spans(matcher(literal_regex(lits)), 0, text))
        assert list(iter_spans(literal_matcher(lits), 0, text)) == want


def test_word_boundaries_and_longest_first():
    match = literal_matcher(("V-118", "V-1180", "ab"))
    b = b"xV-118 V-1180 V-118_ ab-ab cab"
    assert list(iter_spans(match, 0, b)) == [(7, 13), (21, 23), (24, 26)]
    assert literal_matcher(("", "")) is None


def test_hidden_rule_compiles_its_regex_only_when_asked():
    lr = _hidden_rule(("WF-77", "acct 9"))
    assert lr.finds and lr._regex is None
    assert lr.regex.search("see WF-77 now") is not None
