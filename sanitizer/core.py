"""The Python API: load packs once, sanitize strings and structured records, get the findings.

>>> san = Sanitizer.from_packs(["reasoning", "secrets", "leakage"])
>>> res = san.sanitize_record(record, dynamic_literals=record["metadata"]["hidden_identifiers"])
>>> res.record, res.findings, res.dropped, res.drop_reasons

Only string values change. Keys, numbers, booleans, nulls, list lengths and the strings under protected
keys (call ids, run ids) are left as they are; the input record is never mutated (the result shares the
unchanged sub-objects with it). Sanitizing is repeated on a changed string until it stops changing
(``max_passes``), so a second call changes nothing more.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import json
import secrets
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path
from typing import Any

from sanitizer.engine import (
    DROP,
    HIDDEN_ID_PLACEHOLDER,
    HIDDEN_ID_RULE,
    PSEUDONYMIZE,
    CompiledRule,
    Engine,
    Finding,
    LiteralRule,
    apply_spans,
    block_spans,
    confirmed_spans,
    literal_finder,
    literal_regex,
    resolve,
)
from sanitizer.fieldpath import covered_by_any, covers, format_path, normalize_selector
from sanitizer.pseudonym import Pseudonymizer, drop_title
from sanitizer.rules import DEFAULT_PACKS, Rule, RuleError, load_packs

# Only for rule self-tests (their findings never leave the process). Reports get a random salt unless
# the caller passes a private one: a public salt lets anyone brute-force the hash of a short secret.
DEFAULT_SALT = "ledgerwright-sanitizer-v1"
INVISIBLE_RULE = "normalize.invisible_chars"
# Zero-width and other invisible format characters: deleted before matching, so a key split by one
# (AKIA\u200b...) is found whole. They carry no meaning in ledger text.
INVISIBLE_CHARS = "\u200b\u200c\u200d\u2060\ufeff\u00ad\u180e\u2061\u2062\u2063\u2064"
_INVISIBLE = dict.fromkeys(map(ord, INVISIBLE_CHARS))
INVISIBLE_PATTERN = "[" + "".join(f"\\x{{{ord(c):04x}}}" for c in INVISIBLE_CHARS) + "]"


def has_invisible(text: str) -> bool:
    return not text.isascii() and any(c in text for c in INVISIBLE_CHARS)


_B64_ALT = bytes.maketrans(b"-_", b"+/")
_TEXT_BYTES = bytes([9, 10, 13, *range(32, 127)])
BASE64_WINDOW = 16384  # a base64 run longer than this is checked on its first 16 KiB
DEFAULT_PROTECTED_KEYS = ("call_id", "cited_call_ids", "target_call_ids", "run_id", "workflow_id", "schema")
DEFAULT_DYNAMIC_EXCLUDE = ("metadata.hidden_identifiers",)
HIDDEN_ID_PRIORITY = 90
_PATH_CACHE_MAX = 50_000
RULE_SCANS_MAX = 6  # more rules hit in a join than this: each string gets its own set pass instead


@dataclass(slots=True)
class SanitizeResult:
    record: dict
    findings: list[Finding] = field(default_factory=list)
    dropped: bool = False
    drop_reasons: list[str] = field(default_factory=list)
    prefiltered: bool = False  # passed whole by the raw JSON-line pre-filter

    @property
    def changed(self) -> bool:
        return any(f.action != DROP for f in self.findings)


@dataclass(frozen=True, slots=True)
class RuleProblem:
    rule_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class _PathInfo:
    selected: bool  # a string here is sanitized at all
    allowed: frozenset[int] | None  # set-rule indices that apply (None: all)
    dynamic: bool  # hidden-identifier literals apply
    quotes: tuple[int, ...]  # quote rules (by index in self._quote_rules) that apply
    source_of: tuple[int, ...]  # quote rules this path is a source for


class Sanitizer:
    """Rules compiled once; :meth:`sanitize_record` and :meth:`sanitize_text` are thread-compatible."""

    def __init__(
        self,
        rules: Sequence[Rule],
        *,
        salt: str | None = None,
        protected_keys: Iterable[str] = DEFAULT_PROTECTED_KEYS,
        dynamic_exclude: Iterable[str] = DEFAULT_DYNAMIC_EXCLUDE,
        max_passes: int = 4,
        self_test: bool = True,
        pseudonymizer: Pseudonymizer | None = None,
    ):
        ids = [r.id for r in rules]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise RuleError(sorted(dup)[0], "duplicate rule id")
        self.pseudonymizer = pseudonymizer
        self.rules: tuple[Rule, ...] = tuple(self._apply_modes(rules))
        self.salt = secrets.token_hex(16) if salt is None else salt
        self._salt = self.salt.encode()
        self.protected_keys = frozenset(protected_keys)
        self.dynamic_exclude = tuple(normalize_selector(s) for s in dynamic_exclude)
        self.max_passes = max(1, max_passes)
        compiled = [CompiledRule(r, i) for i, r in enumerate(self.rules)]
        self._placeholders = sorted(
            {r.placeholder for r in self.rules if r.placeholder} | {HIDDEN_ID_PLACEHOLDER}
        )
        # the rule set's pass also tells whether a text holds invisible characters
        self._engine = Engine(
            [c for c in compiled if c.kind != "quote"], self._placeholders, marker=INVISIBLE_PATTERN
        )
        self._quote_rules = [c for c in compiled if c.kind == "quote"]
        self._b64_inner = [c for c in self._engine.set_rules if c.rule.validate != "base64_secret"]
        for c in compiled:
            if c.rule.validate == "base64_secret":
                c.check = self._base64_secret
            if c.action == PSEUDONYMIZE:
                if self.pseudonymizer is None:
                    self.pseudonymizer = Pseudonymizer()  # a random key: surrogates differ per instance
                c.pseudo = self._pseudo_fn(c.rule.pii)
                c.surrogates = self.pseudonymizer.made
                c.surrogate_lengths = self.pseudonymizer.made_lengths
        self._name_rules = [
            (i, c) for i, c in enumerate(self._engine.set_rules) if c.rule.pii == "person_name"
        ]
        self._path_cache: dict[tuple[str, ...] | None, dict[str, _PathInfo]] = {}
        self._fields_norm: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._exempt_cache: dict[str, bool] = {}
        if self_test:
            problems = self.self_test()
            if problems:
                p = problems[0]
                more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
                raise RuleError(p.rule_id, p.reason + more)

    # ------------------------------------------------------------------ construction
    def _apply_modes(self, rules: Sequence[Rule]) -> list[Rule]:
        """Personal-data rules follow their class's mode: keep (rule left out), redact, pseudonymize."""
        out = []
        for r in rules:
            if r.action == PSEUDONYMIZE:
                mode = self.pseudonymizer.mode(r.pii) if self.pseudonymizer is not None else PSEUDONYMIZE
                if mode == "keep":
                    continue
                if mode == "redact":
                    r = dataclasses.replace(r, action="redact")
            out.append(r)
        return out

    def _pseudo_fn(self, cls: str):
        make = self.pseudonymizer.surrogate
        cache: dict[bytes, bytes] = {}  # a flood of one value is mapped once

        def pseudo(seg: bytes) -> bytes:
            out = cache.get(seg)
            if out is None:
                out = make(cls, seg.decode("utf-8", "surrogatepass")).encode("utf-8", "surrogatepass")
                if len(cache) > _PATH_CACHE_MAX:
                    cache.clear()
                cache[seg] = out
            return out

        return pseudo

    def _base64_secret(self, seg: bytes) -> tuple[int, int] | None:
        """A base64 (or base64url) run whose decoded text holds a secret another rule finds; a run
        glued to an id by ``-`` or ``_`` (``c3-QUtJ...``) is also tried from after each of them."""
        if self._base64_holds_secret(seg):
            return 0, len(seg)
        for i, c in enumerate(seg):
            if c in b"-_" and len(seg) - i > 16 and self._base64_holds_secret(seg[i + 1 :]):
                return i + 1, len(seg)
        return None

    def _base64_holds_secret(self, seg: bytes) -> bool:
        return self._base64_check(seg) is not None

    def _base64_check(self, seg: bytes) -> tuple[int, int] | None:
        raw = seg.rstrip(b"=")
        if len(raw) < 16 or raw.lower() == raw or raw.upper() == raw:
            return None  # base64 of text has both cases; a lower-case identifier is not base64
        raw = raw[: BASE64_WINDOW - BASE64_WINDOW % 4] if len(raw) > BASE64_WINDOW else raw
        if len(raw) % 4 == 1:
            raw = raw[:-1]
        try:
            data = base64.b64decode(raw.translate(_B64_ALT) + b"=" * (-len(raw) % 4), validate=True)
        except (binascii.Error, ValueError):
            return None
        if len(data) < 12 or len(data.translate(None, _TEXT_BYTES)) > 0.1 * len(data):
            return None
        hits = self._engine.hits(data)
        if not hits:
            return None
        rules = self._engine.set_rules
        for i in hits:
            cr = rules[i]
            if cr.rule.validate == "base64_secret" or cr.action not in ("redact", PSEUDONYMIZE):
                continue
            if cr.rule.pack != "secrets" or cr.rule.pii is not None:
                continue
            if cr.kind == "block":
                if block_spans(cr, data):
                    return 0, len(seg)
            elif next(confirmed_spans(cr, data), None) is not None:
                return 0, len(seg)
        return None

    @classmethod
    def from_packs(
        cls,
        packs: Iterable[str | Path] | str = DEFAULT_PACKS,
        packs_dir: str | Path | None = None,
        **kwargs: Any,
    ) -> Sanitizer:
        """Load rule packs by name (``configs/sanitizer/<name>.yaml``) or path, compile, self-test."""
        if isinstance(packs, str):
            packs = [p.strip() for p in packs.split(",") if p.strip()]
        rules = [r for pack in load_packs(packs, packs_dir) for r in pack.rules]
        return cls(rules, **kwargs)

    @property
    def rule_ids(self) -> list[str]:
        return [r.id for r in self.rules] + [HIDDEN_ID_RULE]

    def action_of(self, rule_id: str) -> str:
        for r in self.rules:
            if r.id == rule_id:
                return r.action
        return "redact"

    # ------------------------------------------------------------------ self-test
    def self_test(self) -> list[RuleProblem]:
        """Every rule's own examples, each rule alone; then no placeholder may trigger any rule."""
        secrets_rules = tuple(r for r in self.rules if r.pack == "secrets")
        problems = [
            RuleProblem(r.id, reason)
            for r in self.rules
            for reason in check_rule(r, self.salt, companions=secrets_rules)
        ]
        return problems or self.placeholder_problems()

    def placeholder_problems(self) -> list[RuleProblem]:
        """A placeholder that some rule matches would make sanitizing not idempotent."""
        problems = []
        for ph, rid in sorted({(r.placeholder, r.id) for r in self.rules if r.placeholder}):
            for text in (ph, f"x {ph} y", f"{ph}{ph}"):
                out, fnd, dropped = self.sanitize_text(text)
                if out != text or fnd or dropped:
                    hit = fnd[0].rule_id if fnd else "?"
                    problems.append(RuleProblem(rid, f"placeholder {ph} is matched by {hit}"))
                    break
        return problems

    # ------------------------------------------------------------------ text
    def sanitize_text(
        self,
        text: str,
        dynamic_literals: Iterable[str] = (),
        *,
        path: str | None = None,
        quote_literals: Iterable[str] = (),
        context: str = "",
        names: Iterable[str] = (),
        may_hit: Sequence[int] | None = None,
    ) -> tuple[str, list[Finding], bool]:
        """Sanitize one string. ``path`` (a field path) limits the rules to those whose ``fields``
        cover it; ``None`` applies every rule. ``quote_literals`` are oracle strings for quote rules;
        ``names`` are person names (:meth:`person_names`) treated like the names the rule finds.
        ``may_hit``: the set's hits on a text that holds this one verbatim (:meth:`scan_turns`),
        which spare the first pass its own set scan."""
        allowed, literals = self._text_rules(path, dynamic_literals, quote_literals, names)
        out, findings, drops = self._sanitize_string(text, allowed, literals, path or "", context, may_hit)
        return out, findings, bool(drops)

    def sanitize_texts(
        self,
        texts: Sequence[str],
        dynamic_literals: Iterable[str] = (),
        *,
        path: str | None = None,
        quote_literals: Iterable[str] = (),
        context: str = "",
        names: Iterable[str] = (),
    ) -> list[tuple[str, list[Finding], bool]] | None:
        """:meth:`sanitize_text` of each string (one path for all), or None when nothing changes and
        nothing is found. The strings are scanned joined by newlines (the load-time contract: a
        pattern matches alone as inside the join); only those a raw match touches are sanitized."""
        allowed, literals = self._text_rules(path, dynamic_literals, quote_literals, names)
        joined = "\n".join(texts)
        b = joined.encode("utf-8", "surrogatepass")
        hits, invisible = self._engine.scan(b)
        touched = self._touched(texts, [allowed] * len(texts), literals, joined, b, hits, None, invisible)
        if not touched:
            return None
        out: list[tuple[str, list[Finding], bool]] = [(t, [], False) for t in texts]
        found = False
        for i in touched:
            # the join's hits hold each string's: its first pass needs no set scan of its own
            new, fnd, drops = self._sanitize_string(texts[i], allowed, literals, path or "", context, hits)
            if fnd:
                out[i] = (new, fnd, bool(drops))
                found = True
        return out if found else None

    def _text_rules(
        self,
        path: str | None,
        dynamic_literals: Iterable[str],
        quote_literals: Iterable[str],
        names: Iterable[str] = (),
    ) -> tuple[frozenset[int] | None, list[LiteralRule]]:
        """The set rules that apply at ``path`` (None: all) and the literal rules for a string."""
        if path is None:
            allowed, dyn_ok, quote_ix = None, True, tuple(range(len(self._quote_rules)))
        else:
            info = self._path_info(None, _concrete_to_npath(path))
            allowed, dyn_ok, quote_ix = info.allowed, info.dynamic, info.quotes
        literals = []
        dyn = _hidden_rule(tuple(dynamic_literals)) if dyn_ok and dynamic_literals else None
        if dyn is not None:
            literals.append(dyn)
        quote_literals = tuple(quote_literals)
        for qi in quote_ix if quote_literals else ():  # no source strings: no quote rule
            lr = self._quote_literal_rule(qi, quote_literals)
            if lr is not None:
                literals.append(lr)
        names = tuple(names)
        if names:
            # the name rules all pseudonymize a name alike; of their literal rules for the same span
            # the highest priority would win, so only that one is made
            ok = [cr for i, cr in self._name_rules if allowed is None or i in allowed]
            lr = _name_rule(names, max(ok, key=lambda c: (c.priority, -c.order))) if ok else None
            if lr is not None:
                literals.append(lr)
        return allowed, literals

    def person_names(self, texts: Iterable[str]) -> tuple[str, ...]:
        """The person names the ``person_name`` rules find in these texts (labelled: after a name key
        or a salutation; or a listed given name and a surname; a leading title dropped), sorted:
        passed as ``names`` they are found again wherever they occur, in running prose too, and get
        the same surrogate."""
        return self._names_in("\n".join(texts).encode("utf-8", "surrogatepass"))

    def _names_in(
        self,
        joined: bytes,
        hits: Sequence[int] | None = None,
        seen: dict[int, list[tuple[int, int]]] | None = None,
    ) -> tuple[str, ...]:
        """Names in texts joined by newlines (a name never spans a newline, and the patterns match
        alone as inside the join, checked at load: the names of each text alone). ``hits``: the
        set's hits on ``joined``, when known; a name rule not among them is not run. ``seen`` gets,
        by set-rule index, the raw matches each name rule's search met (see :func:`confirmed_spans`)."""
        found: set[str] = set()
        for i, cr in self._name_rules:
            if hits is not None and i not in hits:
                continue
            raw = None if seen is None else seen.setdefault(i, [])
            for s, e in confirmed_spans(cr, joined, None, raw):
                name = drop_title(joined[s:e].decode("utf-8", "surrogatepass"))
                if name:
                    found.add(name)
        return tuple(sorted(found))

    def scan_turns(
        self, texts: Sequence[str], paths: Sequence[str], dynamic_literals: Iterable[str] = ()
    ) -> tuple[tuple[str, ...], list[int], list[int]]:
        """``(names, touched, hits)`` for the turns of one chat example from one set pass over them
        joined: the :meth:`person_names` of the turns, the indices of the turns that
        :meth:`sanitize_text` (``texts[i]`` at ``paths[i]``, with these literals and those names)
        may change (a superset: the others need no scan of their own), and the set's hits (a
        superset of each turn's, for ``may_hit``)."""
        joined = "\n".join(texts)
        if joined.isascii():
            b, lengths = joined.encode(), None
        else:  # each turn encoded once: the join of the bytes, and each turn's byte length
            parts = [t.encode("utf-8", "surrogatepass") for t in texts]
            b, lengths = b"\n".join(parts), [len(x) for x in parts]
        hits, invisible = self._engine.scan(b)
        seen: dict[int, list[tuple[int, int]]] = {}
        names = self._names_in(b, hits, seen) if hits else ()
        info = {p: self._path_info(None, _concrete_to_npath(p)).allowed for p in set(paths)}
        # a literal rule matches only where its text occurs: the absent ones are left out (a
        # substring test is ten times faster than the alternation with its word boundaries)
        dynamic_literals = tuple(x for x in dynamic_literals if x and x in joined)
        _, literals = self._text_rules(None, dynamic_literals, (), names)
        allowed = [info[p] for p in paths]
        touched = self._touched(texts, allowed, literals, joined, b, hits, lengths, invisible, seen)
        return names, touched, hits

    def _touched(
        self,
        texts: Sequence[str],
        allowed: Sequence[frozenset[int] | None],
        literals: Sequence[LiteralRule],
        joined: str | None = None,
        b: bytes | None = None,
        hits: list[int] | None = None,
        lengths: list[int] | None = None,
        invisible: bool | None = None,
        seen: dict[int, list[tuple[int, int]]] | None = None,
    ) -> list[int]:
        """Indices of the strings a raw match of a rule that applies to them touches (``allowed[i]``:
        the set rules that apply to ``texts[i]``, None for all; confirmers not run), or that hold
        invisible characters: a superset of those :meth:`_sanitize_string` would change. After a
        string is marked the scan resumes at the next string's start. ``lengths`` (the texts' UTF-8
        lengths) and ``invisible`` (whether ``joined`` holds invisible characters) spare the work
        when the caller knows them; ``seen`` (set-rule index: the raw matches a full search of
        ``b`` met) replaces that rule's scan: a text one of them overlaps is marked."""
        if joined is None:
            joined = "\n".join(texts)
        if b is None:
            b = joined.encode("utf-8", "surrogatepass")
        need: set[int] = set()
        if joined.isascii():
            lengths = map(len, texts)
        else:
            if lengths is None:  # the texts' byte lengths, unless the caller has them
                lengths = [len(t.encode("utf-8", "surrogatepass")) for t in texts]
            if has_invisible(joined) if invisible is None else invisible:
                need.update(i for i, t in enumerate(texts) if has_invisible(t))
        starts = [0, *accumulate(n + 1 for n in lengths)]
        starts.pop()
        engine = self._engine
        kinds = set(allowed)
        scans: list[tuple[Any, int]] = []  # (match, set-rule index; -1 for a literal rule)
        for h in engine.hits(b) if hits is None else hits:
            if None not in kinds and not any(h in a for a in kinds):
                continue
            if seen is not None and h in seen:  # searched already: every match overlaps one seen
                _mark_overlapped(need, seen[h], starts, allowed, h)
                continue
            cr = engine.set_rules[h]
            scans.append((cr.match, h))
            if cr.close_match is not None:
                scans.append((cr.close_match, h))
        if len(scans) > RULE_SCANS_MAX and len(texts) > 1:
            # many rules hit: one set pass per text costs less than a scan of the join per rule
            for i, t in enumerate(texts):
                if i not in need:
                    a = allowed[i]
                    if any(a is None or h in a for h in engine.hits(t.encode("utf-8", "surrogatepass"))):
                        need.add(i)
            scans = []
        # literal rules first: a name or an id that occurs marks its text, which no rule scans again
        scans[:0] = [(lr.match_in(b), -1) for lr in literals]
        n = len(b)
        last_text = len(starts) - 1
        for match, h in scans:
            pos = k = 0
            while pos <= n:
                while k in need:  # a text marked already needs no scan
                    k += 1
                if k > last_text:
                    break
                pos = max(pos, starts[k])
                spans = match(b, pos, n)
                if spans is None:
                    break
                s0, e0 = spans[0]
                first = bisect_right(starts, s0) - 1
                last = bisect_right(starts, max(e0 - 1, s0)) - 1
                for i in range(first, last + 1):
                    a = allowed[i]
                    if h < 0 or a is None or h in a:
                        need.add(i)
                if last + 1 >= len(starts):
                    break
                pos = starts[last + 1]
                k = last + 1
        return sorted(need)

    def may_match(self, text: str, path: str | None = None) -> bool:
        """Whether a rule that applies at ``path`` may match in ``text`` (one set pass; literal
        rules not counted): False means :meth:`sanitize_text` would change nothing."""
        hits = self._engine.hits(text.encode("utf-8", "surrogatepass"))
        if not hits:
            return False
        if path is None:
            return True
        allowed = self._path_info(None, _concrete_to_npath(path)).allowed
        return allowed is None or any(h in allowed for h in hits)

    def may_change(self, text: str, path: str | None = None, literals: Iterable[str] = ()) -> bool:
        """Whether :meth:`sanitize_text` with these dynamic literals or names (and no quote literals)
        may change or find anything; False is certain. A literal rule matches only where its text
        occurs, so a substring test rules it out before any regex runs."""
        if has_invisible(text):
            return True
        for lit in literals:
            if lit and lit in text:
                return True
        return self.may_match(text, path)

    def _quotable(self, text: str, min_length: int) -> bool:
        """A source string long enough to be a quote once placeholders (earlier redactions) are
        left out: a source that is itself redacted would otherwise match its own placeholder."""
        if len(text.strip()) < min_length:
            return False
        if "[" in text:
            for ph in self._placeholders:
                text = text.replace(ph, "")
        return len(text.strip()) >= min_length

    def _quote_literal_rule(self, qi: int, values: Iterable[str]) -> LiteralRule | None:
        cr = self._quote_rules[qi]
        # a source is quoted as the output will hold it: invisible characters are stripped from every
        # string, so a source keeping them would miss a quote now and match it on a second pass
        values = (v.translate(_INVISIBLE) if has_invisible(v) else v for v in values)
        lits = tuple(v for v in values if self._quotable(v, cr.rule.min_length))
        rx = literal_regex(lits) if lits else None
        if rx is None:
            return None
        return LiteralRule(cr.id, cr.rule.placeholder, cr.priority, cr.order, rx, lits)

    def _sanitize_string(
        self,
        text: str,
        allowed: frozenset[int] | None,
        literals: Sequence[LiteralRule],
        path: str,
        context: str,
        may_hit: Sequence[int] | None = None,
    ) -> tuple[str, list[Finding], list[str]]:
        engine = self._engine
        findings: list[Finding] = []
        drops: list[str] = []
        if has_invisible(text):
            stripped = text.translate(_INVISIBLE)
            findings.append(Finding(INVISIBLE_RULE, "strip", path, 0, len(text) - len(stripped), "", context))
            text = stripped
            may_hit = None  # the scanned text still held them
        for _ in range(self.max_passes):
            b = text.encode("utf-8", "surrogatepass")
            active = [lr for lr in literals if lr.finds or not lr.absent_from(text)] if literals else literals
            cands, drop_spans = engine.candidates(b, allowed, active, may_hit)
            may_hit = None  # a changed text is scanned afresh
            if not cands and not drop_spans:
                break
            chosen = resolve(cands)
            new_text, fnd = apply_spans(text, b, chosen, drop_spans, self._salt, path, context)
            findings.extend(fnd)
            for _s, _e, cr in drop_spans:
                if cr.id not in drops:
                    drops.append(cr.id)
            if new_text == text:
                break
            text = new_text
        return text, findings, drops

    # ------------------------------------------------------------------ records
    def _path_info(self, fields: tuple[str, ...] | None, npath: str) -> _PathInfo:
        cache = self._path_cache.get(fields)
        if cache is None:
            cache = self._path_cache[fields] = {}
        info = cache.get(npath)
        if info is not None:
            return info
        selected = covered_by_any(fields, npath)
        allowed = []
        for i, cr in enumerate(self._engine.set_rules):
            r = cr.rule
            if covered_by_any(r.fields, npath) and not covered_by_any(r.exclude_fields, npath):
                allowed.append(i)
        allowed_fs = None if len(allowed) == len(self._engine.set_rules) else frozenset(allowed)
        dynamic = not any(covers(s, npath) for s in self.dynamic_exclude)
        quotes, source_of = [], []
        for qi, cr in enumerate(self._quote_rules):
            r = cr.rule
            if any(covers(s, npath) for s in r.sources):
                source_of.append(qi)
            elif covered_by_any(r.fields, npath) and not covered_by_any(r.exclude_fields, npath):
                quotes.append(qi)
        info = _PathInfo(selected, allowed_fs, dynamic, tuple(quotes), tuple(source_of))
        if len(cache) > _PATH_CACHE_MAX:
            cache.clear()
        cache[npath] = info
        return info

    def _collect(self, obj: dict, fields: tuple[str, ...] | None) -> tuple[list, dict[int, list[str]]]:
        """Every selected string of the record as ``(container keys, key, value, info)``, and the values
        of quote-rule source fields by quote rule."""
        items: list[tuple[tuple, Any, str, _PathInfo]] = []
        sources: dict[int, list[str]] = {}
        protected = self.protected_keys
        cache = self._path_cache.get(fields)
        if cache is None:
            cache = self._path_cache[fields] = {}
        path_info = self._path_info

        def leaf(keys: tuple, k: Any, value: str, npath: str) -> None:
            info = cache.get(npath) or path_info(fields, npath)
            if info.selected:
                items.append((keys, k, value, info))
            for qi in info.source_of:
                sources.setdefault(qi, []).append(value)

        def walk_dict(node: dict, keys: tuple, npath: str) -> None:
            for k, v in node.items():
                if k in protected:
                    continue
                t = type(v)
                if t is str:
                    leaf(keys, k, v, f"{npath}.{k}" if npath else k)
                elif t is dict:
                    walk_dict(v, keys + (k,), f"{npath}.{k}" if npath else k)
                elif t is list:
                    walk_list(v, keys + (k,), f"{npath}.{k}[]" if npath else f"{k}[]")

        def walk_list(node: list, keys: tuple, npath: str) -> None:
            for i, v in enumerate(node):
                t = type(v)
                if t is str:
                    leaf(keys, i, v, npath)
                elif t is dict:
                    walk_dict(v, keys + (i,), npath)
                elif t is list:
                    walk_list(v, keys + (i,), npath + "[]")

        walk_dict(obj, (), "")
        return items, sources

    def _literal_rules(
        self, dynamic_literals: Iterable[str], sources: dict[int, list[str]]
    ) -> tuple[LiteralRule | None, dict[int, LiteralRule]]:
        dyn = tuple(dynamic_literals) if dynamic_literals else ()
        dyn_rx = literal_regex(dyn) if dyn else None
        dyn_lr = (
            LiteralRule(HIDDEN_ID_RULE, HIDDEN_ID_PLACEHOLDER, HIDDEN_ID_PRIORITY, -1, dyn_rx, dyn)
            if dyn_rx
            else None
        )
        quote_lrs: dict[int, LiteralRule] = {}
        for qi, vals in sources.items():
            lr = self._quote_literal_rule(qi, vals)
            if lr is not None:
                quote_lrs[qi] = lr
        return dyn_lr, quote_lrs

    def sanitize_record(
        self,
        record: dict,
        fields: Sequence[str] | None = None,
        dynamic_literals: Iterable[str] = (),
        context: str = "",
    ) -> SanitizeResult:
        """Sanitize the string values of a JSON-like record.

        ``fields``: selectors (``model_ledger[].description``, ``teacher``...), ``None`` for every
        string. ``dynamic_literals``: this workflow's hidden identifiers, redacted as ``[HIDDEN_ID]``.
        ``context`` is copied into every finding (e.g. ``"runs.jsonl:12"``).
        """
        if not isinstance(record, dict):
            raise TypeError(f"sanitize_record expects a dict, got {type(record).__name__}")
        fkey = self._fields_key(fields)
        items, sources = self._collect(record, fkey)
        if not items:
            return SanitizeResult(dict(record))
        dyn_lr, quote_lrs = self._literal_rules(dynamic_literals, sources)
        need = self._to_scan(items, dyn_lr, quote_lrs)
        if not need:
            return SanitizeResult(dict(record))
        findings: list[Finding] = []
        drop_reasons: list[str] = []
        changes: list[tuple[tuple, str]] = []
        for n in need:
            keys, k, value, info = items[n]
            literals = []
            if dyn_lr is not None and info.dynamic:
                literals.append(dyn_lr)
            for qi in info.quotes:
                lr = quote_lrs.get(qi)
                if lr is not None:
                    literals.append(lr)
            if info.allowed is not None and not info.allowed and not literals:
                continue
            new, fnd, drops = self._sanitize_string(
                value, info.allowed, literals, format_path(keys + (k,)), context
            )
            if not fnd:
                continue
            findings.extend(fnd)
            for d in drops:
                if d not in drop_reasons:
                    drop_reasons.append(d)
            if new != value:
                changes.append((keys + (k,), new))
        return SanitizeResult(_rebuild(record, changes), findings, bool(drop_reasons), drop_reasons)

    def _fields_key(self, fields: Sequence[str] | None) -> tuple[str, ...] | None:
        if fields is None:
            return None
        key = tuple(fields)
        norm = self._fields_norm.get(key)
        if norm is None:
            norm = self._fields_norm[key] = tuple(normalize_selector(f) for f in fields)
        return norm

    def _to_scan(
        self, items: list, dyn_lr: LiteralRule | None, quote_lrs: dict[int, LiteralRule]
    ) -> list[int]:
        """Record pre-filter: which items may change. Strings are joined by newlines per group of
        applicable rules and scanned once per group (patterns are checked at load to match the same
        alone and inside the join); literal rules scan the strings they apply to."""
        need: set[int] = set()
        groups: dict[frozenset[int] | None, list[int]] = {}
        for n, it in enumerate(items):
            groups.setdefault(it[3].allowed, []).append(n)
            if has_invisible(it[2]):
                need.add(n)
        hits_of = self._engine.hits
        for allowed, idx in groups.items():
            if allowed is not None and not allowed:
                continue
            hits = hits_of(_join(items, idx))
            if hits and (allowed is None or any(h in allowed for h in hits)):
                need.update(idx)
        if dyn_lr is not None:
            idx = [n for n, it in enumerate(items) if it[3].dynamic and n not in need]
            if idx and dyn_lr.regex.search(_join(items, idx)) is not None:
                need.update(idx)
        for qi, lr in quote_lrs.items():
            idx = [n for n, it in enumerate(items) if qi in it[3].quotes and n not in need]
            if idx and lr.regex.search(_join(items, idx)) is not None:
                need.update(idx)
        return sorted(need)

    # ------------------------------------------------------------------ JSON lines
    def sanitize_json_line(
        self,
        line: bytes | str,
        fields: Sequence[str] | None = None,
        hidden_ids_field: str | None = "metadata.hidden_identifiers",
        context: str = "",
    ) -> SanitizeResult:
        """Parse one JSONL line and sanitize it; the hidden identifiers are read from the record.

        Raises ``ValueError`` for a malformed line (bad UTF-8, bad JSON, non-finite numbers, not an
        object). A line whose strings appear in it verbatim (no escapes other than ``\\n \\t \\r``,
        which are decoded in place) is first scanned whole by a set of the patterns adapted to JSON
        string delimiters; when nothing can match, the record is returned without walking it
        (``prefiltered``). Any doubt falls back to :meth:`sanitize_record`.
        """
        record = json.loads(line, parse_constant=_reject_constant)
        if not isinstance(record, dict):
            raise ValueError(f"expected a JSON object, got {type(record).__name__}")
        ids = hidden_ids(record, hidden_ids_field)
        raw = _plain_json(line.encode("utf-8", "surrogatepass") if isinstance(line, str) else line)
        if raw is not None and not raw.isascii() and any(z in raw for z in _INVISIBLE_UTF8):
            raw = None
        if (
            raw is not None
            and not self._engine.line_hits(raw)
            and self._field_groups_clean(record, raw)
            and self._line_literals_clean(record, raw, ids, hidden_ids_field)
        ):
            return SanitizeResult(record, prefiltered=True)
        return self.sanitize_record(record, fields, ids, context)

    def _field_groups_clean(self, record: dict, raw: bytes) -> bool:
        """Rules limited to some fields scan only the text of those fields: for a top-level field, its
        slice of the (plain) raw line, from its key to the next top-level key; otherwise the
        sub-objects serialized alone (or, when that text has escapes, their strings joined)."""
        keys = None
        for fields, rset, line_set in self._engine.field_groups:
            rest = []
            for sel in fields:
                steps = _selector_steps(sel)
                name = steps[0][0]
                if name not in record:
                    continue
                if len(steps) == 1:
                    if keys is None:
                        keys = list(record)
                    piece = _top_level_slice(raw, keys, name)
                    if piece is not None:
                        if line_set.Match(piece):
                            return False
                        continue
                rest.extend(_nodes_at(record, sel))
            if not rest:
                continue
            text = _plain_json(json.dumps(rest, ensure_ascii=False).encode("utf-8", "surrogatepass"))
            if text is not None:
                if line_set.Match(text):
                    return False
                continue
            strings = [x for node in rest for x in _strings_in(node)]
            if strings and rset.Match("\n".join(strings).encode("utf-8", "surrogatepass")):
                return False
        return True

    def _exempt_field(self, ids_field: str) -> bool:
        hit = self._exempt_cache.get(ids_field)
        if hit is None:
            npath = _concrete_to_npath(ids_field)
            hit = self._exempt_cache[ids_field] = any(covers(s, npath) for s in self.dynamic_exclude)
        return hit

    def _line_literals_clean(self, record: dict, raw: bytes, ids: list[str], ids_field: str | None) -> bool:
        """True when no literal rule can fire. Plain substring counts, no regex: every occurrence of a
        hidden identifier in the raw line must lie in the listed identifiers themselves (when their
        field is exempt), every occurrence of an oracle literal in its own source strings. Without
        backslashes in the line a string's text appears verbatim, so equal counts mean no other use."""
        if ids:
            exempt: list[bytes] = []
            if ids_field and self._exempt_field(ids_field):
                exempt = [x.encode("utf-8", "surrogatepass") for x in _strings_at(record, ids_field)]
            for lit in {x.encode("utf-8", "surrogatepass") for x in ids}:
                n = raw.count(lit)
                if n and n != sum(x.count(lit) for x in exempt):
                    return False
        for cr in self._quote_rules:
            sels = [sel for sel in cr.rule.sources if _selector_steps(sel)[0][0] in record]
            if not sels:
                continue
            src = [x for sel in sels for x in _strings_under(record, sel)]
            if not src:
                continue
            enc = [x.encode("utf-8", "surrogatepass") for x in src]
            for lit, text in zip(enc, src):
                if not self._quotable(text, cr.rule.min_length):
                    continue
                n = raw.count(lit)
                if n and n != sum(x.count(lit) for x in enc):
                    return False
        return True


