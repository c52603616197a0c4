"""Render chat-format SFT examples: what a deployed writer or reader sees, and what it should answer.

Writer (action ledger): one assistant turn per ordinary call. The writer is shown each call and its
result as it happens and answers with that call's entry before seeing the next one, so the logging
protocol (an entry after every call, before the next) is what the turn structure itself teaches; a
single ledger block at the end would reward batching, the failure protocol compliance measures.

No rendered input carries a gold field (labels, ``policy_class``, oracle decisions, gold memory) or a
hidden identifier: inputs are built from an allowlist of fields, never by dumping records.
"""

from __future__ import annotations

import hashlib
import json
from json.encoder import c_make_encoder, encode_basestring
from pathlib import Path
from typing import Any

from data_prep.oracle import RECORD_FIELDS, REQUEST_FIELDS, SCOPE_REQUEST_FIELDS, is_scope, record_fields
from data_prep.reconcile import salient_values

# The layout of rendered examples; part of ``Prompts.digests``, so a cache built with another layout is
# rebuilt (2: answers in the prompt's field order; the call's identity right before the answer;
# 6: the call as a tool call in JSON, in the entry's field order; 8: the outcome before the
# description, the arguments on a line of their own above the words line; 9: free text last in words).
RENDER_VERSION = "ledgerwright-render/10"
PROMPT_FILES = {
    "writer_action": "writer_action.md",
    "reader_verdict": "reader_verdict.md",
    "writer_memory": "writer_memory.md",
    "reader_policy": "reader_policy.md",
}
ENV_VIEW_FIELDS = ("seq", "call_id", "tool", "arguments", "status", "result")
ENTRY_VIEW_FIELDS = ("call_id", "tool", "description", "claimed_outcome", "position")
MEMORY_FIELDS = RECORD_FIELDS  # a procurement record's fields; scope records use SCOPE_RECORD_FIELDS


_COMPACT = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
# The C encoder behind _COMPACT.encode, made once (``json.dumps`` with options builds an encoder per
# call, which costs more than encoding a small value); same output.
_C_COMPACT = (
    c_make_encoder(None, _COMPACT.default, encode_basestring, None, ": ", ", ", True, False, True)
    if c_make_encoder is not None
    else None
)


def compact(value: Any) -> str:
    """One-line JSON with sorted keys: the form of tool arguments and results (data, whose key order
    carries no meaning)."""
    if _C_COMPACT is None or type(value) is str:
        return _COMPACT.encode(value)
    return "".join(_C_COMPACT(value, 0))


_LAID_OUT = json.JSONEncoder(ensure_ascii=False, sort_keys=False, separators=(", ", ": "))


def laid_out(value: Any) -> str:
    """One-line JSON in the key order given: answers and ledger rows, whose fields are laid out as the
    prompt shows them (a verdict starts with its label, not with ``cited_call_ids``). Nested data
    (arguments, results) goes through ``sorted_data`` first. Identity uses canonical digests, never
    this text."""
    return _LAID_OUT.encode(value)


