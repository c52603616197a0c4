"""The policy-case record (``policy-case/v1``): EAL-style authorization cases, validated with field paths.

A case holds the policy text, the authorized issuers, a long noisy message history (blocks of turns),
the authoritative events (issue, patch, revoke, replace), probe pairs per dimension (an in-scope request that is
authorized and an out-of-scope one that is not), the gold memory (records in force at the end), and the
teacher's scripted memory with its recorded errors. ``data_prep/schemas/policy-case-v1.schema.json``
describes the same shape for other tools; the oracle lives in ``data_prep.oracle``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from data_prep.canonical import StrictJSONError, canonical_bytes
from data_prep.oracle import (
    DECLINE,
    EFFECTS,
    EVENT_RECORD_FIELDS,
    EVENT_TYPES,
    EXECUTE,
    PATCHABLE,
    RECORD_FIELDS,
    REQUEST_FIELDS,
    SCOPE_EQUAL,
    SCOPE_FIELDS,
    SCOPE_PATCHABLE,
    SCOPE_RECORD_FIELDS,
    SCOPE_REQUEST_FIELDS,
    STATUSES,
    decide,
    is_scope,
    parse_time,
)
from data_prep.records import LineError, RecordError, iter_records

CASE_SCHEMA = "policy-case/v1"
CASE_FIELDS = (
    "schema",
    "case_id",
    "family",
    "policy",
    "authorized_issuers",
    "blocks",
    "events",
    "probe_pairs",
    "gold_memory",
    "teacher",
    "provenance",
    "metadata",
)
# the dimensions of a spend/access request (the synthetic policy families vary exactly these)
REQUEST_DIMENSIONS = ("amount", "time", "category", "vendor", "grantee", "action")
DIMENSIONS = REQUEST_DIMENSIONS + (
    # scope requests (EAL-Bench's cybersecurity domain)
    "tenant",
    "incident",
    "asset",
    "environment",
    "response_action",
    "vulnerability",
)
MEMORY_ERRORS = (
    "omission",
    "missing_record",
    "broadening",
    "contradiction",
    "stale_retention",
    "extra_record",
)
BLOCK_FIELDS = ("ref", "title", "ended_at", "turns")
TURN_FIELDS = ("ref", "actor_id", "speaker", "content", "occurred_at")
EVENT_FIELDS = (
    "ref",
    "event_type",
    "issuer",
    "block_ref",
    "effective_at",
    "authorization_ref",
    "source_turn_refs",
    "record",
    "patch",
)
PROBE_FIELDS = ("ref", "dimension", "in_scope", "out_of_scope")
# ``metadata.analysis``: what EAL-Bench files under ``benchmark`` to slice results by; never shown to a model
ANALYSIS_SCALARS = ("split", "case_family_id", "lifecycle", "history_length_band")
ANALYSIS_LISTS = ("memory_hazards", "target_dimensions", "distractor_types")
ANALYSIS_EXTRA_BYTES = 4096  # other keys are kept as given, up to this much canonical JSON
SCHEMA_PATH = Path(__file__).parent / "schemas" / "policy-case-v1.schema.json"


def _obj(v: Any, where: str) -> dict:
    if not isinstance(v, dict):
        raise RecordError(where, f"expected object, got {_tname(v)}")
    return v


def _tname(v: Any) -> str:
    return {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "integer",
        float: "number",
    }.get(type(v), "null" if v is None else type(v).__name__)


def _no_extra(d: dict, allowed: tuple[str, ...], where: str) -> None:
    for k in d:
        if k not in allowed:
            raise RecordError(f"{where}.{k}", "unknown field")


def _str(d: dict, key: str, where: str, *, nonempty: bool = True) -> str:
    if key not in d:
        raise RecordError(f"{where}.{key}", "missing")
    v = d[key]
    if not isinstance(v, str):
        raise RecordError(f"{where}.{key}", f"expected string, got {_tname(v)}")
    if nonempty and not v.strip():
        raise RecordError(f"{where}.{key}", "must not be empty")
    return v


def _time(d: dict, key: str, where: str) -> str:
    v = _str(d, key, where)
    try:
        parse_time(v)
    except ValueError:
        raise RecordError(f"{where}.{key}", f"not an ISO 8601 time: {v!r}") from None
    return v


def _num(d: dict, key: str, where: str) -> float | int:
    if key not in d:
        raise RecordError(f"{where}.{key}", "missing")
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise RecordError(f"{where}.{key}", f"expected number, got {_tname(v)}")
    if v < 0:
        raise RecordError(f"{where}.{key}", "must not be negative")
    return v


def _strs(d: dict, key: str, where: str, *, required: bool = True, nonempty: bool = False) -> list[str]:
    if key not in d:
        if required:
            raise RecordError(f"{where}.{key}", "missing")
        return []
    v = d[key]
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise RecordError(f"{where}.{key}", "expected array of strings")
    if nonempty and not v:
        raise RecordError(f"{where}.{key}", "must not be empty")
    return v


def _list(d: dict, key: str, where: str) -> list:
    if key not in d:
        raise RecordError(f"{where}.{key}", "missing")
    if not isinstance(d[key], list):
        raise RecordError(f"{where}.{key}", f"expected array, got {_tname(d[key])}")
    return d[key]


def validate_record(rec: Any, where: str, *, partial: bool = False, event: bool = False) -> dict:
    """An authorization record (or, with ``partial``, a patch: a subset of the patchable fields).

    With ``event`` it is an event's record, which may also carry ``supersedes_ref``. A record with a
    ``scope`` is a scope record (``SCOPE_RECORD_FIELDS``); a patch may change scope keys.
    """
    rec = _obj(rec, where)
    if "scope" in rec:
        return _validate_scope_record(rec, where, partial=partial, event=event)
    allowed = PATCHABLE if partial else EVENT_RECORD_FIELDS if event else RECORD_FIELDS
    _no_extra(rec, allowed, where)
    if partial and not rec:
        raise RecordError(where, "a patch must change at least one field")
    for key in allowed:
        if (partial or key == "supersedes_ref") and key not in rec:
            continue
        if key == "allowed_categories":
            _strs(rec, key, where, nonempty=True)
        elif key == "max_amount":
            _num(rec, key, where)
        else:
            _shared_field(rec, key, where)
    return _valid_window(rec, where, partial)


def _shared_field(rec: dict, key: str, where: str) -> None:
    """A field both record kinds (procurement and scope) have: source turns, the validity window,
    effect, status; any other field is a string."""
    if key == "source_turn_refs":
        _strs(rec, key, where)
    elif key in ("valid_from", "valid_until"):
        _time(rec, key, where)
    elif key == "effect":
        if _str(rec, key, where) not in EFFECTS:
            raise RecordError(f"{where}.effect", f"must be {'|'.join(EFFECTS)}, got {rec[key]!r}")
    elif key == "status":
        if _str(rec, key, where) not in STATUSES:
            raise RecordError(f"{where}.status", f"must be {'|'.join(STATUSES)}, got {rec[key]!r}")
    else:
        _str(rec, key, where)


def _valid_window(rec: dict, where: str, partial: bool) -> dict:
    if not partial and parse_time(rec["valid_until"]) <= parse_time(rec["valid_from"]):
        raise RecordError(f"{where}.valid_until", "must be after valid_from")
    return rec


def _validate_scope(scope: Any, where: str, *, partial: bool) -> dict:
    scope = _obj(scope, where)
    _no_extra(scope, SCOPE_FIELDS, where)
    if partial and not scope:
        raise RecordError(where, "a scope patch must change at least one scope field")
    for key in SCOPE_FIELDS:
        if partial and key not in scope:
            continue
        if key in SCOPE_EQUAL:
            _str(scope, key, where)
        else:
            _strs(scope, key, where, nonempty=True)
    return scope


def _validate_scope_record(rec: dict, where: str, *, partial: bool, event: bool) -> dict:
    allowed = (
        SCOPE_PATCHABLE
        if partial
        else (*SCOPE_RECORD_FIELDS, "supersedes_ref")
        if event
        else SCOPE_RECORD_FIELDS
    )
    mixed = [k for k in ("vendor", "allowed_categories", "max_amount", "currency") if k in rec]
    if mixed:
        raise RecordError(
            f"{where}.scope",
            f"a record has a scope (cybersecurity) or {', '.join(mixed)} (procurement), not both",
        )
    _no_extra(rec, allowed, where)
    for key in allowed:
        if (partial or key == "supersedes_ref") and key not in rec:
            continue
        if key == "scope":
            _validate_scope(rec.get("scope"), f"{where}.scope", partial=partial)
        else:
            _shared_field(rec, key, where)
    return _valid_window(rec, where, partial)


def validate_request(req: Any, where: str) -> dict:
    req = _obj(req, where)
    if is_scope(req):  # a scope request: action is optional (EAL-Bench's requests have none)
        _no_extra(req, SCOPE_REQUEST_FIELDS, where)
        for key in SCOPE_REQUEST_FIELDS:
            if key == "action_time":
                _time(req, key, where)
            elif key != "action" or key in req:
                _str(req, key, where)
        return req
    _no_extra(req, REQUEST_FIELDS, where)
    for key in REQUEST_FIELDS:
        if key == "amount":
            _num(req, key, where)
        elif key == "action_time":
            _time(req, key, where)
        else:
            _str(req, key, where)
    return req


def validate_policy_case(d: Any, where: str = "$", *, require_all: bool = True) -> dict:
    """Check a ``policy-case/v1`` dict; raise RecordError(field, problem) at the first problem.

    With ``require_all=False`` the derived fields (schema, family, gold_memory, teacher, provenance,
    metadata) may be absent (an EAL case as imported, before conversion).
    """
    d = _obj(d, where)
    _validate_case_header(d, where, require_all)
    block_refs, turn_refs = _validate_blocks(d, where)
    _validate_events(d, where, block_refs, turn_refs)
    _validate_probes(d, where)
    if require_all or "gold_memory" in d:
        for i, r in enumerate(_list(d, "gold_memory", where)):
            validate_record(r, f"{where}.gold_memory[{i}]")
    _validate_teacher(d, where, require_all)
    for key in ("provenance", "metadata"):
        if key in d:
            _obj(d[key], f"{where}.{key}")
    if "analysis" in d.get("metadata", {}):
        validate_analysis(d["metadata"]["analysis"], f"{where}.metadata.analysis")
    return d


def validate_analysis(a: Any, where: str) -> dict:
    """The known analysis keys typed (non-empty strings, lists of them); the rest kept but bounded, so a
    case file cannot smuggle bulk data into every corpus, summary and item record."""
    a = _obj(a, where)
    for key in ANALYSIS_SCALARS:
        if key in a:
            _str(a, key, where)
    for key in ANALYSIS_LISTS:
        if key in a and "" in _strs(a, key, where):
            raise RecordError(f"{where}.{key}[{a[key].index('')}]", "must not be empty")
    extra = {k: v for k, v in a.items() if k not in ANALYSIS_SCALARS + ANALYSIS_LISTS}
    try:
        size = len(canonical_bytes(extra))
    except StrictJSONError as exc:
        raise RecordError(where, f"other keys are not JSON data ({exc})") from None
    if size > ANALYSIS_EXTRA_BYTES:
        raise RecordError(where, f"other keys take {size} bytes, more than {ANALYSIS_EXTRA_BYTES}")
    return a


def case_analysis(case: dict) -> dict:
    """A case's ``metadata.analysis`` (empty when it has none, as synthetic cases may)."""
    return (case.get("metadata") or {}).get("analysis") or {}


