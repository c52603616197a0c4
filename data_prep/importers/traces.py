"""Agent traces (inspect_ai logs, OpenTelemetry GenAI spans) into runs: what both trace importers share.

A trace importer reads the tool calls a harness recorded, in the order they ran, and hands them here:

- every call but ``log_action`` is an **ordinary call**: it goes into the trajectory and, in that
  order, into a freshly sealed environment ledger, with the ``policy_class`` the user's labeller gives
  it (``benign`` without one);
- every ``log_action`` call is a **model-ledger entry** (``common.ledger_entry``), positioned after the
  ordinary calls that preceded it;
- a trace with no ``log_action`` call has no model ledger (``null``: not evaluable) unless the task
  declared the ``log_action`` tool, in which case the model had a logger and wrote nothing (``[]``).

What such a ledger proves is bounded by its source: it is sealed here, at import, so it shows that the
imported calls were not changed afterwards, not that the log recorded every call the agent made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from data_prep.assemble import assemble_run, clean_labels
from data_prep.importers.common import IMPORTER_VERSION, LOG_TOOL, Problem, finish_run, ledger_entry
from data_prep.importers.labeller import Labeller


@dataclass(frozen=True)
class TraceCall:
    """One recorded tool call; ``where`` is its field path in the source, for errors."""

    call_id: str
    tool: str
    arguments: dict
    status: str
    result: Any
    where: str


def parse_json_arguments(value: Any, where: str) -> dict:
    """Tool-call arguments: an object, or a JSON text of one (how both formats may record them)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise Problem(where, f"arguments are not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise Problem(where, f"arguments must be an object, got {type(value).__name__}")
    return value


def parse_json_result(value: Any) -> Any:
    """A tool result as recorded: JSON text is parsed (both formats may store results so), the rest kept."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def function_tool(name: str, description: str | None = None, parameters: Any = None) -> dict:
    fn: dict[str, Any] = {"name": name}
    if isinstance(description, str) and description:
        fn["description"] = description
    if isinstance(parameters, dict):
        fn["parameters"] = parameters
    return {"type": "function", "function": fn}


def build_trace_run(
    *,
    run_id: str,
    workflow_id: str,
    messages: list[dict],
    tools: list[dict],
    calls: list[TraceCall],
    labeller: Labeller,
    provenance: dict,
    metadata: dict,
    where: str,
    domain: str = "other",
) -> tuple[dict, str]:
    """A sealed ``ledger-run/v1`` dict and its gold label; raises ``Problem`` naming the field at fault."""
    ordinary, entries = _split_calls(calls, labeller)
    if not ordinary:
        raise Problem(where, "no ordinary tool calls (nothing for an environment ledger to record)")
    has_logger = bool(entries) or any(t["function"]["name"] == LOG_TOOL for t in tools)
    return finish_run(
        assemble_run(
            run_id=run_id,
            workflow_id=workflow_id,
            family=workflow_id,
            domain=domain,
            messages=messages,
            tools=_with_called_tools(tools, ordinary),
            calls=ordinary,
            model_ledger=entries if has_logger else None,
            labels=clean_labels(),
            teacher=None,
            provenance={**provenance, "importer_version": IMPORTER_VERSION, "labelling": labeller.describe()},
            metadata=metadata,
        )
    )


def _split_calls(calls: list[TraceCall], labeller: Labeller) -> tuple[list[dict], list[dict]]:
    """The ordinary calls (numbered, classified) and the ``log_action`` entries, in trace order."""
    ordinary: list[dict] = []
    entries: list[dict] = []
    seen: dict[str, str] = {}
    for c in calls:
        if c.tool == LOG_TOOL:
            entries.append(ledger_entry(c.arguments, f"{c.where}.arguments", len(ordinary)))
            continue
        if not c.call_id:
            raise Problem(c.where, "a tool call without a call id cannot be matched to a ledger entry")
        if c.call_id in seen:
            raise Problem(c.where, f"call id {c.call_id!r} repeats (first at {seen[c.call_id]})")
        seen[c.call_id] = c.where
        ordinary.append(
            {
                "seq": len(ordinary) + 1,
                "call_id": c.call_id,
                "tool": c.tool,
                "arguments": c.arguments,
                "status": c.status,
                "policy_class": labeller.classify(c.tool, c.arguments),
                "result": c.result,
            }
        )
    return ordinary, entries


def _with_called_tools(tools: list[dict], ordinary: list[dict]) -> list[dict]:
    """``tools`` plus, by name, each called tool the log did not declare (the list is extended)."""
    declared = {t["function"]["name"] for t in tools}
    for c in ordinary:
        if c["tool"] not in declared:
            declared.add(c["tool"])
            tools.append(function_tool(c["tool"]))
    return tools
