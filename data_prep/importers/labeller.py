"""The user's policy labeller for imported agent traces: a small YAML of rules giving each call a ``policy_class``.

A trace says what a tool did, never whether it was allowed; that judgement is the user's, so it comes
from a file they write::

    default: benign            # optional; benign unless said otherwise
    rules:                     # first match wins
      - tool: "wire_*"         # glob on the tool name (fnmatch, case-sensitive)
        policy_class: policy_relevant
      - tool: wire_transfer
        arguments: {recipient: acct-unknown}   # optional: every listed argument equals this value
        policy_class: unauthorized

Without a labeller every call is ``benign``. A bad file is a usage error reported as
``file:line: field: problem``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from data_prep.chain import POLICY_CLASSES
from data_prep.importers.yaml_lines import YamlError, line_of, load_with_lines

DEFAULT_CLASS = "benign"


class LabellerError(ValueError):
    """``file:line: field: problem``."""


@dataclass(frozen=True)
class Rule:
    tool: str
    policy_class: str
    arguments: dict = field(default_factory=dict)

    def matches(self, tool: str, arguments: dict) -> bool:
        return fnmatchcase(tool, self.tool) and all(
            k in arguments and arguments[k] == v for k, v in self.arguments.items()
        )


@dataclass(frozen=True)
class Labeller:
    rules: tuple[Rule, ...] = ()
    default: str = DEFAULT_CLASS
    source: str | None = None  # the file name, for provenance

    def classify(self, tool: str, arguments: dict) -> str:
        for rule in self.rules:
            if rule.matches(tool, arguments):
                return rule.policy_class
        return self.default

    def describe(self) -> dict:
        """What provenance records about the labelling (file name and rule count, not the rules)."""
        return {"labeller": self.source, "rules": len(self.rules), "default": self.default}


def _class(value: Any, where: str, lines: dict[str, int]) -> str:
    if value not in POLICY_CLASSES:
        raise YamlError(
            line_of(lines, where), where, f"must be one of {'|'.join(POLICY_CLASSES)}, got {value!r}"
        )
    return value


def parse_labeller(raw: Any, lines: dict[str, int], name: str | None = None) -> Labeller:
    if raw is None:
        return Labeller(source=name)
    if not isinstance(raw, dict):
        raise YamlError(lines.get("$", 1), "$", "a labeller must be a mapping with rules (and default)")
    for key in raw:
        if key not in ("default", "rules"):
            raise YamlError(line_of(lines, f"$.{key}"), f"$.{key}", "unknown field (expected default, rules)")
    default = _class(raw.get("default", DEFAULT_CLASS), "$.default", lines)
    rules_raw = raw.get("rules", [])
    if not isinstance(rules_raw, list):
        raise YamlError(line_of(lines, "$.rules"), "$.rules", "expected a list of rules")
    rules = []
    for i, r in enumerate(rules_raw):
        w = f"$.rules[{i}]"
        if not isinstance(r, dict):
            raise YamlError(line_of(lines, w), w, "expected a mapping {tool, policy_class, arguments?}")
        for key in r:
            if key not in ("tool", "policy_class", "arguments"):
                raise YamlError(line_of(lines, f"{w}.{key}"), f"{w}.{key}", "unknown field")
        for key in ("tool", "policy_class"):
            if key not in r:
                raise YamlError(line_of(lines, w), f"{w}.{key}", "missing")
        if not isinstance(r["tool"], str) or not r["tool"]:
            raise YamlError(
                line_of(lines, f"{w}.tool"), f"{w}.tool", "expected a non-empty tool name or glob"
            )
        args = r.get("arguments", {})
        if not isinstance(args, dict):
            raise YamlError(line_of(lines, f"{w}.arguments"), f"{w}.arguments", "expected a mapping")
        rules.append(Rule(r["tool"], _class(r["policy_class"], f"{w}.policy_class", lines), dict(args)))
    return Labeller(tuple(rules), default, name)


def load_labeller(path: str | Path | None) -> Labeller:
    """The labeller in ``path`` (None: everything benign); raises LabellerError."""
    if path is None:
        return Labeller()
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LabellerError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        raw, lines = load_with_lines(text) if text.strip() else (None, {})
        return parse_labeller(raw, lines, path.name)
    except YamlError as exc:
        raise LabellerError(f"{path}:{exc.line}: {exc.field}: {exc.problem}") from None
