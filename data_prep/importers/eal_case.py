"""EAL-style case YAML (one case per file) into ``policy-case/v1`` records.

Two shapes are read, told apart by nothing but their fields:

- **EAL-Bench authoring YAML as published** (``domains/<domain>/corpus/<version>/*.yaml`` in the
  EAL-Bench repository): ``schema_version, case_id, source_id_namespace, benchmark, policy,
  authorized_issuers, blocks, events, probe_pairs, tags``;
- the shorter EAL-style shape (``shared/notes/field-facts.md``): ``case_id, policy,
  authorized_issuers, blocks, events, probe_pairs``, optional ``family, title, description, metadata``.

What the conversion does, field by field:

- top-level fields beyond ours (``schema_version``, ``source_id_namespace``, ``tags``,
  ``authoring_hash``, and any other) are never rejected: they are kept verbatim under
  ``metadata.eal`` and listed in ``provenance.kept_fields``; the known ones are type-checked;
- ``benchmark`` (EAL-Bench's analysis metadata: ``memory_hazards``, ``target_dimensions``,
  ``distractor_types``, ``lifecycle``, ``history_length_band``, ``case_family_id``, ``split``) becomes
  ``metadata.analysis``, typed by ``validate_analysis`` (other keys kept, bounded in size), so that the
  policy-reuse report can break results down by it; it is analysis data and never reaches a prompt;
- ``family``: the file's ``family``, else ``benchmark.case_family_id``, else the case id less a trailing
  number;
- ``turns[].occurred_at`` may be left out; it is then derived the way EAL-Bench derives it: a turn that
  an event cites takes the event's ``effective_at``; in a block, turns before its first timed turn are
  five minutes apart counting back from it, turns after a timed turn five minutes apart counting
  forward, and a block without any timed turn ends five minutes apart at its ``ended_at``. A derived time
  that collides with a neighbour, runs past ``ended_at`` or falls before the previous block's end is an
  error, as it is there. ``provenance.derived_occurred_at`` counts the derived turns;
- ``effect: permit_exception`` (EAL-Bench's procurement permit) and ``permit_incident_response`` (its
  cybersecurity permit) become ``allow``, the project's word for it (``provenance.effects_mapped``
  counts them); ``deny`` and ``allow`` stay;
- cybersecurity cases (EAL-Bench's ``domains/cybersecurity``): records carry a ``scope`` (``tenant_id,
  incident_id, asset_ids, environments, approved_actions, vulnerability_ids``) in place of vendor,
  categories, amount and currency, and probe requests name ``tenant_id, incident_id, asset_id,
  environment, response_action, vulnerability_id``; EAL-Bench's ``actor_id`` and ``requested_at`` are
  read as ``grantee`` and ``action_time``, and a record's ``authorization_id``, ``supersedes`` and
  ``source_turn_ids`` as ``authorization_ref``, ``supersedes_ref`` and ``source_turn_refs``
  (``provenance.fields_mapped`` counts the renames);
- ``event_type: replace`` is kept: its ``authorization_ref`` names the replaced record, its ``record``
  the replacement (with ``supersedes_ref``); the oracle marks the old record ``superseded``, and the
  gold memory holds the replacement (memory records have no ``supersedes_ref``: the old record's
  absence is the supersession);
- the events must make a sound lifecycle (no reissued ref, no change to an unknown, revoked or superseded
  record; a revoked record may still be replaced), and every probe pair must agree with the oracle
  (in-scope executes, out-of-scope declines); otherwise the case is rejected with the field at fault.

The gold memory is computed from the events by the oracle. No teacher memory is attached.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

from data_prep.importers.common import IMPORTER_VERSION, Accepted, Item, Rejected
from data_prep.importers.yaml_lines import YamlError, line_of, load_with_lines
from data_prep.oracle import gold_memory_from_events, parse_time
from data_prep.policy_case import (
    CASE_SCHEMA,
    lifecycle_problems,
    probe_problems,
    validate_analysis,
    validate_policy_case,
)
from data_prep.records import RecordError

REQUIRED = ("case_id", "policy", "authorized_issuers", "blocks", "events", "probe_pairs")
OPTIONAL = ("family", "title", "description", "metadata")
# EAL-Bench's own top-level fields, kept under metadata.eal with their types checked
EAL_FIELDS = {
    "schema_version": str,
    "source_id_namespace": str,
    "authoring_hash": str,
    "benchmark": dict,
    "tags": list,
}
EFFECT_MAP = {"permit_exception": "allow", "permit_incident_response": "allow"}
# EAL-Bench's cybersecurity words for fields the project already names (only renamed when ours is absent)
REQUEST_RENAMES = {"actor_id": "grantee", "requested_at": "action_time"}
RECORD_RENAMES = {
    "authorization_id": "authorization_ref",
    "supersedes": "supersedes_ref",
    "source_turn_ids": "source_turn_refs",
}
TURN_STEP = timedelta(minutes=5)


def _family(case_id: str) -> str:
    fam = re.sub(r"([-_]\d+)+$", "", case_id)
    return fam or "eal"


def _fmt(t: datetime) -> str:
    if t.microsecond:
        return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _time_or_none(v: object) -> datetime | None:
    if not isinstance(v, str):
        return None
    try:
        return parse_time(v)
    except ValueError:
        return None


def derive_turn_times(blocks: object, events: object, lines: dict[str, int]) -> int:
    """Fill in every missing ``turns[].occurred_at`` in place; return how many were derived.

    Shapes that are wrong here (a block that is not a mapping, a time that does not parse) are left
    for ``validate_policy_case`` to report; only what the derivation itself finds is raised here.
    """
    if not isinstance(blocks, list) or not isinstance(events, list):
        return 0
    where: dict[str, str] = {}  # turn ref -> field path
    explicit: dict[str, datetime] = {}
    for i, b in enumerate(blocks):
        if not isinstance(b, dict) or not isinstance(b.get("turns"), list):
            continue
        for j, t in enumerate(b["turns"]):
            if isinstance(t, dict) and isinstance(t.get("ref"), str):
                where.setdefault(t["ref"], f"$.blocks[{i}].turns[{j}]")
                if t.get("occurred_at") is not None:
                    at = _time_or_none(t["occurred_at"])
                    if at is not None:
                        explicit[t["ref"]] = at
    anchors = dict(explicit)
    cited_by: dict[str, str] = {}
    for k, e in enumerate(events):
        if not isinstance(e, dict) or not isinstance(e.get("source_turn_refs"), list):
            continue
        at = _time_or_none(e.get("effective_at"))
        if at is None:
            continue
        for ref in e["source_turn_refs"]:
            if not isinstance(ref, str) or ref not in where or ref in explicit:
                continue
            if ref in anchors and anchors[ref] != at:
                field = f"$.events[{k}].source_turn_refs"
                raise YamlError(
                    line_of(lines, field),
                    field,
                    f"turn {ref!r} has no occurred_at and is cited by events at different times "
                    f"({cited_by[ref]} and {e.get('ref')!r}), so its time cannot be derived",
                )
            anchors[ref] = at
            cited_by.setdefault(ref, repr(e.get("ref")))

    derived = 0
    previous_end: datetime | None = None
    for i, b in enumerate(blocks):
        if not isinstance(b, dict) or not isinstance(b.get("turns"), list):
            previous_end = None
            continue
        end = _time_or_none(b.get("ended_at"))
        turns = b["turns"]
        refs = [t.get("ref") if isinstance(t, dict) else None for t in turns]
        missing = [j for j, t in enumerate(turns) if isinstance(t, dict) and t.get("occurred_at") is None]
        if not missing or end is None:
            previous_end = end
            continue
        fixed = {j: anchors[r] for j, r in enumerate(refs) if isinstance(r, str) and r in anchors}
        times: dict[int, datetime] = {}
        if not fixed:
            for j in range(len(turns)):
                times[j] = end - TURN_STEP * (len(turns) - 1 - j)
        else:
            order = sorted(fixed)
            for j in range(order[0]):
                times[j] = fixed[order[0]] - TURN_STEP * (order[0] - j)
            for left, right in zip(order, order[1:]):
                if right - left > 1 and fixed[left] + TURN_STEP * (right - left - 1) >= fixed[right]:
                    raise YamlError(
                        line_of(lines, f"$.blocks[{i}].turns[{left + 1}]"),
                        f"$.blocks[{i}].turns[{left + 1}].occurred_at",
                        f"no room to derive occurred_at for the {right - left - 1} turn(s) between "
                        f"{refs[left]!r} and {refs[right]!r} (five minutes apart)",
                    )
                for j in range(left + 1, right):
                    times[j] = fixed[left] + TURN_STEP * (j - left)
            for j in range(order[-1] + 1, len(turns)):
                times[j] = fixed[order[-1]] + TURN_STEP * (j - order[-1])
            times.update(fixed)
        for j in missing:
            t = times[j]
            field = f"$.blocks[{i}].turns[{j}].occurred_at"
            if t > end:
                raise YamlError(
                    line_of(lines, f"$.blocks[{i}].turns[{j}]"),
                    field,
                    f"derived time {_fmt(t)} is after the block's ended_at {_fmt(end)}",
                )
            if previous_end is not None and t <= previous_end:
                raise YamlError(
                    line_of(lines, f"$.blocks[{i}].turns[{j}]"),
                    field,
                    f"derived time {_fmt(t)} is not after the previous block's ended_at {_fmt(previous_end)}",
                )
            turns[j]["occurred_at"] = _fmt(t)
            derived += 1
        previous_end = end
    return derived


def _map_effects(events: object) -> dict[str, int]:
    """Map EAL-Bench's permitting effects to ``allow`` in place; return ``{effect: times mapped}``."""
    seen: dict[str, int] = {}
    for e in events if isinstance(events, list) else []:
        if not isinstance(e, dict):
            continue
        for key in ("record", "patch"):
            body = e.get(key)
            if isinstance(body, dict) and body.get("effect") in EFFECT_MAP:
                seen[body["effect"]] = seen.get(body["effect"], 0) + 1
                body["effect"] = EFFECT_MAP[body["effect"]]
    return seen


