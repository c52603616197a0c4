"""Authorization memory: structural checks of a written memory, and its errors against the gold records.

A memory is usable when it parses as ``{"records": [...]}`` and each record is an object whose present
fields have the types of ``policy-case/v1`` records (unknown fields are not allowed). Fields may be
absent: that is scored (``omission``), not refused.

Errors, each with the authorization it concerns (a memory record is matched to a gold record by
``authorization_ref``, else by grantee + action + vendor):

- ``missing_record``: a gold record (in force at the end of the history) has no counterpart at all;
- ``omission``: a counterpart lacks a field the oracle needs to apply it (grantee, effect, action,
  vendor, allowed_categories, max_amount, currency, valid_from, valid_until, status);
- ``broadening``: a counterpart grants more than the gold record (higher amount, extra categories, a
  wider validity window);
- ``contradiction``: a counterpart disagrees otherwise (another grantee, action, vendor, currency,
  effect, issuer or status; a lower amount, fewer categories, a narrower window);
- ``stale_retention``: the memory keeps what the history withdrew: values a later patch replaced, or a
  record that was revoked or had expired by the end of the history (same ref, or the same grant kept
  as it was under another ref);
- ``extra_record``: a record with no basis among the authorized issuers' events (a scope claim by
  someone who cannot authorize, or an invention).

The synthetic teacher labels its errors with the same names, so its recorded errors are what this scorer
finds (a test holds them equal).
"""

from __future__ import annotations

import copy
import math
from typing import Any

from data_prep.oracle import RECORD_FIELDS, gold_memory_from_events, history_end, parse_time, records_at

MEMORY_ERROR_TYPES = (
    "omission",
    "missing_record",
    "broadening",
    "contradiction",
    "stale_retention",
    "extra_record",
)
DECISION_FIELDS = (
    "grantee",
    "effect",
    "action",
    "vendor",
    "allowed_categories",
    "max_amount",
    "currency",
    "valid_from",
    "valid_until",
    "status",
)
IDENTITY_FIELDS = ("grantee", "action", "vendor", "currency", "effect", "issuer", "status")


def check_memory(records: Any) -> list[str]:
    """Problems that make a memory unusable (empty list: usable)."""
    if not isinstance(records, list):
        return ["records is not a list"]
    problems = []
    for i, r in enumerate(records):
        w = f"records[{i}]"
        if not isinstance(r, dict):
            problems.append(f"{w}: expected an object")
            continue
        for k, v in r.items():
            if k not in RECORD_FIELDS:
                problems.append(f"{w}.{k}: unknown field (allowed: {', '.join(RECORD_FIELDS)})")
            elif v is None:
                continue
            elif k in ("allowed_categories", "source_turn_refs"):
                if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                    problems.append(f"{w}.{k}: expected an array of strings")
            elif k == "max_amount":
                if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                    problems.append(f"{w}.{k}: expected a non-negative number")
            elif k in ("valid_from", "valid_until"):
                try:
                    if not isinstance(v, str):
                        raise ValueError
                    parse_time(v)
                except ValueError:
                    problems.append(f"{w}.{k}: expected an ISO 8601 time")
            elif k == "effect":
                if v not in ("allow", "deny"):
                    problems.append(f"{w}.effect: expected allow or deny")
            elif k == "status":
                if v not in ("active", "revoked"):
                    problems.append(f"{w}.status: expected active or revoked")
            elif not isinstance(v, str):
                problems.append(f"{w}.{k}: expected a string")
    return problems


def gold_memory(case: dict) -> list[dict]:
    return (
        copy.deepcopy(case["gold_memory"])
        if case.get("gold_memory") is not None
        else gold_memory_from_events(case)
    )


def _key(r: dict) -> tuple:
    return (r.get("grantee"), r.get("action"), r.get("vendor"))


def _match(memory: list[dict], gold: list[dict]) -> tuple[dict[int, int], list[int]]:
    """memory index -> gold index; and the unmatched memory indices."""
    pairs: dict[int, int] = {}
    taken: set[int] = set()
    by_ref = {g.get("authorization_ref"): j for j, g in enumerate(gold)}
    for i, m in enumerate(memory):
        j = by_ref.get(m.get("authorization_ref"))
        if j is not None and j not in taken:
            pairs[i] = j
            taken.add(j)
    for i, m in enumerate(memory):
        if i in pairs:
            continue
        for j, g in enumerate(gold):
            if j not in taken and _key(m) == _key(g) and None not in _key(m):
                pairs[i] = j
                taken.add(j)
                break
    return pairs, [i for i in range(len(memory)) if i not in pairs]


