"""Authorization memory: structural checks of a written memory, and its errors against the gold records.

A memory is usable when it parses as ``{"records": [...]}`` and each record is an object whose present
fields have the types of ``policy-case/v1`` records of its kind (unknown fields are not allowed): a
procurement record (vendor, categories, amount, currency) or a scope record (EAL-Bench's cybersecurity
domain: a ``scope`` of tenant, incident and lists of assets, environments, approved actions and
vulnerabilities). The field vocabulary is the oracle's (``data_prep.oracle``). Fields may be absent:
that is scored (``omission``), not refused.

Errors, each with the authorization it concerns (a memory record is matched to a gold record by
``authorization_ref``, else by grantee + action + vendor, or for a scope record grantee + action +
tenant + incident, preferring the gold record whose scope lists it shares most with). Scope keys are
scored one by one under dotted names (``scope.asset_ids``): a list is a set, so extra members broaden
and missing members contradict, as categories do:

- ``missing_record``: a gold record (in force at the end of the history) has no counterpart at all;
- ``omission``: a counterpart lacks a field the oracle needs to apply it (the oracle's patchable fields
  of that kind, each scope key included);
- ``broadening``: a counterpart grants more than the gold record (higher amount, extra categories, a
  wider validity window);
- ``contradiction``: a counterpart disagrees otherwise (another grantee, action, vendor, currency,
  tenant, incident, effect, issuer or status; a lower amount, fewer categories or scope members, a
  narrower window), or is of the other kind;
- ``stale_retention``: the memory keeps what the history withdrew (detail ``pre_patch_values:<fields>``,
  ``revoked_kept``, ``superseded_kept`` or ``expired_kept``): values a later patch replaced, or a
  record that was revoked, superseded or had expired by the end of the history (same ref, or the same
  grant kept as it was under another ref);
- ``extra_record``: a record with no basis among the authorized issuers' events (a scope claim by
  someone who cannot authorize, or an invention).

The synthetic teacher labels its errors with the same names, so its recorded errors are what this scorer
finds (a test holds them equal).
"""

from __future__ import annotations

import copy
import math
from typing import Any

from data_prep.oracle import (
    EFFECTS,
    PATCHABLE,
    SCOPE_EQUAL,
    SCOPE_FIELDS,
    SCOPE_MEMBER,
    SCOPE_PATCHABLE,
    STATUSES,
    gold_memory_from_events,
    history_end,
    parse_time,
    record_fields,
    records_at,
)
from data_prep.policy_case import MEMORY_ERRORS

MEMORY_ERROR_TYPES = MEMORY_ERRORS  # the policy-case schema's vocabulary: labels and scores agree
# what the oracle needs to apply a record: its patchable fields, each scope key on its own
DECISION_FIELDS = PATCHABLE
SCOPE_LISTS = tuple(f"scope.{k}" for k in SCOPE_MEMBER.values())
SCOPE_DECISION_FIELDS = tuple(
    x for f in SCOPE_PATCHABLE for x in ((f"scope.{k}" for k in SCOPE_FIELDS) if f == "scope" else (f,))
)
IDENTITY_FIELDS = ("grantee", "action", "vendor", "currency", "effect", "issuer", "status")
EQUAL_FIELDS = (*IDENTITY_FIELDS, *(f"scope.{k}" for k in SCOPE_EQUAL))
SET_FIELDS = ("allowed_categories", *SCOPE_LISTS)
# the grant itself: what must be equal for a record under another ref to be a kept copy
GRANT_FIELDS = ("currency", "max_amount", "allowed_categories")


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
        allowed = record_fields(r)
        for k, v in r.items():
            if k not in allowed:
                problems.append(f"{w}.{k}: unknown field (allowed: {', '.join(allowed)})")
            elif v is not None:
                problems += _field_problems(f"{w}.{k}", k, v)
    return problems


def _field_problems(where: str, k: str, v: Any) -> list[str]:
    """Type problems of one present record field."""
    if k in ("allowed_categories", "source_turn_refs"):
        return [] if _strings(v) else [f"{where}: expected an array of strings"]
    if k == "scope":
        return _scope_problems(where, v)
    if k == "max_amount":
        ok = not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v) and v >= 0
        return [] if ok else [f"{where}: expected a non-negative number"]
    if k in ("valid_from", "valid_until"):
        try:
            if not isinstance(v, str):
                raise ValueError
            parse_time(v)
        except ValueError:
            return [f"{where}: expected an ISO 8601 time"]
        return []
    if k == "effect" and v not in EFFECTS:
        return [f"{where}: expected one of {', '.join(EFFECTS)}"]
    if k == "status" and v not in STATUSES:
        return [f"{where}: expected one of {', '.join(STATUSES)}"]
    return [] if isinstance(v, str) else [f"{where}: expected a string"]


