"""The matching engine: RE2 only (linear time, no backtracking), one ``re2.Set`` pass per string.

A string is encoded to UTF-8 once and scanned by a single ``re2.Set`` holding every rule's pattern;
only rules the set reports are then run on their own to get spans (and confirmed: Luhn, mod-97, the
allowlist). Overlapping spans are resolved deterministically (longest first, then higher priority, then
earlier start, then pack order), and actions are applied in one left-to-right rebuild. All offsets are
UTF-8 byte offsets internally; findings report character offsets.
"""

from __future__ import annotations

import functools
import hashlib
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Sequence
from typing import NamedTuple

import re2

from sanitizer.checks import VALIDATORS
from sanitizer.rules import Rule, RuleError

REDACT, STRIP, DROP, PSEUDONYMIZE = "redact", "strip", "drop", "pseudonymize"
HIDDEN_ID_RULE = "dynamic.hidden_id"
HIDDEN_ID_PLACEHOLDER = "[HIDDEN_ID]"


def re2_options() -> re2.Options:
    opts = re2.Options()
    opts.max_mem = 256 << 20  # room for the DFA of the combined set; RE2 stays linear regardless
    opts.log_errors = False
    return opts


_OPTIONS = re2_options()


def compile_re2(pattern: str) -> re2._Regexp:
    """Compile with the engine's options; raises ``re2.error`` with RE2's reason."""
    return re2.compile(pattern, _OPTIONS)


def anchor_problem(pattern: str) -> str | None:
    """Patterns must behave the same on a string alone and on strings joined by ``\\n`` (the record
    pre-filter scans them joined): so no ``\\A``/``\\z``, and ``^``/``$`` only in multi-line mode."""
    flags = ""
    if pattern.startswith("(?"):
        end = pattern.find(")")
        head = pattern[2:end]
        if end > 0 and head.isalpha():
            flags = head
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            if not in_class and nxt in ("A", "z", "Z"):
                return f"\\{nxt} is not allowed (use (?m)^ or $, or a block rule)"
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            if pattern[i + 1 : i + 2] == "^":
                i += 1
            if pattern[i + 1 : i + 2] == "]":
                i += 1
        elif c in "^$" and "m" not in flags:
            return f"{c} needs multi-line mode: start the pattern with (?m)"
        i += 1
    if "-m" in pattern.replace("\\-", ""):
        return "turning multi-line mode off is not allowed"
    return None


def json_line_variant(pattern: str) -> str:
    """The pattern for the raw-line pre-filter: ``^`` and ``$`` (outside classes) also accept the ``"``
    that delimits a JSON string, so a match inside a string value is still found when the whole
    JSON line is scanned (only lines without backslash escapes are pre-filtered this way)."""
    out = []
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
            out.append(c)
        elif c == "[":
            in_class = True
            out.append(c)
            for extra in ("^", "]"):
                if pattern[i + 1 : i + 2] == extra:
                    out.append(extra)
                    i += 1
        elif c == "^":
            out.append('(?:^|")')
        elif c == "$":
            out.append('(?:$|")')
        else:
            out.append(c)
        i += 1
    return "".join(out)


def scoped(pattern: str) -> str:
    """``(?i)x`` -> ``(?i:x)`` so a pattern with leading flags can sit inside an alternation."""
    if pattern.startswith("(?"):
        end = pattern.find(")")
        head = pattern[2:end]
        if end > 0 and head.isalpha():
            return f"(?{head}:{pattern[end + 1 :]})"
    return f"(?:{pattern})"


class Finding(NamedTuple):
    """One applied match. Never holds the matched text: only its salted hash."""

    rule_id: str
    action: str  # redact | strip | drop
    path: str  # field path like "model_ledger[3].description"; "" for a bare string
    start: int  # character offset in the string as the matching pass saw it
    length: int  # characters
    digest: str  # salted SHA-256 of the matched UTF-8 bytes, 16 hex digits
    context: str = ""  # caller's location, e.g. "runs.jsonl:12"

    @property
    def location(self) -> str:
        where = f"{self.path}@{self.start}" if self.path else f"@{self.start}"
        return f"{self.context}:{where}" if self.context else where

    def to_dict(self) -> dict:
        return {
            "rule_id": self.rule_id,
            "action": self.action,
            "context": self.context,
            "path": self.path,
            "start": self.start,
            "length": self.length,
            "hash": self.digest,
        }