def _mark_overlapped(
    need: set[int],
    spans: list[tuple[int, int]],
    starts: list[int],
    allowed: Sequence[frozenset[int] | None],
    h: int,
) -> None:
    """Add to ``need`` the texts (starting at ``starts`` in their join) that a span overlaps and
    where set rule ``h`` applies (an empty span marks the text it sits in)."""
    for s0, e0 in spans:
        first = bisect_right(starts, s0) - 1
        last = bisect_right(starts, max(e0 - 1, s0)) - 1
        for i in range(first, last + 1):
            a = allowed[i]
            if a is None or h in a:
                need.add(i)


_INVISIBLE_UTF8 = tuple(c.encode() for c in INVISIBLE_CHARS)
_SIMPLE_ESCAPES = ((b"\\n", b"\n"), (b"\\t", b"\t"), (b"\\r", b"\r"), (b"\\/", b"/"))


def _plain_json(raw: bytes) -> bytes | None:
    """The JSON text with every string's value in it verbatim, or None when that cannot be had
    cheaply. Without an escaped backslash, every backslash opens an escape; ``\\n \\t \\r \\/`` are
    decoded in place, and any other escape (``\\"``, ``\\u``) gives up."""
    if b"\\" not in raw:
        return raw
    if b"\\\\" in raw:
        return None
    for esc, char in _SIMPLE_ESCAPES:
        raw = raw.replace(esc, char)
    return None if b"\\" in raw else raw


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} is not valid JSON")