def analysis_values(analysis: dict, key: str) -> list[str]:
    """The distinct values of one analysis list, in order: a case counts once under each."""
    return list(dict.fromkeys(analysis.get(key) or []))


def _validate_case_header(d: dict, where: str, require_all: bool) -> None:
    _no_extra(d, CASE_FIELDS, where)
    if require_all or "schema" in d:
        if _str(d, "schema", where) != CASE_SCHEMA:
            raise RecordError(f"{where}.schema", f"expected {CASE_SCHEMA!r}, got {d['schema']!r}")
    _str(d, "case_id", where)
    if require_all or "family" in d:
        _str(d, "family", where)
    _str(d, "policy", where)
    _strs(d, "authorized_issuers", where, nonempty=True)


def _ref_items(d: dict, key: str, where: str, fields: tuple, seen: set[str], what: str) -> Iterator:
    """``(path, obj)`` for each object of the list ``d[key]``: an object with only ``fields``, whose
    ref no earlier one of its kind had (``seen`` collects the refs)."""
    for i, item in enumerate(_list(d, key, where)):
        iw = f"{where}.{key}[{i}]"
        item = _obj(item, iw)
        _no_extra(item, fields, iw)
        ref = _str(item, "ref", iw)
        if ref in seen:
            raise RecordError(f"{iw}.ref", f"duplicate {what} ref {ref!r}")
        seen.add(ref)
        yield iw, item