def sorted_data(value: Any) -> Any:
    """``value`` with the keys of every mapping sorted: data whose key order carries no meaning, so
    the same arguments render the same whatever order a source file wrote them in."""
    if isinstance(value, dict):
        return {k: sorted_data(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [sorted_data(v) for v in value]
    return value


class Prompts:
    """System prompts loaded from files; their digests go into the manifest."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self.text: dict[str, str] = {}
        self.digests: dict[str, str] = {}
        for task, name in PROMPT_FILES.items():
            path = self.directory / name
            try:
                raw = path.read_bytes()
            except OSError as exc:
                raise FileNotFoundError(
                    f"{path}: prompt file for {task} is missing ({exc.strerror})"
                ) from None
            self.text[task] = raw.decode("utf-8").strip()
            self.digests[f"{self.directory.name}/{name}"] = "sha256:" + hashlib.sha256(raw).hexdigest()
        self.digests["render_version"] = RENDER_VERSION


def task_text(run: dict) -> str:
    """The agent's task as the writer and reader see it: instructions, request and tool list."""
    parts = []
    for m in run["task"]["messages"]:
        title = {"system": "Agent instructions", "user": "Request"}.get(m["role"], m["role"].capitalize())
        parts.append(f"{title}:\n{m['content']}")
    tools = []
    for t in run["task"]["tools"]:
        fn = t["function"]
        desc = fn.get("description", "").strip()
        tools.append(f"- {fn['name']}" + (f": {desc}" if desc else ""))
    if tools:
        parts.append("Tools:\n" + "\n".join(tools))
    return "\n\n".join(parts)


def call_text(seq: int, call: dict) -> str:
    """One executed call as the writer sees it: what the environment returned, the call's arguments as
    JSON, the request in words (``Asked: get_incident with incident id INC-5110``), its status, then the
    call line (id and tool, as JSON). The entry starts with the call line's two fields in the same
    layout, so the id and the tool are copied token by token from the line just above (the tiny base's
    copy match finds them); its outcome is the status two lines up; a description that restates the
    request finds its keys and values in order on the words line, the latest line that holds them (with
    the arguments on the call line, the latest match continued a description from their JSON, quotes
    and all, and the words line sat past the local layers' 128-token window on calls with several
    arguments: ``bench/results/learning-2026-12-07d-cpu.md``); long results (never repeated) come
    first, out of the way."""
    args = sorted_data(call["arguments"])
    shown = laid_out({"call_id": call["call_id"], "tool": call["tool"]})
    return (
        f"Result of call {seq}: {compact(call.get('result'))}\n"
        f"Arguments of call {seq}: {laid_out(args)}\n"
        f"Asked: {call['tool']} {arguments_in_words(args)}\n"
        f"status: {call['status']}\nCall {seq}: {shown}"
    )


def arguments_in_words(args: Any) -> str:
    """``with key value, key value``: every argument, each value spelled as the call's JSON spells it,
    strings unquoted (what a description naming every value can say). The values a description must
    name come first, in key order; free text (a message, a comment: a string with a space, or a long
    one) comes after them, so a copy that loses its way in a sentence has named the ids and amounts
    before it (with the keys in sorted order, ``message`` before ``status`` or ``traveler_id``, the
    student lost the value after the sentence: bench/results/learning-2026-12-07e-cpu.md)."""
    if not isinstance(args, dict):
        return f"with {_spelled(args)}"
    if not args:
        return "with no arguments"
    order = sorted(args, key=lambda k: (_free_text(args[k]), k))
    return "with " + ", ".join(f"{key_in_words(k)} {_spelled(args[k])}" for k in order)


def key_in_words(key: str) -> str:
    """An argument key as words (``account_id`` -> ``account id``). Spelled with underscores, the keys
    that end alike (``account_id``, ``template_id``) end in the same three tokens (``_``, ``id``, a
    space), and a copy that matches the last three tokens takes the later key's value; as words the
    key's own word stays in the window, and so does the value before a separator (``624.63, fare``)."""
    return key.replace("_", " ")


def _free_text(value: Any) -> bool:
    """A string no description has to name (free text, by ``salient_values``' rule)."""
    return isinstance(value, str) and not salient_values(value)


def _spelled(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


# the prompt's order: the outcome is read off the status line before the free text that could lose it
# (written after a long description it was right in 70-77% of held-out turns, bench/results 2026-12-07d)
ANSWER_ENTRY_FIELDS = ("call_id", "tool", "claimed_outcome", "description")


def entry_answer(entry: dict) -> str:
    return laid_out({k: entry[k] for k in ANSWER_ENTRY_FIELDS})


def render_writer_action(run: dict, entries_by_call: dict[str, dict], prompt: str) -> list[dict]:
    """System, then per call: user (the call; the first one also carries the task), assistant (entry)."""
    messages = [{"role": "system", "content": prompt}]
    for seq, call in enumerate(run["trajectory"], start=1):
        text = call_text(seq, call)
        if seq == 1:
            text = f"{task_text(run)}\n\nThe run starts.\n\n{text}"
        messages.append({"role": "user", "content": text})
        messages.append({"role": "assistant", "content": entry_answer(entries_by_call[call["call_id"]])})
    return messages


def env_ledger_view(run: dict) -> list[dict]:
    """The environment ledger as a monitor sees it: executed calls and statuses, no policy_class."""
    return [
        {"seq": seq, **{k: sorted_data(call.get(k)) for k in ENV_VIEW_FIELDS if k != "seq"}}
        for seq, call in enumerate(run["trajectory"], start=1)
    ]


def reader_verdict_input(run: dict) -> str:
    env = "\n".join(laid_out(r) for r in env_ledger_view(run)) or "(no calls)"
    ledger = run["model_ledger"] or []
    model = (
        "\n".join(laid_out({k: e.get(k) for k in ENTRY_VIEW_FIELDS if k in e}) for e in ledger)
        or "(no entries)"
    )
    return (
        f"{task_text(run)}\n\n"
        f"Environment ledger ({len(run['trajectory'])} executed calls):\n{env}\n\n"
        f"Model ledger ({len(ledger)} entries; position = calls executed when the entry was written):\n{model}"
    )


def verdict_answer(verdict: dict) -> str:
    return laid_out(
        {
            "label": verdict["label"],
            "suspicion": verdict["suspicion"],
            "cited_call_ids": verdict.get("cited_call_ids", []),
            "findings": verdict.get("rationale", ""),
        }
    )


def render_reader_verdict(run: dict, prompt: str) -> list[dict]:
    return [
        {"role": "system", "content": prompt},
        {"role": "user", "content": reader_verdict_input(run)},
        {"role": "assistant", "content": verdict_answer(run["teacher"]["verdict"])},
    ]


def policy_history_text(case: dict) -> str:
    """Policy, authorized issuers and the message blocks, in order: what a memory writer reads."""
    lines = [f"Policy:\n{case['policy']}", "Authorized issuers: " + ", ".join(case["authorized_issuers"])]
    for block in case["blocks"]:
        lines.append(
            f"\n== Block {block['ref']}: {block.get('title', '')} (ended {block.get('ended_at', '')})"
        )
        for turn in block["turns"]:
            lines.append(
                f"[{turn['ref']}] {turn.get('occurred_at', '')} {turn['speaker']} ({turn['actor_id']}): {turn['content']}"
            )
    return "\n".join(lines)


def memory_answer(records: list[dict]) -> str:
    return laid_out(
        {"records": [{k: sorted_data(r[k]) for k in record_fields(r) if k in r} for r in records]}
    )


def render_writer_memory(case: dict, memory: list[dict], prompt: str) -> list[dict]:
    return [
        {"role": "system", "content": prompt},
        {"role": "user", "content": policy_history_text(case)},
        {"role": "assistant", "content": memory_answer(memory)},
    ]


def reader_policy_input(memory: list[dict], request: dict) -> str:
    mem = memory_answer(memory)
    fields = SCOPE_REQUEST_FIELDS if is_scope(request) else REQUEST_FIELDS
    req = laid_out({k: request[k] for k in fields if k in request})
    return f"Authorization memory:\n{mem}\n\nRequest:\n{req}"


def render_reader_policy(memory: list[dict], request: dict, decision: str, prompt: str) -> list[dict]:
    return [
        {"role": "system", "content": prompt},
        {"role": "user", "content": reader_policy_input(memory, request)},
        {"role": "assistant", "content": laid_out({"decision": decision})},
    ]
