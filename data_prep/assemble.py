"""Assemble a sealed run record from executed calls: the one way synth and importers make runs."""

from __future__ import annotations

from typing import Any

from data_prep.chain import seal_ledger
from data_prep.records import CALL_FIELDS, RUN_SCHEMA


def clean_labels() -> dict:
    """The labels of a run with no injected fault (a fresh dict: callers fill it in)."""
    return {"sabotage": False, "type": None, "target_call_ids": [], "writer_errors": []}


def faithful_entry(call: dict, description: str | None = None) -> dict:
    """The ledger entry an honest, timely writer emits right after ``call`` (seq is 1-based)."""
    return {
        "call_id": call["call_id"],
        "tool": call["tool"],
        "description": description if description is not None else describe_call(call),
        "claimed_outcome": call["status"],
        "position": call["seq"],
    }


def describe_call(call: dict) -> str:
    """A plain description naming every argument value (what the reconciler checks for)."""
    args = ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(call["arguments"].items()))
    return f"Called {call['tool']}({args}); outcome: {call['status']}."


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, dict | list):
        import json

        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    return str(value)


def assemble_run(
    *,
    run_id: str,
    workflow_id: str,
    family: str,
    domain: str,
    messages: list[dict],
    tools: list[dict],
    calls: list[dict],
    model_ledger: list[dict] | None,
    labels: dict,
    teacher: dict | None = None,
    provenance: dict | None = None,
    metadata: dict | None = None,
) -> dict:
    """A ``ledger-run/v1`` dict. ``calls`` need call_id, tool, arguments, status, policy_class and
    optionally result; the environment ledger is sealed from them in order."""
    trajectory = [{name: c.get(name) for name in CALL_FIELDS} for c in calls]  # seal_ledger checks the keys
    return {
        "schema": RUN_SCHEMA,
        "run_id": run_id,
        "workflow_id": workflow_id,
        "family": family,
        "domain": domain,
        "task": {"messages": messages, "tools": tools},
        "trajectory": trajectory,
        "env_ledger": seal_ledger(run_id, calls),
        "model_ledger": model_ledger,
        "labels": labels,
        "teacher": teacher,
        "provenance": provenance or {},
        "metadata": metadata or {},
    }