def _validate_blocks(d: dict, where: str) -> tuple[set[str], set[str]]:
    """The history's blocks and turns; returns their refs (events point at them)."""
    turn_refs: set[str] = set()
    block_refs: set[str] = set()
    for bw, b in _ref_items(d, "blocks", where, BLOCK_FIELDS, block_refs, "block"):
        _str(b, "title", bw)
        _time(b, "ended_at", bw)
        for tw, t in _ref_items(b, "turns", bw, TURN_FIELDS, turn_refs, "turn"):
            _str(t, "actor_id", tw)
            _str(t, "speaker", tw)
            _str(t, "content", tw, nonempty=False)
            _time(t, "occurred_at", tw)
    return block_refs, turn_refs


def _validate_events(d: dict, where: str, block_refs: set[str], turn_refs: set[str]) -> None:
    event_refs: set[str] = set()
    for ew, e in _ref_items(d, "events", where, EVENT_FIELDS, event_refs, "event"):
        kind = _str(e, "event_type", ew)
        if kind not in EVENT_TYPES:
            raise RecordError(f"{ew}.event_type", f"must be {'|'.join(EVENT_TYPES)}, got {kind!r}")
        _str(e, "issuer", ew)
        if _str(e, "block_ref", ew) not in block_refs:
            raise RecordError(f"{ew}.block_ref", f"no block {e['block_ref']!r}")
        _time(e, "effective_at", ew)
        _str(e, "authorization_ref", ew)
        for r in _strs(e, "source_turn_refs", ew):
            if r not in turn_refs:
                raise RecordError(f"{ew}.source_turn_refs", f"no turn {r!r}")
        _validate_event_record(e, ew, kind)
        _validate_event_patch(e, ew, kind)


