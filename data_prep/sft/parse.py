"""Lenient parsing of model answers back into the task's structure.

Models wrap JSON in prose or code fences, add trailing commas, or stop early. Parsing takes the first
JSON object that decodes, checks the task's fields, and otherwise returns a ``ParseFailure`` holding
the raw text: an answer that does not parse is a result to count, never something to drop.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

OUTCOMES = ("succeeded", "rejected", "failed")
READER_LABELS = ("clean", "discrepancy", "incident")
DECISIONS = ("execute_requested", "decline", "escalate")


@dataclass(frozen=True)
class ParseFailure:
    raw: str
    reason: str

    def __bool__(self) -> bool:
        return False


def first_json_object(text: str) -> dict | None:
    """The first ``{...}`` in ``text`` that decodes as a JSON object (fences and prose ignored)."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            value = None
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    return None


def parse_ledger_entry(text: str) -> dict | ParseFailure:
    obj = first_json_object(text)
    if obj is None:
        return ParseFailure(text, "no JSON object")
    for key in ("call_id", "tool", "description", "claimed_outcome"):
        if not isinstance(obj.get(key), str):
            return ParseFailure(text, f"missing or non-string {key}")
    if obj["claimed_outcome"] not in OUTCOMES:
        return ParseFailure(text, f"claimed_outcome not one of {'|'.join(OUTCOMES)}")
    return {k: obj[k] for k in ("call_id", "tool", "description", "claimed_outcome")}


def parse_verdict(text: str) -> dict | ParseFailure:
    obj = first_json_object(text)
    if obj is None:
        return ParseFailure(text, "no JSON object")
    label = obj.get("label")
    if label not in READER_LABELS:
        return ParseFailure(text, f"label not one of {'|'.join(READER_LABELS)}")
    suspicion = obj.get("suspicion")
    if isinstance(suspicion, bool) or not isinstance(suspicion, int | float) or not 0 <= suspicion <= 100:
        return ParseFailure(text, "suspicion not a number in 0-100")
    cited = obj.get("cited_call_ids", [])
    if not isinstance(cited, list) or not all(isinstance(c, str) for c in cited):
        return ParseFailure(text, "cited_call_ids not a list of strings")
    findings = obj.get("findings", "")
    return {
        "label": label,
        "suspicion": float(suspicion),
        "cited_call_ids": cited,
        "findings": findings if isinstance(findings, str) else json.dumps(findings),
    }


def parse_memory(text: str) -> list[dict] | ParseFailure:
    obj = first_json_object(text)
    if obj is None:
        return ParseFailure(text, "no JSON object")
    records = obj.get("records")
    if "records" not in obj and '"records"' in text:
        # the first object that decodes is one record inside it: the answer's own object never closed
        return ParseFailure(text, "unfinished answer: the records object never closes")
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        return ParseFailure(text, "records is not a list of objects")
    return records


def parse_decision(text: str) -> str | ParseFailure:
    obj = first_json_object(text)
    if obj is not None and obj.get("decision") in DECISIONS:
        return obj["decision"]
    stripped = text.strip().strip('"').strip()
    if stripped in DECISIONS:
        return stripped
    return ParseFailure(text, f"decision not one of {'|'.join(DECISIONS)}")
