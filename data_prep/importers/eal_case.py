"""EAL-style case YAML (one case per file) into ``policy-case/v1`` records.

Fields (``shared/notes/field-facts.md``): ``case_id, policy, authorized_issuers, blocks, events,
probe_pairs``; optional ``family, title, description, metadata``. The gold memory is computed from the
events by the oracle; a case whose probes the oracle disagrees with is rejected (the pair says
in-scope but the events do not authorize it, or the reverse). No teacher memory is attached.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

from data_prep.importers.common import IMPORTER_VERSION, Accepted, Item, Rejected
from data_prep.importers.yaml_lines import YamlError, line_of, load_with_lines
from data_prep.oracle import gold_memory_from_events
from data_prep.policy_case import CASE_SCHEMA, probe_problems, validate_policy_case
from data_prep.records import RecordError

REQUIRED = ("case_id", "policy", "authorized_issuers", "blocks", "events", "probe_pairs")
OPTIONAL = ("family", "title", "description", "metadata")


def _family(case_id: str) -> str:
    fam = re.sub(r"([-_]\d+)+$", "", case_id)
    return fam or "eal"


def convert(raw: object, lines: dict[str, int], name: str, sha256: str) -> dict:
    """Raise ``YamlError(line, field, problem)`` for anything wrong; return the ``policy-case/v1`` dict."""
    if not isinstance(raw, dict):
        raise YamlError(lines.get("$", 1), "$", "a case must be a YAML mapping")
    for key in raw:
        if key not in REQUIRED + OPTIONAL:
            raise YamlError(line_of(lines, f"$.{key}"), f"$.{key}", "unknown field")
    for key in REQUIRED:
        if key not in raw:
            raise YamlError(lines.get("$", 1), f"$.{key}", "missing")
    meta = raw.get("metadata", {})
    if not isinstance(meta, dict):
        raise YamlError(line_of(lines, "$.metadata"), "$.metadata", "expected a mapping")
    for key in ("title", "description", "family"):
        if key in raw and not isinstance(raw[key], str):
            raise YamlError(line_of(lines, f"$.{key}"), f"$.{key}", "expected a string")
    case_id = raw["case_id"]
    if not isinstance(case_id, str) or not case_id:
        raise YamlError(line_of(lines, "$.case_id"), "$.case_id", "expected a non-empty string")
    metadata = dict(meta)
    for key in ("title", "description"):
        if key in raw:
            metadata[key] = raw[key]
    case = {
        "schema": CASE_SCHEMA,
        "case_id": case_id,
        "family": raw.get("family") or _family(case_id),
        "policy": raw["policy"],
        "authorized_issuers": raw["authorized_issuers"],
        "blocks": raw["blocks"],
        "events": raw["events"],
        "probe_pairs": raw["probe_pairs"],
        "gold_memory": [],
        "teacher": None,
        "provenance": {
            "source": "eal-case",
            "file": name,
            "sha256": sha256,
            "importer_version": IMPORTER_VERSION,
        },
        "metadata": metadata,
    }
    try:
        validate_policy_case(case)
    except RecordError as exc:
        raise YamlError(line_of(lines, exc.field), exc.field, exc.problem) from None
    for problem in probe_problems(case):
        field, text = problem.split(": ", 1)
        raise YamlError(line_of(lines, "$." + field), "$." + field, text)
    case["gold_memory"] = gold_memory_from_events(case)
    return case


def iter_items(paths: list[Path]) -> Iterator[Item]:
    seen: dict[str, str] = {}
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError as exc:
            yield Rejected(str(path), 0, "$", f"cannot open: {exc.strerror}")
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield Rejected(
                str(path), data[: exc.start].count(b"\n") + 1, "$", f"not UTF-8 (byte {exc.start})"
            )
            continue
        try:
            raw, lines = load_with_lines(text)
            case = convert(raw, lines, path.name, hashlib.sha256(data).hexdigest())
        except YamlError as exc:
            yield Rejected(str(path), exc.line, exc.field, exc.problem)
            continue
        except Exception as exc:  # quarantine, never a traceback; the reason names the failure
            yield Rejected(str(path), 0, "$", f"cannot convert: {type(exc).__name__}: {exc}")
            continue
        if case["case_id"] in seen:
            yield Rejected(
                str(path), line_of(lines, "$.case_id"), "$.case_id", f"duplicate of {seen[case['case_id']]}"
            )
            continue
        seen[case["case_id"]] = str(path)
        yield Accepted("case", case, str(path), 1)
