"""Rules as data: the YAML rule-pack format, its validation, and the typed :class:`Rule`.

A pack is a YAML file under ``configs/sanitizer/`` (see ``sanitizer/README.md`` for the format). Loading
checks the *shape* of every rule here; compiling the pattern with RE2 and running the rule's own examples
happen in :mod:`sanitizer.engine` and :mod:`sanitizer.core`. Every problem is a :class:`RuleError` naming
the rule id and the reason, so a bad rule is refused at load instead of silently weakening a pack.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sanitizer.fieldpath import normalize_selector

DEFAULT_PACKS_DIR = Path(__file__).resolve().parents[1] / "configs" / "sanitizer"
DEFAULT_PACKS = ("reasoning", "secrets", "leakage")

ACTIONS = ("redact", "strip", "drop", "pseudonymize")
KINDS = ("regex", "block", "quote")
VALIDATORS = ("card", "iban", "credential", "high_entropy", "base64_secret", "person_name")
PII_CLASSES = ("email", "iban", "phone", "card", "person_name")
PII_MODES = ("redact", "pseudonymize", "keep")

_RULE_KEYS = {
    "id",
    "description",
    "kind",
    "pattern",
    "close",
    "action",
    "placeholder",
    "fields",
    "exclude_fields",
    "allowlist",
    "allow_patterns",
    "priority",
    "validate",
    "sources",
    "min_length",
    "pii",
    "words",
    "examples",
}
_PACK_KEYS = {"pack", "version", "description", "defaults", "rules"}
_DEFAULT_KEYS = {"action", "fields", "exclude_fields", "priority"}


class RuleError(ValueError):
    """A rule (or pack) that cannot be used: ``rule <id>: <reason>``."""

    def __init__(self, rule_id: str, reason: str):
        super().__init__(f"rule {rule_id}: {reason}")
        self.rule_id = rule_id
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Example:
    """One self-test case: ``text`` must (positive) or must not (negative) be matched by the rule.

    ``expect``, when given, is the exact text the rule alone must produce; ``sources`` feeds a
    ``quote`` rule the oracle strings it would otherwise take from the record.
    """

    text: str
    expect: str | None = None
    sources: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Rule:
    """One sanitizer rule (see the pack format in ``sanitizer/README.md``)."""

    id: str  # "<pack>.<name>"
    pack: str
    description: str
    action: str
    kind: str = "regex"
    pattern: str | None = None
    close: str | None = None
    placeholder: str | None = None
    fields: tuple[str, ...] | None = None
    exclude_fields: tuple[str, ...] = ()
    allowlist: tuple[str, ...] = ()
    allow_patterns: tuple[str, ...] = ()
    priority: int = 50
    validate: str | None = None
    sources: tuple[str, ...] = ()
    min_length: int = 16
    pii: str | None = None  # personal-data class of a pseudonymize rule
    positive: tuple[Example, ...] = ()
    negative: tuple[Example, ...] = ()
    meta: dict = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True, slots=True)
class Pack:
    name: str
    description: str
    path: Path
    rules: tuple[Rule, ...]


def _str_list(value: Any, rule_id: str, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RuleError(rule_id, f"{key} must be a list of strings")
    return tuple(value)


def _selectors(value: Any, rule_id: str, key: str) -> tuple[str, ...]:
    try:
        return tuple(normalize_selector(s) for s in _str_list(value, rule_id, key))
    except ValueError as exc:
        raise RuleError(rule_id, f"{key}: {exc}") from None


def _examples(value: Any, rule_id: str, key: str) -> tuple[Example, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RuleError(rule_id, f"examples.{key} must be a list")
    out = []
    for i, item in enumerate(value):
        if isinstance(item, str):
            out.append(Example(item))
        elif isinstance(item, Mapping) and isinstance(item.get("text"), str):
            extra = set(item) - {"text", "expect", "sources"}
            if extra:
                raise RuleError(rule_id, f"examples.{key}[{i}] has unknown keys {sorted(extra)}")
            expect = item.get("expect")
            if expect is not None and not isinstance(expect, str):
                raise RuleError(rule_id, f"examples.{key}[{i}].expect must be a string")
            out.append(Example(item["text"], expect, _str_list(item.get("sources"), rule_id, "sources")))
        else:
            raise RuleError(rule_id, f"examples.{key}[{i}] must be a string or {{text, expect, sources}}")
    return tuple(out)


def _is_name(s: str) -> bool:
    return (
        bool(s)
        and s[0].isascii()
        and s[0].islower()
        and all(c.isascii() and (c.isalnum() or c == "_") for c in s)
    )


def _placeholder_ok(p: str) -> bool:
    if not (p.startswith("[") and p.endswith("]")) or len(p) < 3:
        return False
    body = p[1:-1]
    return all(c.isascii() and (c.isalnum() or c in "_:") for c in body)


def _with_words(pattern: Any, words: Any, rule_id: str) -> Any:
    """A pattern's ``{words}`` replaced by an alternation of the rule's ``words`` (literal texts,
    escaped, longest first): a long vocabulary stays a list in the pack, not one unreadable line."""
    if words is None:
        return pattern
    items = _str_list(words, rule_id, "words")
    if not items or not all(items):
        raise RuleError(rule_id, "words must be a non-empty list of non-empty strings")
    if not isinstance(pattern, str) or pattern.count("{words}") != 1:
        raise RuleError(rule_id, "a rule with words needs {words} once in its pattern")
    alternation = "|".join(re.escape(w) for w in sorted(set(items), key=lambda w: (-len(w), w)))
    return pattern.replace("{words}", f"(?:{alternation})")


def parse_rule(raw: Any, pack: str, defaults: Mapping[str, Any]) -> Rule:
    """Check one rule's shape and build a :class:`Rule` (pattern validity is checked at compile)."""
    if not isinstance(raw, Mapping):
        raise RuleError(f"{pack}.?", "a rule must be a mapping")
    name = raw.get("id")
    if not isinstance(name, str) or not _is_name(name):
        raise RuleError(f"{pack}.{name!r}", "id must be lower_snake_case")
    rid = f"{pack}.{name}"
    unknown = set(raw) - _RULE_KEYS
    if unknown:
        raise RuleError(rid, f"unknown keys {sorted(unknown)}")
    description = raw.get("description")
    if not isinstance(description, str) or not description.strip():
        raise RuleError(rid, "description is required")
    kind = raw.get("kind", "regex")
    if kind not in KINDS:
        raise RuleError(rid, f"kind must be one of {'|'.join(KINDS)}, got {kind!r}")
    action = raw.get("action", defaults.get("action"))
    if action not in ACTIONS:
        raise RuleError(rid, f"action must be one of {'|'.join(ACTIONS)}, got {action!r}")
    pattern = _with_words(raw.get("pattern"), raw.get("words"), rid)
    close = raw.get("close")
    if kind in ("regex", "block") and (not isinstance(pattern, str) or not pattern):
        raise RuleError(rid, "pattern (RE2 syntax) is required")
    if kind == "quote" and pattern is not None:
        raise RuleError(rid, "a quote rule takes its literals from the record: no pattern")
    if kind == "block" and (not isinstance(close, str) or not close):
        raise RuleError(rid, "a block rule needs a close pattern")
    if kind != "block" and close is not None:
        raise RuleError(rid, "close is only for block rules")
    placeholder = raw.get("placeholder")
    pii = raw.get("pii")
    if action == "pseudonymize":
        if pii not in PII_CLASSES:
            raise RuleError(rid, f"pseudonymize needs pii: one of {'|'.join(PII_CLASSES)}, got {pii!r}")
        if kind != "regex":
            raise RuleError(rid, "only regex rules can pseudonymize")
    elif pii is not None:
        raise RuleError(rid, "pii is only for pseudonymize rules")
    if action in ("redact", "pseudonymize"):
        if not isinstance(placeholder, str) or not _placeholder_ok(placeholder):
            raise RuleError(
                rid, f"{action} needs a typed placeholder such as [SECRET:aws_access_key] (its redact form)"
            )
    elif placeholder is not None:
        raise RuleError(rid, f"{action} takes no placeholder")
    if kind == "quote" and action != "redact":
        raise RuleError(rid, "a quote rule must redact")
    fields = raw.get("fields", defaults.get("fields"))
    fields_t = None if fields is None else _selectors(fields, rid, "fields")
    exclude = _selectors(raw.get("exclude_fields", defaults.get("exclude_fields")), rid, "exclude_fields")
    priority = raw.get("priority", defaults.get("priority", 50))
    if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 1000:
        raise RuleError(rid, "priority must be an integer in 0..1000")
    validate = raw.get("validate")
    if validate is not None and validate not in VALIDATORS:
        raise RuleError(rid, f"validate must be one of {'|'.join(VALIDATORS)}, got {validate!r}")
    sources = _selectors(raw.get("sources"), rid, "sources")
    if kind == "quote" and not sources:
        raise RuleError(rid, "a quote rule needs sources (field selectors)")
    if kind != "quote" and sources:
        raise RuleError(rid, "sources are only for quote rules")
    min_length = raw.get("min_length", 16)
    if not isinstance(min_length, int) or isinstance(min_length, bool) or min_length < 1:
        raise RuleError(rid, "min_length must be a positive integer")
    examples = raw.get("examples")
    if not isinstance(examples, Mapping) or set(examples) - {"positive", "negative"}:
        raise RuleError(rid, "examples must be a mapping with positive and negative lists")
    positive = _examples(examples.get("positive"), rid, "positive")
    negative = _examples(examples.get("negative"), rid, "negative")
    if not positive or not negative:
        raise RuleError(rid, "needs at least one positive and one negative example")
    return Rule(
        id=rid,
        pack=pack,
        description=description.strip(),
        action=action,
        kind=kind,
        pattern=pattern,
        close=close,
        placeholder=placeholder,
        fields=fields_t,
        exclude_fields=exclude,
        allowlist=_str_list(raw.get("allowlist"), rid, "allowlist"),
        allow_patterns=_str_list(raw.get("allow_patterns"), rid, "allow_patterns"),
        priority=priority,
        validate=validate,
        sources=sources,
        min_length=min_length,
        pii=pii,
        positive=positive,
        negative=negative,
    )