class CompiledRule:
    """A :class:`Rule` ready to run: compiled regexes, its group, confirmer and allowlist."""

    __slots__ = (
        "rule",
        "id",
        "order",
        "action",
        "priority",
        "kind",
        "regex",
        "close",
        "group",
        "close_group",
        "check",
        "allow_literals",
        "allow_regexes",
        "placeholder",
        "set_pattern",
        "line_pattern",
        "match",
        "close_match",
        "pseudo",
        "surrogates",
        "surrogate_lengths",
    )

    def __init__(self, rule: Rule, order: int):
        self.rule = rule
        self.id = rule.id
        self.order = order
        self.action = rule.action
        self.priority = rule.priority
        self.kind = rule.kind
        self.placeholder = (rule.placeholder or "").encode()
        self.check: Callable[[bytes], tuple[int, int] | None] | None = (
            VALIDATORS[rule.validate] if rule.validate else None
        )
        self.allow_literals = frozenset(a.lower().encode() for a in rule.allowlist)
        self.allow_regexes = tuple(
            fullmatcher(self._compile(p, "allow_patterns")) for p in rule.allow_patterns
        )
        self.pseudo: Callable[[bytes], bytes] | None = None  # set by the Sanitizer for pseudonymize
        self.surrogates: set[bytes] | None = None  # surrogates already made: never matched again
        self.surrogate_lengths: list[int] = []  # their byte lengths, longest first
        self.regex = self.close = None
        self.match = self.close_match = None
        self.group = self.close_group = 0
        self.set_pattern: str | None = None
        self.line_pattern: str | None = None
        if rule.kind in ("regex", "block"):
            self.regex, self.group = self._compile_main(rule.pattern, "pattern")
            self.match = matcher(self.regex)
            self.set_pattern = rule.pattern
            self.line_pattern = json_line_variant(rule.pattern)
        if rule.kind == "block":
            self.close, self.close_group = self._compile_main(rule.close, "close")
            self.close_match = matcher(self.close)
            self.set_pattern = f"{scoped(rule.pattern)}|{scoped(rule.close)}"
            self.line_pattern = (
                f"{scoped(json_line_variant(rule.pattern))}|{scoped(json_line_variant(rule.close))}"
            )

    def _compile(self, pattern: str, what: str) -> re2._Regexp:
        try:
            return compile_re2(pattern)
        except re2.error as exc:
            raise RuleError(self.id, f"RE2 rejected {what} {pattern!r}: {exc}") from None

    def _compile_main(self, pattern: str, what: str) -> tuple[re2._Regexp, int]:
        problem = anchor_problem(pattern)
        if problem:
            raise RuleError(self.id, f"{what}: {problem}")
        rx = self._compile(pattern, what)
        if rx.search(b"") is not None:
            raise RuleError(self.id, f"{what} matches the empty string")
        return rx, rx.groupindex.get("m", 0)

    def allowed(self, seg: bytes) -> bool:
        if self.allow_literals and seg.lower() in self.allow_literals:
            return True
        for full in self.allow_regexes:
            if full(seg):
                return True
        return False