def hidden_ids(record: dict, field: str | None) -> list[str]:
    """The workflow's hidden canonical identifiers listed in the record (non-strings ignored)."""
    if not field:
        return []
    return [v for v in _strings_at(record, field) if v]


def _strings_at(record: dict, dotted: str) -> list[str]:
    node: Any = record
    for part in _dotted_parts(dotted):
        if not isinstance(node, dict) or part not in node:
            return []
        node = node[part]
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [v for v in node if isinstance(v, str)]
    return []


@functools.lru_cache(maxsize=1024)
def _hidden_rule(literals: tuple[str, ...]) -> LiteralRule | None:
    """The hidden-identifier rule for one workflow's identifiers (made once per list)."""
    finder = literal_finder(literals)
    rx = None if finder is not None else literal_regex(literals)
    if finder is None and rx is None:
        return None
    return LiteralRule(HIDDEN_ID_RULE, HIDDEN_ID_PLACEHOLDER, HIDDEN_ID_PRIORITY, -1, rx, literals, finder)


@functools.lru_cache(maxsize=1024)
def _name_rule(names: tuple[str, ...], cr: CompiledRule) -> LiteralRule | None:
    """The person names of one example as a literal rule acting like the name rule itself."""
    finder = literal_finder(names)
    rx = None if finder is not None else literal_regex(names)
    if finder is None and rx is None:
        return None
    lr = LiteralRule(cr.id, cr.rule.placeholder or "", cr.priority, cr.order, rx, names, finder)
    lr.action, lr.pseudo = cr.action, cr.pseudo
    return lr