def _strings(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _scope_problems(where: str, scope: Any) -> list[str]:
    """A scope is an object of the oracle's scope keys: tenant and incident strings, the rest lists."""
    if not isinstance(scope, dict):
        return [f"{where}: expected an object"]
    out = []
    for k, v in scope.items():
        if k not in SCOPE_FIELDS:
            out.append(f"{where}.{k}: unknown field (allowed: {', '.join(SCOPE_FIELDS)})")
        elif v is None:
            continue
        elif k in SCOPE_EQUAL and not isinstance(v, str):
            out.append(f"{where}.{k}: expected a string")
        elif k not in SCOPE_EQUAL and not _strings(v):
            out.append(f"{where}.{k}: expected an array of strings")
    return out


def gold_memory(case: dict) -> list[dict]:
    return (
        copy.deepcopy(case["gold_memory"])
        if case.get("gold_memory") is not None
        else gold_memory_from_events(case)
    )


def _flat(r: dict) -> dict:
    """The record with each scope key as a field of its own (``scope.asset_ids``), so that scope records
    are scored field by field like the rest."""
    out = {k: v for k, v in r.items() if k != "scope"}
    if "scope" in r:
        scope = r["scope"] if isinstance(r["scope"], dict) else {}
        out.update({f"scope.{k}": scope.get(k) for k in SCOPE_FIELDS})
    return out


def _is_scope(r: dict) -> bool:
    return "scope" in r or any(k.startswith("scope.") for k in r)


def _decision_fields(r: dict) -> tuple[str, ...]:
    return SCOPE_DECISION_FIELDS if _is_scope(r) else DECISION_FIELDS


def _key(r: dict) -> tuple:
    """What matches a record without a known ref: who, what, and where (vendor, or tenant + incident)."""
    if _is_scope(r):
        return (r.get("grantee"), r.get("action"), *(r.get(f"scope.{k}") for k in SCOPE_EQUAL))
    return (r.get("grantee"), r.get("action"), r.get("vendor"))


def _overlap(m: dict, g: dict) -> int:
    """Scope members two records share (0 for procurement records): ties between equal keys."""
    return sum(len(set(m.get(f) or []) & set(g.get(f) or [])) for f in SCOPE_LISTS)


def _match(memory: list[dict], gold: list[dict]) -> tuple[dict[int, int], list[int]]:
    """memory index -> gold index (on flat records); and the unmatched memory indices."""
    pairs: dict[int, int] = {}
    taken: set[int] = set()
    by_ref = {g.get("authorization_ref"): j for j, g in enumerate(gold)}
    for i, m in enumerate(memory):
        j = by_ref.get(m.get("authorization_ref"))
        if j is not None and j not in taken:
            pairs[i] = j
            taken.add(j)
    for i, m in enumerate(memory):
        if i in pairs or None in _key(m):
            continue
        same = [
            j
            for j, g in enumerate(gold)
            if j not in taken and _is_scope(m) == _is_scope(g) and _key(m) == _key(g)
        ]
        if same:
            j = max(same, key=lambda j: (_overlap(m, gold[j]), -j))
            pairs[i] = j
            taken.add(j)
    return pairs, [i for i in range(len(memory)) if i not in pairs]


def _history(case: dict) -> dict[str, dict[str, list]]:
    """Per authorization: every value each (flat) field took before its current one (issue, then
    patches; a scope patch changes only the scope keys it names)."""
    issuers = set(case["authorized_issuers"])
    out: dict[str, dict[str, list]] = {}
    events = sorted(enumerate(case["events"]), key=lambda p: (parse_time(p[1]["effective_at"]), p[0]))
    current: dict[str, dict] = {}
    for _, ev in events:
        if ev.get("issuer") not in issuers:
            continue
        ref = ev["authorization_ref"]
        if ev["event_type"] == "issue":
            current[ref] = _flat(dict(ev["record"]))
        elif ev["event_type"] == "replace":
            current[ev["record"]["authorization_ref"]] = _flat(dict(ev["record"]))
        elif ev["event_type"] == "patch" and ref in current:
            patch = dict(ev["patch"])
            scope = patch.pop("scope", None)
            changes = {**patch, **{f"scope.{k}": v for k, v in (scope or {}).items()}}
            for k, v in changes.items():
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
    """(broader fields, contradicting fields) of a matched (flat) record."""
    if _is_scope(m) != _is_scope(g):
        return [], ["kind"]
    broader, contra = [], []
    for f in EQUAL_FIELDS:
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
    for f in SET_FIELDS:
        if f in skip or not isinstance(m.get(f), list):
            continue
        mine, theirs = set(m[f]), set(g.get(f) or [])
        if mine - theirs:
            broader.append(f)
        if theirs - mine:
            contra.append(f)
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
    """A memory record without a known ref that is a withdrawn record kept as it was (same key, and the
    same currency, amount and categories, or the same scope lists)."""
    fields = SCOPE_LISTS if _is_scope(r) else GRANT_FIELDS
    return (
        None not in _key(m)
        and _is_scope(m) == _is_scope(r)
        and _key(m) == _key(r)
        and all(_same(m.get(f), r.get(f)) for f in fields)
    )


_WITHDRAWN = {"revoked": "revoked_kept", "superseded": "superseded_kept"}


def score_memory(memory: list[dict], case: dict, gold: list[dict] | None = None) -> list[dict]:
    """Memory errors of a usable memory against the gold records of ``case``; sorted, deterministic."""
    gold = [_flat(g) for g in (gold_memory(case) if gold is None else gold)]
    memory = [_flat(m) for m in memory]
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
        missing = [f for f in _decision_fields(g) if m.get(f) in (None, "", [])]
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
        ref: _flat(r)
        for ref, r in state.items()
        if r.get("status") != "active" or parse_time(r["valid_until"]) <= end
    }
    for i in unmatched:
        m = memory[i]
        ref = m.get("authorization_ref")
        w = withdrawn.get(ref) or next((r for r in withdrawn.values() if _kept_copy(m, r)), None)
        if w is not None:
            why = _WITHDRAWN.get(w.get("status"), "expired_kept")
            errors.append(
                {"type": "stale_retention", "authorization_ref": w.get("authorization_ref"), "detail": why}
            )
        else:
            errors.append({"type": "extra_record", "authorization_ref": ref, "detail": ""})
    errors.sort(key=lambda e: (MEMORY_ERROR_TYPES.index(e["type"]), str(e["authorization_ref"]), e["detail"]))
    return errors