class LiteralRule:
    """A rule made at run time from literal strings (hidden identifiers, quoted oracle text)."""

    __slots__ = (
        "id",
        "action",
        "priority",
        "order",
        "placeholder",
        "_regex",
        "match",
        "group",
        "check",
        "kind",
        "pseudo",
        "texts",
        "finds",
        "finder",
    )

    def __init__(
        self,
        rule_id: str,
        placeholder: str,
        priority: int,
        order: int,
        regex: re2._Regexp | None,
        texts: tuple[str, ...] = (),
        finder: LiteralFinder | None = None,
    ):
        self.id = rule_id
        self.action = REDACT
        self.priority = priority
        self.order = order
        self.placeholder = placeholder.encode()
        self._regex = regex
        self.finder = finder
        self.match = finder.match if finder is not None else matcher(regex)
        self.group = 0
        self.check = None
        self.kind = "literal"
        self.pseudo = None
        self.texts = texts  # the literals: where none occurs, the regex cannot match
        self.finds = finder is not None  # its match is substring finds: a substring pre-test repeats it

    @property
    def regex(self) -> re2._Regexp:
        """The literals' RE2 alternation, compiled on first use when the rule was made with a
        ``match`` of its own (a record pre-filter scans a join with it)."""
        if self._regex is None:
            self._regex = literal_regex(self.texts)
        return self._regex

    def match_in(self, b: bytes) -> Callable[[bytes, int, int], list | None]:
        """``match`` for several calls on ``b`` (a finder searches each literal once)."""
        return self.match if self.finder is None else self.finder.on(b)

    def absent_from(self, text: str) -> bool:
        """True when no literal occurs in ``text`` (a substring test instead of a regex scan)."""
        return bool(self.texts) and not any(t in text for t in self.texts)

    def allowed(self, seg: bytes) -> bool:
        return False


def fullmatcher(regex: re2._Regexp) -> Callable[[bytes], bool]:
    """``full(b)``: whether the whole of ``b`` matches (direct RE2 call when available)."""
    raw = getattr(regex, "_regexp", None)
    if raw is not None and callable(getattr(raw, "Match", None)):
        raw_match, both = raw.Match, re2._Anchor.ANCHOR_BOTH

        def full(b: bytes) -> bool:
            return raw_match(both, b, 0, len(b))[0] != _NO_MATCH

        return full
    return lambda b: regex.fullmatch(b) is not None  # pragma: no cover - other bindings


def _is_word(ch: str) -> bool:
    return ch.isascii() and (ch.isalnum() or ch == "_")


@functools.lru_cache(maxsize=1024)
def literal_regex(literals: tuple[str, ...]) -> re2._Regexp | None:
    """One RE2 alternation of escaped literals, longest first; word-character ends get ``\\b`` so that
    ``V-118`` does not fire inside ``V-1180``."""
    parts = []
    for lit in sorted({x for x in literals if x}, key=lambda s: (-len(s), s)):
        p = re2.escape(lit)
        if _is_word(lit[0]):
            p = r"\b" + p
        if _is_word(lit[-1]):
            p += r"\b"
        parts.append(p)
    if not parts:
        return None
    return compile_re2("|".join(parts))


LITERAL_FIND_MAX = 8  # more literals than this: one RE2 alternation beats a find per literal
_WORD_BYTES = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")