@functools.lru_cache(maxsize=256)
def _dotted_parts(dotted: str) -> tuple[str, ...]:
    return tuple(dotted.split("."))


@functools.lru_cache(maxsize=4096)
def _selector_steps(selector: str) -> tuple[tuple[str, int], ...]:
    steps = []
    for part in selector.split("."):
        name, lists = part, 0
        while name.endswith("[]"):
            name, lists = name[:-2], lists + 1
        steps.append((name, lists))
    return tuple(steps)


def _top_level_slice(raw: bytes, keys: list[str], name: str) -> bytes | None:
    """The bytes of a plain JSON object line from the key ``name`` to the next top-level key: the
    whole text of that member. In a plain line (no ``\\"`` escapes) a quote only delimits strings,
    so a key token found exactly once is that member's key. None when that cannot be told."""
    tok = b'"' + name.encode("utf-8", "surrogatepass") + b'"'
    if raw.count(tok) != 1:
        return None
    start = raw.find(tok)
    i = keys.index(name)
    if i + 1 == len(keys):
        return raw[start:]
    nxt = b'"' + keys[i + 1].encode("utf-8", "surrogatepass") + b'"'
    if raw.count(nxt) != 1:
        return None
    end = raw.find(nxt)
    return raw[start:end] if end > start else None


