"""Seed-style workflow JSONL (``workflow-v2``) into ``ledger-run/v1`` runs.

One workflow per line with exactly the columns ``schema_version, workflow_id, title, description,
messages, tools, initial_state, reference_trace, logging, execution_limits, evaluation, metadata``.
Nothing is simulated: the run's calls are the ``ordinary`` items of ``reference_trace`` and its model
ledger comes from the ``log_action`` items.

Mappings (documented choices):

- **status** of an ordinary call: the item's ``expected_status`` if present; else the outcome its
  log_action reports (a reference trace states what the call did); else ``succeeded``.
- **policy_class**: ``policy_relevant`` when the item carries ``issue_tags`` (each tag marks a point
  where the agent could go wrong, i.e. a policy-relevant step), else ``benign``. A reference trace is
  the good path, so nothing is ``unauthorized``.
- **ledger entry** from a log_action's arguments: logged call id from ``call_id | logged_call_id |
  log_id | action_id``; tool from ``tool_name | tool | requested_tool_name``; description from
  ``description | requested_behavior | requested_behaviour | action_description``; outcome from
  ``outcome | claimed_outcome | status | result_status``. ``position`` = ordinary calls before it.
- **labels**: no sabotage. Where the reference ledger itself disagrees with its calls (a vague
  description, a missing or late log), the reconciler's findings are recorded as ``writer_errors``
  (omission, softening, wrong_outcome, batching, ...) so ``expected_label(labels)`` equals the gold
  verdict, and listed in ``provenance.import_findings``.
- **family** is the workflow id without its ``-vN`` suffix; **domain** is ``metadata.domain`` or inferred
  from the id (finance, exec-ops, security, sre, else ``other``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from data_prep.assemble import assemble_run, clean_labels
from data_prep.importers.common import (
    IMPORTER_VERSION,
    LOG_TOOL,
    Accepted,
    Item,
    Problem,
    Rejected,
    finish_run,
    ledger_entry,
)
from data_prep.records import CALL_STATUSES, LineError, iter_jsonl

COLUMNS = (
    "schema_version",
    "workflow_id",
    "title",
    "description",
    "messages",
    "tools",
    "initial_state",
    "reference_trace",
    "logging",
    "execution_limits",
    "evaluation",
    "metadata",
)
TRACE_FIELDS = ("sequence", "call_type", "call_id", "tool_name", "arguments", "issue_tags", "expected_status")
DOMAIN_HINTS = (
    ("finance", ("procurement", "payment", "invoice", "expense", "reimburse", "ledger", "finance")),
    ("exec-ops", ("calendar", "executive", "travel", "meeting")),
    ("security", ("security", "access", "vendor-risk", "identity")),
    ("sre", ("outage", "incident", "deploy", "rollback", "production")),
)
_SCHEMA_VERSION = re.compile(r"^(v|workflow-v)?2(\.\d+)*$")


def _need(d: dict, key: str, kind: type | tuple, where: str) -> Any:
    if key not in d:
        raise Problem(f"{where}.{key}", "missing")
    v = d[key]
    if isinstance(v, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise Problem(f"{where}.{key}", "expected " + _kname(kind) + ", got boolean")
    if not isinstance(v, kind):
        raise Problem(f"{where}.{key}", f"expected {_kname(kind)}, got {type(v).__name__}")
    return v


def _kname(kind: type | tuple) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {dict: "object", list: "array", str: "string", int: "integer", bool: "boolean", float: "number"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _domain(workflow_id: str, metadata: dict) -> str:
    if isinstance(metadata.get("domain"), str) and metadata["domain"]:
        return metadata["domain"]
    low = workflow_id.lower()
    for domain, hints in DOMAIN_HINTS:
        if any(h in low for h in hints):
            return domain
    return "other"


def _tools(tools: list, where: str) -> list[dict]:
    out = []
    names: set[str] = set()
    for i, t in enumerate(tools):
        tw = f"{where}[{i}]"
        if not isinstance(t, dict):
            raise Problem(tw, "expected object")
        if t.get("type") == "function" and isinstance(t.get("function"), dict):
            fn = t["function"]
            wrapped = t
        elif "name" in t:  # a bare function definition: wrap it
            fn = t
            wrapped = {"type": "function", "function": t}
            tw = tw + ".function"
        else:
            raise Problem(tw, "expected an OpenAI tool {type: function, function: {name, ...}}")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise Problem(f"{tw}.name", "expected a non-empty string")
        if name in names:
            raise Problem(f"{tw}.name", f"tool {name!r} is declared twice")
        names.add(name)
        out.append(wrapped)
    return out


def convert(row: Any, source: str, line: int) -> tuple[dict, str]:
    """One workflow row into a run dict and its gold verdict label; raises Problem."""
    version, workflow_id = _check_header(row)
    messages = _check_messages(row)
    tools = _tools(_need(row, "tools", list, "$"), "$.tools")
    _check_initial_state(row)
    for key in ("logging", "execution_limits", "evaluation", "metadata"):
        _need(row, key, dict, "$")
    metadata = row["metadata"]
    calls, entries, tags_by_call = _read_trace(
        _need(row, "reference_trace", list, "$"), {t["function"]["name"] for t in tools}
    )
    hidden = metadata.get("hidden_identifiers", [])
    if not isinstance(hidden, list) or not all(isinstance(h, str) for h in hidden):
        raise Problem("$.metadata.hidden_identifiers", "expected array of strings")
    run = assemble_run(
        run_id=f"{workflow_id}-ref",
        workflow_id=workflow_id,
        family=re.sub(r"-v\d+$", "", workflow_id),
        domain=_domain(workflow_id, metadata),
        messages=[{"role": m["role"], "content": m["content"]} for m in messages],
        tools=tools,
        calls=calls,
        model_ledger=entries,
        labels=clean_labels(),
        teacher={"writer_model": "reference-trace", "reader_model": None, "verdict": None},
        provenance={
            "source": "workflow-v2",
            "file": Path(source).name,
            "line": line,
            "importer_version": IMPORTER_VERSION,
        },
        metadata={
            "hidden_identifiers": list(hidden),
            "plan_variant": "reference",
            "title": row["title"],
            "description": row["description"],
            "schema_version": str(version),
            "initial_state": row["initial_state"],
            "logging": row["logging"],
            "execution_limits": row["execution_limits"],
            "evaluation": row["evaluation"],
            "source_metadata": metadata,
            "issue_tags": tags_by_call,
        },
    )
    return finish_run(run)


def _check_header(row: Any) -> tuple[Any, str]:
    """Exactly the known columns, a 2.x schema version, a workflow id, title and description."""
    if not isinstance(row, dict):
        raise Problem("$", "a workflow must be a JSON object")
    for key in row:
        if key not in COLUMNS:
            raise Problem(f"$.{key}", "unknown field")
    for key in COLUMNS:
        if key not in row:
            raise Problem(f"$.{key}", "missing")
    version = row["schema_version"]
    if (
        isinstance(version, bool)
        or not isinstance(version, str | int)
        or not _SCHEMA_VERSION.match(str(version))
    ):
        raise Problem("$.schema_version", f"unsupported schema version {version!r} (expected 2.x)")
    workflow_id = _need(row, "workflow_id", str, "$")
    if not workflow_id.strip():
        raise Problem("$.workflow_id", "must not be empty")
    _need(row, "title", str, "$")
    _need(row, "description", str, "$")
    return version, workflow_id


def _check_messages(row: dict) -> list:
    messages = _need(row, "messages", list, "$")
    for i, m in enumerate(messages):
        mw = f"$.messages[{i}]"
        if not isinstance(m, dict):
            raise Problem(mw, "expected object")
        role = _need(m, "role", str, mw)
        if role not in ("system", "user", "assistant", "developer"):
            raise Problem(f"{mw}.role", f"unexpected role {role!r}")
        _need(m, "content", str, mw)
    if not messages:
        raise Problem("$.messages", "must not be empty")
    return messages


def _check_initial_state(row: dict) -> None:
    for i, s in enumerate(_need(row, "initial_state", list, "$")):
        sw = f"$.initial_state[{i}]"
        if not isinstance(s, dict):
            raise Problem(sw, "expected object")
        for key in s:
            if key not in ("resource_type", "resource_id", "data"):
                raise Problem(f"{sw}.{key}", "unknown field")
        _need(s, "resource_type", str, sw)
        _need(s, "resource_id", str, sw)
        if "data" not in s:
            raise Problem(f"{sw}.data", "missing")


def _read_trace(trace: list, declared: set[str]) -> tuple[list[dict], list[dict], dict[str, list[str]]]:
    """The reference trace as (ordinary calls, ledger entries, issue tags by call id). A call without
    an expected status takes the outcome its log entry claims (else succeeded)."""
    calls: list[dict] = []
    entries: list[dict] = []
    seen_ids: set[str] = set()
    last_seq = 0
    tags_by_call: dict[str, list[str]] = {}
    log_outcome: dict[str, str] = {}
    for i, item in enumerate(trace):
        iw = f"$.reference_trace[{i}]"
        seq, kind, tool, args, tags = _trace_item(item, iw, last_seq, seen_ids)
        last_seq = seq
        if kind == "log_action":
            if tool != LOG_TOOL:
                raise Problem(f"{iw}.tool_name", f"a log_action item must call {LOG_TOOL}, got {tool!r}")
            entry = ledger_entry(args, f"{iw}.arguments", len(calls))
            log_outcome.setdefault(entry["call_id"], entry["claimed_outcome"])
            entries.append(entry)
            continue
        call = _ordinary_call(item, iw, declared, len(calls) + 1, tags)
        calls.append(call)
        if tags:
            tags_by_call[call["call_id"]] = list(tags)
    if not calls:
        raise Problem("$.reference_trace", "no ordinary calls")
    for call in calls:
        if call["status"] is None:
            call["status"] = log_outcome.get(call["call_id"], "succeeded")
    return calls, entries, tags_by_call


def _trace_item(item: Any, iw: str, last_seq: int, seen_ids: set[str]) -> tuple[int, str, str, dict, list]:
    """The fields every trace item has, checked: (sequence, call type, tool, arguments, issue tags)."""
    if not isinstance(item, dict):
        raise Problem(iw, "expected object")
    for key in item:
        if key not in TRACE_FIELDS:
            raise Problem(f"{iw}.{key}", "unknown field")
    seq = _need(item, "sequence", int, iw)
    if seq <= last_seq:
        raise Problem(f"{iw}.sequence", f"must increase (got {seq} after {last_seq})")
    kind = _need(item, "call_type", str, iw)
    if kind not in ("ordinary", "log_action"):
        raise Problem(f"{iw}.call_type", f"must be ordinary|log_action, got {kind!r}")
    cid = _need(item, "call_id", str, iw)
    if not cid:
        raise Problem(f"{iw}.call_id", "must not be empty")
    if cid in seen_ids:
        raise Problem(f"{iw}.call_id", f"call id {cid!r} repeats")
    seen_ids.add(cid)
    tool = _need(item, "tool_name", str, iw)
    args = _need(item, "arguments", dict, iw)
    tags = item.get("issue_tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise Problem(f"{iw}.issue_tags", "expected array of strings")
    for t in tags:
        if not t.endswith("_opportunity"):
            raise Problem(f"{iw}.issue_tags", f"tag {t!r} does not end in _opportunity")
    return seq, kind, tool, args, tags


def _ordinary_call(item: dict, iw: str, declared: set[str], seq: int, tags: list) -> dict:
    tool = item["tool_name"]
    if tool == LOG_TOOL:
        raise Problem(f"{iw}.call_type", "a log_action call must have call_type log_action")
    if tool not in declared:
        raise Problem(f"{iw}.tool_name", f"tool {tool!r} is not declared in tools")
    status = item.get("expected_status")
    if status is not None and status not in CALL_STATUSES:
        raise Problem(f"{iw}.expected_status", f"must be one of {'|'.join(CALL_STATUSES)}, got {status!r}")
    return {
        "seq": seq,
        "call_id": item["call_id"],
        "tool": tool,
        "arguments": item["arguments"],
        "status": status,
        "policy_class": "policy_relevant" if tags else "benign",
        "result": None,
    }


def iter_items(paths: list[Path]) -> Iterator[Item]:
    seen: dict[str, str] = {}
    for path in paths:
        for lineno, value in iter_jsonl(path):
            if isinstance(value, LineError):
                yield Rejected.of(value)
                continue
            try:
                run, gold = convert(value, str(path), lineno)
            except Problem as exc:
                yield Rejected(str(path), lineno, exc.field, exc.problem)
                continue
            except Exception as exc:  # quarantine, never a traceback; the reason names the failure
                yield Rejected(str(path), lineno, "$", f"cannot convert: {type(exc).__name__}: {exc}")
                continue
            if run["run_id"] in seen:
                yield Rejected(str(path), lineno, "$.workflow_id", f"duplicate of {seen[run['run_id']]}")
                continue
            seen[run["run_id"]] = f"{path}:{lineno}"
            yield Accepted("run", run, str(path), lineno, gold)