class LiteralFinder:
    """:func:`literal_regex`'s alternation made of ``bytes.find`` calls, for a few literals seen once
    (an example's names, a workflow's hidden ids): compiling an RE2 program per example costs more
    than the scans. Same result: the leftmost start wins, at one start the first literal in the
    alternation's order (longest first), and a literal with a word-character end needs a non-word
    byte (or the text's end) beside it there (``\\b``)."""

    __slots__ = ("table",)

    def __init__(self, lits: list[str]):
        self.table = [(x.encode("utf-8", "surrogatepass"), _is_word(x[0]), _is_word(x[-1])) for x in lits]

    def match(self, b: bytes, pos: int, n: int) -> list | None:
        """The leftmost match at or after ``pos`` ending by ``n`` (see :func:`matcher`)."""
        best_s = best_e = -1
        word = _WORD_BYTES
        for lit, word_start, word_end in self.table:
            s = b.find(lit, pos, n)
            while s >= 0 and (best_s < 0 or s < best_s):
                e = s + len(lit)
                if not (word_start and s and b[s - 1] in word) and not (
                    word_end and e < len(b) and b[e] in word
                ):
                    best_s, best_e = s, e
                    break
                s = b.find(lit, s + 1, n)
        return None if best_s < 0 else [(best_s, best_e)]

    def occurrences(self, b: bytes) -> list[tuple[int, int, int]]:
        """Every occurrence that passes its boundary test, as ``(start, order, end)``, sorted."""
        out = []
        word = _WORD_BYTES
        for order, (lit, word_start, word_end) in enumerate(self.table):
            s = b.find(lit)
            while s >= 0:
                e = s + len(lit)
                if not (word_start and s and b[s - 1] in word) and not (
                    word_end and e < len(b) and b[e] in word
                ):
                    out.append((s, order, e))
                s = b.find(lit, s + 1)
        out.sort()
        return out

    def on(self, b: bytes) -> Callable[[bytes, int, int], list | None]:
        """A ``match`` for repeated calls on ``b``: each literal is searched once, not once per call
        (a literal absent from ``b`` would otherwise cost a scan of the rest of it every call)."""
        occ = self.occurrences(b)
        starts = [o[0] for o in occ]
        whole = len(b)

        def match(text: bytes, pos: int, n: int) -> list | None:
            if text is not b or n != whole:
                return self.match(text, pos, n)
            i = bisect_left(starts, pos)
            return None if i == len(occ) else [(occ[i][0], occ[i][2])]

        return match


def literal_finder(literals: tuple[str, ...]) -> LiteralFinder | None:
    """A :class:`LiteralFinder` for these literals; None for none, or for more than
    ``LITERAL_FIND_MAX`` (one RE2 alternation then scans faster than a find per literal)."""
    lits = sorted({x for x in literals if x}, key=lambda t: (-len(t), t))
    if not lits or len(lits) > LITERAL_FIND_MAX:
        return None
    return LiteralFinder(lits)


_UNANCHORED = re2._Anchor.UNANCHORED
_UNCHECKED = (-2, -2)
_NO_MATCH = (-1, -1)


def matcher(regex: re2._Regexp) -> Callable[[bytes, int, int], list | None]:
    """``match(b, pos, n)`` -> the spans of all groups of the leftmost match at or after ``pos``, or
    None. Uses the compiled RE2 object directly when the binding exposes it (no generator and match
    object per call: about twice as fast on match floods), else the public ``search``."""
    raw = getattr(regex, "_regexp", None)
    if raw is not None and callable(getattr(raw, "Match", None)):
        raw_match = raw.Match

        def match(b: bytes, pos: int, n: int) -> list | None:
            spans = raw_match(_UNANCHORED, b, pos, n)
            return None if spans[0] == _NO_MATCH else spans

        return match
    ngroups = regex.groups

    def match_public(b: bytes, pos: int, n: int) -> list | None:  # pragma: no cover - other bindings
        m = regex.search(b, pos)
        return None if m is None else [m.span(g) for g in range(ngroups + 1)]

    return match_public


def iter_spans(match: Callable, group: int, b: bytes) -> Iterator[tuple[int, int]]:
    """Non-overlapping spans of ``group`` (the rule's ``m`` group, else the whole match).

    The search restarts at the end of the group, not of the whole match, so a one-character guard
    such as ``(?:[^0-9]|$)`` after a match can serve as the guard before the next one.
    """
    pos = 0
    n = len(b)
    while pos <= n:
        spans = match(b, pos, n)
        if spans is None:
            return
        s, e = spans[group]
        if s < 0:
            s, e = spans[0]
        if e > s:
            yield s, e
        pos = e if e > pos else pos + 1