def _rename(d: object, renames: dict[str, str]) -> int:
    if not isinstance(d, dict):
        return 0
    n = 0
    for old, new in renames.items():
        if old in d and new not in d:
            d[new] = d.pop(old)
            n += 1
    return n


def _map_fields(events: object, probes: object) -> int:
    """EAL-Bench's cybersecurity field names into the project's (see the module docstring)."""
    n = 0
    for e in events if isinstance(events, list) else []:
        if isinstance(e, dict):
            n += _rename(e.get("record"), RECORD_RENAMES)
    for p in probes if isinstance(probes, list) else []:
        if isinstance(p, dict):
            n += _rename(p.get("in_scope"), REQUEST_RENAMES) + _rename(p.get("out_of_scope"), REQUEST_RENAMES)
    return n


def _drop_nulls(events: object) -> None:
    """``record: null`` / ``patch: null`` mean absent, as EAL-Bench reads them."""
    if isinstance(events, list):
        for e in events:
            if isinstance(e, dict):
                for key in ("record", "patch"):
                    if key in e and e[key] is None:
                        del e[key]


def convert(raw: object, lines: dict[str, int], name: str, sha256: str) -> dict:
    """Raise ``YamlError(line, field, problem)`` for anything wrong; return the ``policy-case/v1`` dict."""
    if not isinstance(raw, dict):
        raise YamlError(lines.get("$", 1), "$", "a case must be a YAML mapping")
    for key in REQUIRED:
        if key not in raw:
            raise YamlError(lines.get("$", 1), f"$.{key}", "missing")
    kept = {}
    for key, value in raw.items():
        if key in REQUIRED + OPTIONAL:
            continue
        want = EAL_FIELDS.get(key)
        if want is not None and not isinstance(value, want):
            raise YamlError(
                line_of(lines, f"$.{key}"),
                f"$.{key}",
                f"expected {'a mapping' if want is dict else want.__name__}",
            )
        kept[key] = value
    if "tags" in kept and not all(isinstance(t, str) for t in kept["tags"]):
        raise YamlError(line_of(lines, "$.tags"), "$.tags", "expected a list of strings")
    bench = kept.pop("benchmark", {})
    meta = raw.get("metadata", {})
    if not isinstance(meta, dict):
        raise YamlError(line_of(lines, "$.metadata"), "$.metadata", "expected a mapping")
    if bench and "analysis" in meta:
        field = "$.metadata.analysis"
        raise YamlError(line_of(lines, field), field, "given twice: here and as benchmark")
    try:
        validate_analysis(bench, "$.benchmark")
    except RecordError as exc:
        raise YamlError(line_of(lines, exc.field), exc.field, exc.problem) from None
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
    if kept:
        metadata["eal"] = kept
    if bench:
        metadata["analysis"] = bench
    _drop_nulls(raw["events"])
    derived = derive_turn_times(raw["blocks"], raw["events"], lines)
    mapped = _map_effects(raw["events"])
    renamed = _map_fields(raw["events"], raw["probe_pairs"])
    provenance = {
        "source": "eal-case",
        "file": name,
        "sha256": sha256,
        "importer_version": IMPORTER_VERSION,
    }
    if kept or bench:
        provenance["kept_fields"] = sorted([*kept, *(["benchmark"] if bench else [])])
    if derived:
        provenance["derived_occurred_at"] = derived
    if mapped:
        provenance["effects_mapped"] = {
            "map": {k: EFFECT_MAP[k] for k in sorted(mapped)},
            "count": sum(mapped.values()),
        }
    if renamed:
        provenance["fields_mapped"] = renamed
    case = {
        "schema": CASE_SCHEMA,
        "case_id": case_id,
        "family": raw.get("family") or bench.get("case_family_id") or _family(case_id),
        "policy": raw["policy"],
        "authorized_issuers": raw["authorized_issuers"],
        "blocks": raw["blocks"],
        "events": raw["events"],
        "probe_pairs": raw["probe_pairs"],
        "gold_memory": [],
        "teacher": None,
        "provenance": provenance,
        "metadata": metadata,
    }
    try:
        validate_policy_case(case)
    except RecordError as exc:
        raise YamlError(line_of(lines, exc.field), exc.field, exc.problem) from None
    for key in ("blocks", "events", "probe_pairs"):
        if not case[key]:
            raise YamlError(line_of(lines, f"$.{key}"), f"$.{key}", "must not be empty")
    for problem in (*lifecycle_problems(case), *probe_problems(case)):
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