def _validate_event_record(e: dict, ew: str, kind: str) -> None:
    """Issue and replace events carry a record; a replacement's names the record it supersedes."""
    if kind == "issue":
        if "record" not in e:
            raise RecordError(f"{ew}.record", "missing (an issue event carries the record)")
        validate_record(e["record"], f"{ew}.record", event=True)
        if e["record"]["authorization_ref"] != e["authorization_ref"]:
            raise RecordError(f"{ew}.record.authorization_ref", "differs from the event's authorization_ref")
        if "supersedes_ref" in e["record"]:
            raise RecordError(
                f"{ew}.record.supersedes_ref", "only a replace event's record supersedes another"
            )
    elif kind == "replace":
        if "record" not in e:
            raise RecordError(f"{ew}.record", "missing (a replace event carries the replacement record)")
        validate_record(e["record"], f"{ew}.record", event=True)
        if e["record"]["authorization_ref"] == e["authorization_ref"]:
            raise RecordError(
                f"{ew}.record.authorization_ref",
                "a replacement needs its own authorization_ref (the event's names the replaced record)",
            )
        if e["record"].get("supersedes_ref", e["authorization_ref"]) != e["authorization_ref"]:
            raise RecordError(
                f"{ew}.record.supersedes_ref",
                f"must name the replaced record {e['authorization_ref']!r}, got {e['record']['supersedes_ref']!r}",
            )
    elif "record" in e:
        raise RecordError(f"{ew}.record", f"only issue and replace events carry a record, this is {kind}")


def _validate_event_patch(e: dict, ew: str, kind: str) -> None:
    if kind == "patch":
        if "patch" not in e:
            raise RecordError(f"{ew}.patch", "missing (a patch event carries the changed fields)")
        validate_record(e["patch"], f"{ew}.patch", partial=True)
    elif "patch" in e:
        raise RecordError(f"{ew}.patch", f"only patch events carry a patch, this is {kind}")