def confirmed_spans(
    cr: CompiledRule,
    b: bytes,
    protect: list[tuple[int, int]] | None = None,
    seen: list[tuple[int, int]] | None = None,
) -> Iterator[tuple[int, int]]:
    """Spans of a regex rule that pass its confirmer and allowlist and are not its own placeholder.

    A confirmer may narrow a candidate to the real item inside it; the search then resumes right
    after that item, so a second item glued to the first is still found. ``seen`` collects the
    whole span of every raw match the search met, confirmed or not: each match of the pattern
    overlaps one of them (the search resumes inside or at the end of the match it met)."""
    pos = 0
    n = len(b)
    match, group, check, ph = cr.match, cr.group, cr.check, cr.placeholder
    allow = cr.allow_literals or cr.allow_regexes
    made = cr.surrogates
    allowed: dict[bytes, bool] = {}  # a flood of one text is decided once
    checked: dict[bytes, tuple[int, int] | None] = {}
    while pos <= n:
        spans = match(b, pos, n)
        if spans is None:
            return
        if seen is not None:
            seen.append(spans[0])
        s, e = spans[group]
        if s < 0:
            s, e = spans[0]
        nxt = e if e > pos else pos + 1
        if e > s:
            seg = b[s:e]
            if made:
                # a surrogate this sanitizer made, or one glued to what follows it: skip the surrogate
                # (no second confirmation) and look again right after it
                hit = 0
                for n_made in cr.surrogate_lengths:
                    if n_made <= e - s and b[s : s + n_made] in made:
                        hit = n_made
                        break
                if hit:
                    if protect is not None:
                        protect.append((s, s + hit))
                    pos = s + hit
                    continue
            if check is not None:
                win = checked.get(seg, _UNCHECKED)
                if win is _UNCHECKED:
                    win = checked[seg] = check(seg)
                if win is None:
                    pos = nxt
                    continue
                if win[0] != 0 or win[1] != e - s:
                    s, e = s + win[0], s + win[1]
                    seg = b[s:e]
                    nxt = e
            if seg != ph and not (made and seg in made):
                if allow:
                    ok = allowed.get(seg)
                    if ok is None:
                        ok = allowed[seg] = cr.allowed(seg)
                    if ok:
                        pos = nxt
                        continue
                yield s, e
        pos = nxt


def block_spans(cr: CompiledRule, b: bytes) -> list[tuple[int, int]]:
    """Pair opening and closing tags (nesting counts). An opening tag never closed covers the rest of
    the string; a closing tag with no opening covers everything before it (and so every span found
    so far)."""
    tags = [(s, e, 1) for s, e in iter_spans(cr.match, cr.group, b)]
    if not tags and cr.close_match(b, 0, len(b)) is None:
        return []
    tags += [(s, e, 0) for s, e in iter_spans(cr.close_match, cr.close_group, b)]
    return pair_tags(tags, len(b))


def pair_tags(tags: list[tuple[int, int, int]], length: int) -> list[tuple[int, int]]:
    """Spans of paired ``(start, end, is_opening)`` tags in a text of ``length``, as ``block_spans``
    describes; a tag overlapping the one before it is ignored."""
    tags = sorted(tags, key=lambda t: (t[0], -t[2]))
    spans: list[tuple[int, int]] = []
    depth, start, last_end = 0, 0, -1
    for s, e, is_open in tags:
        if s < last_end:  # an opening and a closing tag that overlap: keep the first
            continue
        last_end = e
        if is_open:
            if depth == 0:
                start = s
            depth += 1
        elif depth == 0:
            spans = [(0, e)]
        else:
            depth -= 1
            if depth == 0:
                spans.append((start, e))
    if depth > 0:
        spans.append((start, length))
    return spans


def resolve(cands: list[tuple[int, int, object]]) -> list[tuple[int, int, object]]:
    """Pick non-overlapping spans: longest, then higher priority, then earlier, then pack order.

    Candidates are split into clusters of transitively overlapping spans; a cluster of one is kept as
    is, a larger one is resolved by :func:`_greedy`. Returns the chosen spans sorted by start."""
    if len(cands) <= 1:
        return cands
    cands.sort(key=lambda c: (c[0], c[1]))
    out: list[tuple[int, int, object]] = []
    cluster = [cands[0]]
    reach = cands[0][1]
    for c in cands[1:]:
        if c[0] < reach:
            cluster.append(c)
            if c[1] > reach:
                reach = c[1]
        else:
            out.extend(_greedy(cluster) if len(cluster) > 1 else cluster)
            cluster = [c]
            reach = c[1]
    out.extend(_greedy(cluster) if len(cluster) > 1 else cluster)
    return out