def _nodes_at(record: dict, selector: str) -> list[Any]:
    """The values a normalized selector (``a.b[].c``) points at."""
    steps = _selector_steps(selector)
    name, lists = steps[0]
    if name not in record:
        return []
    nodes: list[Any] = [record[name]]
    for _ in range(lists):
        nodes = [x for n in nodes if type(n) is list for x in n]
    for name, lists in steps[1:]:
        nodes = [n[name] for n in nodes if type(n) is dict and name in n]
        for _ in range(lists):
            nodes = [x for n in nodes if type(n) is list for x in n]
        if not nodes:
            break
    return nodes


def _strings_in(node: Any) -> list[str]:
    out: list[str] = []
    stack = [node]
    while stack:
        n = stack.pop()
        t = type(n)
        if t is str:
            out.append(n)
        elif t is dict:
            stack.extend(n.values())
        elif t is list:
            stack.extend(n)
    return out


def _strings_under(record: dict, selector: str) -> list[str]:
    """Every string at or below a normalized selector."""
    return [x for node in _nodes_at(record, selector) for x in _strings_in(node)]


def _join(items: list, idx: list[int]) -> bytes:
    return "\n".join([items[n][2] for n in idx]).encode("utf-8", "surrogatepass")


@functools.lru_cache(maxsize=4096)
def _concrete_to_npath(path: str) -> str:
    try:
        return normalize_selector(path)
    except ValueError:
        return path