def pack_path(name: str | Path, packs_dir: str | Path | None = None) -> Path:
    """``name`` is a pack name (``secrets``) looked up in ``packs_dir`` or a path to a YAML file."""
    p = Path(name)
    if p.suffix in (".yaml", ".yml") or p.parent != Path("."):
        return p
    return Path(packs_dir or DEFAULT_PACKS_DIR) / f"{name}.yaml"


def load_pack(name: str | Path, packs_dir: str | Path | None = None) -> Pack:
    """Read and shape-check one pack; raise :class:`RuleError` on the first bad rule."""
    path = pack_path(name, packs_dir)
    if not path.is_file():
        raise RuleError(f"{name}.*", f"no such pack file {path}")
    with open(path, encoding="utf-8") as f:
        try:
            doc = yaml.safe_load(f)
        except yaml.YAMLError as exc:
            raise RuleError(f"{name}.*", f"invalid YAML in {path}: {exc}") from None
    if not isinstance(doc, Mapping):
        raise RuleError(f"{name}.*", f"{path} must hold a mapping")
    pack = doc.get("pack")
    if not isinstance(pack, str) or not _is_name(pack):
        raise RuleError(f"{name}.*", "pack: must be a lower_snake_case name")
    unknown = set(doc) - _PACK_KEYS
    if unknown:
        raise RuleError(f"{pack}.*", f"unknown pack keys {sorted(unknown)}")
    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, Mapping) or set(defaults) - _DEFAULT_KEYS:
        raise RuleError(f"{pack}.*", f"defaults may only set {sorted(_DEFAULT_KEYS)}")
    raw_rules = doc.get("rules")
    if not isinstance(raw_rules, list) or not raw_rules:
        raise RuleError(f"{pack}.*", "rules: must be a non-empty list")
    rules: list[Rule] = []
    seen: set[str] = set()
    for raw in raw_rules:
        rule = parse_rule(raw, pack, defaults)
        if rule.id in seen:
            raise RuleError(rule.id, "duplicate rule id")
        seen.add(rule.id)
        rules.append(rule)
    return Pack(pack, str(doc.get("description", "")).strip(), path, tuple(rules))


def load_packs(names: Iterable[str | Path], packs_dir: str | Path | None = None) -> list[Pack]:
    packs = [load_pack(n, packs_dir) for n in names]
    seen: set[str] = set()
    for p in packs:
        if p.name in seen:
            raise RuleError(f"{p.name}.*", "pack loaded twice")
        seen.add(p.name)
    return packs