def _rank(c: tuple[int, int, object]) -> tuple:
    # a credential beats personal data it overlaps (a URL password that looks like an email's local
    # part is redacted, not pseudonymized), then the longest span, higher priority, earlier, pack order
    return (c[2].action == PSEUDONYMIZE, c[0] - c[1], -c[2].priority, c[0], c[2].order)


def _greedy(cluster: list[tuple[int, int, object]]) -> list[tuple[int, int, object]]:
    """Winners in rank order; then a loser that sticks out of the winners it overlaps widens them
    to cover it (merged winners keep the best-ranked rule), so no part of a match is left behind
    (a URL password whose tail also looks like an email is redacted whole)."""
    cluster.sort(key=_rank)
    starts: list[int] = []
    ends: list[int] = []
    labels: list[tuple[int, object]] = []  # (rank position, rule)
    losers = []
    for pos, c in enumerate(cluster):
        s, e = c[0], c[1]
        k = bisect_right(starts, s)
        if (k and ends[k - 1] > s) or (k < len(starts) and starts[k] < e):
            losers.append(c)
            continue
        starts.insert(k, s)
        ends.insert(k, e)
        labels.insert(k, (pos, c[2]))
    for s, e, _rule in losers:
        k = bisect_right(starts, s)
        lo = k - 1 if k and ends[k - 1] > s else k
        hi = lo
        while hi < len(starts) and starts[hi] < e:
            hi += 1
        if hi - lo == 1 and starts[lo] <= s and e <= ends[lo]:
            continue  # inside one winner
        best = min(labels[lo:hi], key=lambda t: t[0])
        starts[lo:hi] = [min(s, starts[lo])]
        ends[lo:hi] = [max(e, ends[hi - 1])]
        labels[lo:hi] = [best]
    return [(s, e, lab[1]) for s, e, lab in zip(starts, ends, labels)]


SHAPE_SETS = 3


def literal_led(pattern: str) -> bool:
    """Whether a match starts with a literal character (after leading flags and the openings of the
    ``m`` group and of a group of alternatives, judged by the first): such a rule wakes up only where
    its literal occurs. A rule led by a character class or
    a guard is awake almost everywhere."""
    p = pattern
    if p.startswith("(?"):
        end = p.find(")")
        if end > 0 and p[2:end].isalpha():
            p = p[end + 1 :]
    for opening in ("(?P<m>", "(?:"):
        if p.startswith(opening):
            p = p[len(opening) :]
    return p[:1].isalnum() or p[:1] in ("-", "_", "<")