def _history(case: dict) -> dict[str, dict[str, list]]:
    """Per authorization: every value each field took before its current one (issue, then patches)."""
    issuers = set(case["authorized_issuers"])
    out: dict[str, dict[str, list]] = {}
    events = sorted(enumerate(case["events"]), key=lambda p: (parse_time(p[1]["effective_at"]), p[0]))
    current: dict[str, dict] = {}
    for _, ev in events:
        if ev.get("issuer") not in issuers:
            continue
        ref = ev["authorization_ref"]
        if ev["event_type"] == "issue":
            current[ref] = dict(ev["record"])
        elif ev["event_type"] == "patch" and ref in current:
            for k, v in ev["patch"].items():
                out.setdefault(ref, {}).setdefault(k, []).append(copy.deepcopy(current[ref].get(k)))
                current[ref][k] = v
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return sorted(map(str, a)) == sorted(map(str, b))
    if (
        isinstance(a, int | float)
        and isinstance(b, int | float)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    ):
        return float(a) == float(b)
    if isinstance(a, str) and isinstance(b, str) and a != b:
        try:
            return parse_time(a) == parse_time(b)
        except ValueError:
            return False
    return a == b


def _compare(m: dict, g: dict, skip: set[str]) -> tuple[list[str], list[str]]:
    """(broader fields, contradicting fields) of a matched record."""
    broader, contra = [], []
    for f in IDENTITY_FIELDS:
        if f in skip or m.get(f) is None:
            continue
        if not _same(m.get(f), g.get(f)):
            contra.append(f)
    if (
        "max_amount" not in skip
        and isinstance(m.get("max_amount"), int | float)
        and not isinstance(m.get("max_amount"), bool)
    ):
        if m["max_amount"] > g["max_amount"]:
            broader.append("max_amount")
        elif m["max_amount"] < g["max_amount"]:
            contra.append("max_amount")
    if "allowed_categories" not in skip and isinstance(m.get("allowed_categories"), list):
        mine, theirs = set(m["allowed_categories"]), set(g["allowed_categories"])
        if mine - theirs:
            broader.append("allowed_categories")
        if theirs - mine:
            contra.append("allowed_categories")
    for f, wider in (("valid_from", lambda a, b: a < b), ("valid_until", lambda a, b: a > b)):
        if f in skip or not isinstance(m.get(f), str):
            continue
        try:
            a, b = parse_time(m[f]), parse_time(g[f])
        except ValueError:
            continue
        if a != b:
            (broader if wider(a, b) else contra).append(f)
    return broader, contra


def _kept_copy(m: dict, r: dict) -> bool:
    """A memory record without a known ref that is a withdrawn record kept as it was (same grantee,
    action, vendor, currency, amount and categories)."""
    return (
        None not in _key(m)
        and _key(m) == _key(r)
        and all(_same(m.get(f), r.get(f)) for f in ("currency", "max_amount", "allowed_categories"))
    )


def score_memory(memory: list[dict], case: dict, gold: list[dict] | None = None) -> list[dict]:
    """Memory errors of a usable memory against the gold records of ``case``; sorted, deterministic."""
    gold = gold_memory(case) if gold is None else gold
    pairs, unmatched = _match(memory, gold)
    errors: list[dict] = []
    matched_gold = set(pairs.values())
    for j, g in enumerate(gold):
        if j not in matched_gold:
            errors.append(
                {"type": "missing_record", "authorization_ref": g.get("authorization_ref"), "detail": ""}
            )
    history = _history(case)
    for i, j in sorted(pairs.items()):
        m, g = memory[i], gold[j]
        ref = g.get("authorization_ref")
        missing = [f for f in DECISION_FIELDS if m.get(f) in (None, "", [])]
        if missing:
            errors.append({"type": "omission", "authorization_ref": ref, "detail": ",".join(missing)})
        stale = [
            f
            for f, olds in sorted(history.get(ref, {}).items())
            if m.get(f) is not None
            and not _same(m.get(f), g.get(f))
            and any(_same(m.get(f), o) for o in olds)
        ]
        if stale:
            errors.append(
                {
                    "type": "stale_retention",
                    "authorization_ref": ref,
                    "detail": "pre_patch_values:" + ",".join(stale),
                }
            )
        broader, contra = _compare(m, g, set(missing) | set(stale))
        if broader:
            errors.append({"type": "broadening", "authorization_ref": ref, "detail": ",".join(broader)})
        if contra:
            errors.append({"type": "contradiction", "authorization_ref": ref, "detail": ",".join(contra)})
    end = history_end(case)
    state = records_at(case["events"], set(case["authorized_issuers"]), end)
    withdrawn = {
        ref: r
        for ref, r in state.items()
        if r.get("status") != "active" or parse_time(r["valid_until"]) <= end
    }
    for i in unmatched:
        m = memory[i]
        ref = m.get("authorization_ref")
        w = withdrawn.get(ref) or next((r for r in withdrawn.values() if _kept_copy(m, r)), None)
        if w is not None:
            why = "revoked_kept" if w.get("status") != "active" else "expired_kept"
            errors.append(
                {"type": "stale_retention", "authorization_ref": w.get("authorization_ref"), "detail": why}
            )
        else:
            errors.append({"type": "extra_record", "authorization_ref": ref, "detail": ""})
    errors.sort(key=lambda e: (MEMORY_ERROR_TYPES.index(e["type"]), str(e["authorization_ref"]), e["detail"]))
    return errors
