"""Run reports: per-rule counts, a bounded sample of findings (hashes, never text), malformed lines.

Memory stays bounded however long the input: counters per rule, the first ``sample_per_rule`` findings
of each rule (at most ``sample_total``) and the first ``malformed_sample`` malformed lines.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sanitizer.core import SanitizeResult
from sanitizer.engine import DROP

REPORT_SCHEMA = "sanitizer-report/v1"
_PAST = {"redact": "redacted", "strip": "stripped", "drop": "dropped", "pseudonymize": "pseudonymized"}


@dataclass(slots=True)
class RuleStats:
    action: str
    matches: int = 0  # spans redacted / stripped (or, for drop rules, drop matches)
    examples: int = 0  # records with at least one match of this rule
    sampled: int = 0


@dataclass
class Report:
    mode: str  # scan | apply
    rule_actions: dict[str, str]
    packs: list[str] = field(default_factory=list)
    fields: list[str] | None = None
    input: str = ""
    output: str | None = None
    sample_per_rule: int = 5
    sample_total: int = 200
    malformed_sample: int = 100
    lines: int = 0
    blank: int = 0
    records: int = 0
    malformed: int = 0
    changed: int = 0
    dropped: int = 0
    written: int = 0
    bytes_in: int = 0
    seconds: float = 0.0
    stats: dict[str, RuleStats] = field(default_factory=dict)
    samples: list[dict] = field(default_factory=list)
    malformed_lines: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        for rid, action in self.rule_actions.items():
            self.stats[rid] = RuleStats(action)

    @property
    def findings(self) -> int:
        return sum(s.matches for s in self.stats.values())

    def add_result(self, line_no: int, res: SanitizeResult) -> None:
        self.records += 1
        if res.dropped:
            self.dropped += 1
        elif res.changed:
            self.changed += 1
        seen: set[str] = set()
        for f in res.findings:
            st = self.stats.get(f.rule_id)
            if st is None:
                st = self.stats[f.rule_id] = RuleStats(f.action)
            st.matches += 1
            if f.rule_id not in seen:
                seen.add(f.rule_id)
                st.examples += 1
            if st.sampled < self.sample_per_rule and len(self.samples) < self.sample_total:
                st.sampled += 1
                d = f.to_dict()
                d["line"] = line_no
                self.samples.append(d)

    def add_malformed(self, line_no: int, error: str) -> None:
        self.malformed += 1
        if len(self.malformed_lines) < self.malformed_sample:
            self.malformed_lines.append({"line": line_no, "error": error})

    def to_dict(self) -> dict[str, Any]:
        mb = self.bytes_in / 1e6
        return {
            "schema": REPORT_SCHEMA,
            "mode": self.mode,
            "input": self.input,
            "output": self.output,
            "packs": self.packs,
            "fields": self.fields,
            "totals": {
                "lines": self.lines,
                "blank_lines": self.blank,
                "records": self.records,
                "malformed": self.malformed,
                "changed": self.changed,
                "dropped": self.dropped,
                "written": self.written,
                "findings": self.findings,
                "bytes_in": self.bytes_in,
                "seconds": round(self.seconds, 3),
                "mb_per_s": round(mb / self.seconds, 2) if self.seconds > 0 else None,
            },
            "rules": {
                rid: {
                    "action": st.action,
                    "matches": st.matches,
                    "examples": st.examples,
                    _PAST[st.action]: st.examples if st.action == DROP else st.matches,
                }
                for rid, st in sorted(self.stats.items())
            },
            "findings_sample": self.samples,
            "malformed_lines": self.malformed_lines,
        }

    def write(self, path: str | Path) -> None:
        tmp = Path(str(path) + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f, indent=2, sort_keys=False, ensure_ascii=False)
            f.write("\n")
        tmp.replace(path)

    def summary(self) -> Iterable[str]:
        """Lines for the terminal: totals, then one line per rule that fired."""
        t = self.to_dict()["totals"]
        yield (
            f"{self.mode}: {t['records']} records, {t['malformed']} malformed, {t['findings']} findings, "
            f"{t['changed']} changed, {t['dropped']} dropped"
            + (f", {t['written']} written" if self.mode == "apply" else "")
            + (f" ({t['mb_per_s']} MB/s)" if t["mb_per_s"] else "")
        )
        fired = [(rid, st) for rid, st in sorted(self.stats.items()) if st.matches]
        if fired:
            width = max(len(rid) for rid, _ in fired)
            yield f"  {'rule':<{width}}  {'action':<6}  {'matches':>8}  {'examples':>8}"
            for rid, st in fired:
                yield f"  {rid:<{width}}  {st.action:<6}  {st.matches:>8}  {st.examples:>8}"
        for m in self.malformed_lines[:5]:
            yield f"  malformed line {m['line']}: {m['error']}"
        if self.malformed > 5:
            yield f"  ... and {self.malformed - 5} more malformed lines (see the report)"