class RuleSets:
    """Patterns matched as a few ``re2.Set`` DFAs; ``Match(b)`` gives the indices of those that match.

    One DFA for all rules has too many states: it is built lazily while scanning, and on text full of
    keys, numbers and addresses it keeps building (10 MB/s against 34 for four sets on the planted
    corpus). So the literal-led rules share one set, and the others (each awake almost everywhere) are
    spread over ``SHAPE_SETS`` sets in rule order. Which set a rule is in changes only the speed."""

    def __init__(self, entries: list[tuple[CompiledRule, str]], marker: str | None = None):
        groups: list[list[int]] = [[] for _ in range(SHAPE_SETS + 1)]
        k = 0
        for i, (cr, _pat) in enumerate(entries):
            if literal_led(cr.rule.pattern or ""):
                groups[0].append(i)
            else:
                groups[1 + k % SHAPE_SETS].append(i)
                k += 1
        # the marker (index -1) joins a set that is scanned anyway: a character class adds next to
        # nothing to its DFA
        first = next((g for g in groups if g), None)
        self.marker = marker if first is not None else None
        if self.marker is not None:
            first.append(-1)
        self.parts: list[tuple[Callable[[bytes], list[int] | None], list[int]]] = []
        for idx in groups:
            if not idx:
                continue
            s = re2.Set.SearchSet(_OPTIONS)
            for i in idx:
                try:
                    s.Add(entries[i][1] if i >= 0 else marker)
                except re2.error as exc:
                    rid = entries[i][0].id if i >= 0 else "engine.marker"
                    raise RuleError(rid, f"RE2 set rejected the pattern: {exc}") from None
            s.Compile()
            raw = getattr(s, "_set", None)  # the binding's set itself: no wrapper call per string
            self.parts.append((raw.Match if raw is not None else s.Match, idx))

    def Match(self, b: bytes) -> list[int]:  # noqa: N802 (the re2.Set spelling)
        return self.scan(b)[0]

    def scan(self, b: bytes) -> tuple[list[int], bool]:
        """``(indices of the patterns that match, whether the marker pattern matches)``."""
        out: list[int] = []
        for match, idx in self.parts:
            hits = match(b)
            if hits:
                out.extend([idx[h] for h in hits])
        if self.marker is not None and -1 in out:
            out.remove(-1)
            return out, True
        return out, False


class Engine:
    """Text-level matching for a fixed list of compiled rules (regex and block kinds in the set)."""

    def __init__(
        self, rules: Sequence[CompiledRule], placeholders: Sequence[str] = (), marker: str | None = None
    ):
        self.rules = list(rules)
        self.placeholders = tuple(p.encode() for p in placeholders)
        self.set_rules = [cr for cr in self.rules if cr.set_pattern is not None]
        # ``marker``: a pattern the rule set's pass also answers for (:meth:`scan`), no rule
        entries = [(cr, cr.set_pattern) for cr in self.set_rules]
        self.set = RuleSets(entries, marker) if entries else None
        # Raw-line pre-filter: rules for every field scan the whole JSON line; rules limited to some
        # fields are grouped by their field list and scan only the strings under those fields.
        self.line_set = self._build_set(
            [(cr, cr.line_pattern) for cr in self.set_rules if cr.rule.fields is None]
        )
        groups: dict[tuple[str, ...], list[CompiledRule]] = {}
        for cr in self.set_rules:
            if cr.rule.fields is not None:
                groups.setdefault(cr.rule.fields, []).append(cr)
        self.field_groups = [
            (
                f,
                self._build_set([(cr, cr.set_pattern) for cr in crs]),
                self._build_set([(cr, cr.line_pattern) for cr in crs]),
            )
            for f, crs in groups.items()
        ]

    @staticmethod
    def _build_set(entries: list[tuple[CompiledRule, str]]) -> RuleSets | None:
        return RuleSets(entries) if entries else None

    def line_hits(self, line: bytes) -> bool:
        """Whether a rule for every field may match inside some string of a raw JSON line."""
        return self.line_set is not None and bool(self.line_set.Match(line))

    def hits(self, b: bytes) -> list[int]:
        if self.set is None:
            return []
        return self.set.Match(b)

    def scan(self, b: bytes) -> tuple[list[int], bool | None]:
        """``(hits, whether the marker matches)`` from one set pass; None: not known (no marker)."""
        if self.set is None or self.set.marker is None:
            return self.hits(b), None
        return self.set.scan(b)

    def candidates(
        self,
        b: bytes,
        allowed: frozenset[int] | None,
        literals: Sequence[LiteralRule],
        hits: Sequence[int] | None = None,
    ) -> tuple[list[tuple[int, int, object]], list[tuple[int, int, object]]]:
        """Confirmed spans for one string: (spans to apply, drop matches). ``hits``: set rules known
        to hold every rule that can match ``b`` (the hits of a text it is part of), else one set pass."""
        cands: list[tuple[int, int, object]] = []
        drops: list[tuple[int, int, object]] = []
        protect: list[tuple[int, int]] = []  # surrogates made earlier: nothing inside them matches
        if hits is None:
            hits = self.hits(b)
        for i in sorted(hits):
            if allowed is not None and i not in allowed:
                continue
            cr = self.set_rules[i]
            dest = drops if cr.action == DROP else cands
            if cr.kind == "block":
                ph = cr.placeholder
                for s, e in block_spans(cr, b):
                    if b[s:e] != ph:
                        dest.append((s, e, cr))
            else:
                for s, e in confirmed_spans(cr, b, protect):
                    dest.append((s, e, cr))
        placeholders = self.placeholders
        for lr in literals:
            for s, e in iter_spans(lr.match_in(b), 0, b):
                seg = b[s:e]
                # Text that already holds a redaction is not a new quote: a source and a writer string
                # redacted alike would otherwise match on the second pass.
                if b"[" in seg and any(ph in seg for ph in placeholders):
                    continue
                cands.append((s, e, lr))
        if protect and cands:
            cands = _outside(cands, protect)
        return cands, drops