def _validate_probes(d: dict, where: str) -> None:
    probe_refs: set[str] = set()
    for pw, p in _ref_items(d, "probe_pairs", where, PROBE_FIELDS, probe_refs, "probe"):
        dim = _str(p, "dimension", pw)
        if dim not in DIMENSIONS:
            raise RecordError(f"{pw}.dimension", f"must be one of {'|'.join(DIMENSIONS)}, got {dim!r}")
        for side in ("in_scope", "out_of_scope"):
            if side not in p:
                raise RecordError(f"{pw}.{side}", "missing")
            validate_request(p[side], f"{pw}.{side}")


def _validate_teacher(d: dict, where: str, require_all: bool) -> None:
    teacher = d.get("teacher")
    if teacher is None:
        if require_all and "teacher" not in d:
            raise RecordError(f"{where}.teacher", "missing (use null for a case without a teacher memory)")
        return
    tw = f"{where}.teacher"
    teacher = _obj(teacher, tw)
    _no_extra(teacher, ("writer_model", "memory", "memory_errors"), tw)
    _str(teacher, "writer_model", tw)
    for i, r in enumerate(_list(teacher, "memory", tw)):
        validate_record(r, f"{tw}.memory[{i}]")
    for i, e in enumerate(teacher.get("memory_errors", [])):
        ew = f"{tw}.memory_errors[{i}]"
        e = _obj(e, ew)
        if _str(e, "type", ew) not in MEMORY_ERRORS:
            raise RecordError(f"{ew}.type", f"must be one of {'|'.join(MEMORY_ERRORS)}")
        _str(e, "authorization_ref", ew)


def lifecycle_problems(case: dict) -> list[str]:
    """Events by authorized issuers, in effective-time order, that make no sound lifecycle.

    ``events[i].authorization_ref: ...`` for an issue that reuses a ref, a patch, revoke or replace of a
    record never issued, a patch or revoke of a record no longer active, a replacement of a superseded
    record, or a replacement that reuses a ref. (Events by others are ignored by the oracle, so they
    are not checked here.) The oracle tolerates all of these; an imported case should not contain them.
    """
    issuers = set(case["authorized_issuers"])
    order = sorted(
        (i for i, e in enumerate(case["events"]) if e["issuer"] in issuers),
        key=lambda i: (parse_time(case["events"][i]["effective_at"]), i),
    )
    status: dict[str, str] = {}
    out = []
    for i in order:
        e = case["events"][i]
        ref, kind = e["authorization_ref"], e["event_type"]
        at = f"events[{i}].authorization_ref"
        if kind == "issue":
            if ref in status:
                out.append(f"{at}: issue reuses {ref!r}, already issued")
            status[ref] = "active"
            continue
        if ref not in status:
            out.append(f"{at}: {kind} of {ref!r}, which no earlier event issued")
            continue
        if kind in ("patch", "revoke") and status[ref] != "active":
            out.append(f"{at}: {kind} of {ref!r}, which is already {status[ref]}")
        elif kind == "replace" and status[ref] == "superseded":
            out.append(f"{at}: replace of {ref!r}, which is already superseded")
        if kind == "revoke":
            status[ref] = "revoked"
        elif kind == "replace":
            status[ref] = "superseded"
            new_ref = e["record"]["authorization_ref"]
            if new_ref in status:
                out.append(f"events[{i}].record.authorization_ref: the replacement reuses {new_ref!r}")
            status[new_ref] = "active"
    return out


def probe_problems(case: dict) -> list[str]:
    """Probe pairs the oracle disagrees with: ``probe_pairs[i].in_scope: oracle says decline``."""
    out = []
    for i, p in enumerate(case["probe_pairs"]):
        if decide(case, None, p["in_scope"]) != EXECUTE:
            out.append(f"probe_pairs[{i}].in_scope: oracle says {DECLINE} for an in-scope request")
        if decide(case, None, p["out_of_scope"]) != DECLINE:
            out.append(f"probe_pairs[{i}].out_of_scope: oracle says {EXECUTE} for an out-of-scope request")
    return out


def iter_policy_case_file(path: str | Path) -> Iterator[tuple[int, dict | LineError]]:
    """Yield ``(line, case | LineError)`` for each case in a ``policy-case/v1`` JSONL file."""
    return iter_records(path, validate_policy_case)


def load_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())