def _normalize_path(path: str) -> str:
    try:
        return normalize_selector(path)
    except ValueError:
        return path


def _rebuild(record: dict, changes: list[tuple[tuple, str]]) -> dict:
    """Copy-on-write: a new top-level dict, new containers along each changed path, the rest shared."""
    root = dict(record)
    fresh = {id(root)}
    for keys, value in changes:
        node = root
        for k in keys[:-1]:
            child = node[k]
            if id(child) not in fresh:
                child = dict(child) if isinstance(child, dict) else list(child)
                fresh.add(id(child))
                node[k] = child
            node = child
        node[keys[-1]] = value
    return root


def check_rule(rule: Rule, salt: str = DEFAULT_SALT, companions: Sequence[Rule] = ()) -> list[str]:
    """Problems with one rule, checked alone: it compiles under RE2 and its own examples behave.

    Positive examples must produce a finding of this rule (and exactly ``expect`` when given);
    negative examples must produce none; sanitizing a positive example's output again must change
    nothing (idempotence)."""
    if rule.action == PSEUDONYMIZE:
        rule = dataclasses.replace(rule, action="redact")
    others: list[Rule] = []
    if rule.validate == "base64_secret":  # it confirms by running the other secret rules on decoded text
        others = [
            r for r in companions if r.id != rule.id and r.validate != "base64_secret" and r.pii is None
        ]
    try:
        san = Sanitizer([rule, *others], salt=salt, self_test=False)
    except RuleError as exc:
        return [exc.reason]
    problems = []
    for i, ex in enumerate(rule.positive):
        out, fnd, dropped = san.sanitize_text(ex.text, quote_literals=ex.sources)
        if not any(f.rule_id == rule.id for f in fnd):
            problems.append(f"positive example {i + 1} {_short(ex.text)} did not match")
            continue
        if ex.expect is not None and out != ex.expect:
            problems.append(f"positive example {i + 1} gave {_short(out)}, expected {_short(ex.expect)}")
        again, fnd2, _ = san.sanitize_text(out, quote_literals=ex.sources)
        if again != out:
            problems.append(f"positive example {i + 1} is not idempotent: {_short(out)} -> {_short(again)}")
    for i, ex in enumerate(rule.negative):
        out, fnd, dropped = san.sanitize_text(ex.text, quote_literals=ex.sources)
        if any(f.rule_id == rule.id for f in fnd) or (not others and out != ex.text):
            problems.append(f"negative example {i + 1} {_short(ex.text)} matched")
    return problems


def _short(s: str, n: int = 60) -> str:
    return repr(s if len(s) <= n else s[: n - 3] + "...")