def _outside(cands: list, protect: list[tuple[int, int]]) -> list:
    """The candidates that overlap no protected span (spans sorted by start; a candidate is checked
    against the last span starting before its end and the one before that)."""
    protect.sort()
    starts = [p[0] for p in protect]
    out = []
    for c in cands:
        k = bisect_right(starts, c[1] - 1) - 1
        hit = False
        for j in (k, k - 1):
            if j >= 0 and c[0] < protect[j][1] and protect[j][0] < c[1]:
                hit = True
                break
        if not hit:
            out.append(c)
    return out


_sha256 = hashlib.sha256


def digest(salt: bytes, seg: bytes) -> str:
    """Salted hash of matched text for reports: SHA-256 over salt, NUL, text; 16 hex digits."""
    return _sha256(salt + b"\x00" + seg).hexdigest()[:16]


def apply_spans(
    text: str,
    b: bytes,
    chosen: list[tuple[int, int, object]],
    drops: list[tuple[int, int, object]],
    salt: bytes,
    path: str,
    context: str,
) -> tuple[str, list[Finding]]:
    """Rebuild the string with the chosen spans replaced (redact) or removed (strip); one finding per
    applied span and per drop match. Character offsets are computed in one left-to-right pass."""
    ascii_text = text.isascii()
    findings: list[Finding] = []
    add = findings.append
    salted = salt + b"\x00"
    sha = _sha256
    hashes: dict[bytes, str] = {}  # a flood of one text is hashed once
    new = tuple.__new__
    if chosen:
        pieces: list[bytes] = []
        put = pieces.append
        pos = pos_chars = 0
        for s, e, cr in chosen:
            seg = b[s:e]
            gap = b[pos:s]
            if ascii_text:
                cs, ln = s, e - s
            else:
                cs = pos_chars + len(gap.decode("utf-8", "replace"))
                ln = len(seg.decode("utf-8", "replace"))
                pos_chars = cs + ln
            h = hashes.get(seg)
            if h is None:
                h = hashes[seg] = sha(salted + seg).hexdigest()[:16]
            add(new(Finding, (cr.id, cr.action, path, cs, ln, h, context)))
            put(gap)
            if cr.action == REDACT:
                put(cr.placeholder)
            elif cr.action == PSEUDONYMIZE:
                put(cr.pseudo(seg))
            pos = e
        put(b[pos:])
        text = b"".join(pieces).decode("utf-8", "surrogatepass")
    if drops:
        drops.sort(key=lambda c: c[0])
        pos = pos_chars = 0
        for s, e, cr in drops:
            seg = b[s:e]
            if ascii_text:
                cs, ln = s, e - s
            else:
                cs = pos_chars + len(b[pos:s].decode("utf-8", "replace"))
                ln = len(seg.decode("utf-8", "replace"))
                pos, pos_chars = s, cs
            add(Finding(cr.id, DROP, path, cs, ln, sha(salted + seg).hexdigest()[:16], context))
    return text, findings
