"""Tool-name augmentation of writer examples: the tools of a training example get fresh names.

A small student learns a training family's tool names by heart and then writes them for a held-out
family's calls (measured: `get_vendor` for `get_incident`, 0/45 tools right while 45/45 call ids were
copied). Renamed consistently in every turn of an example (the tool list, the calls, the entries and
their descriptions), a tool's name can only be copied from the call, never recalled. Only training rows
are renamed; validation and held-out rows stay as built.
"""

from __future__ import annotations

import random
import re

AUGMENTED_TASKS = ("writer_action",)
KEEP = frozenset({"log_action"})  # the logging tool is part of the protocol, not of a family
_TOOL_LINE = re.compile(r"^- ([A-Za-z][A-Za-z0-9_]*): ", re.MULTILINE)
_VERBS = (
    "fetch", "sync", "mark", "route", "scan", "post", "pull", "push", "tag", "file", "load", "set",
    "open", "close", "flag", "send", "check", "list", "get", "update", "query", "attach", "assign",
    "review", "submit", "cancel", "archive", "notify", "record", "approve",
)  # fmt: skip
_NOUNS = (
    "ticket", "asset", "order", "batch", "record", "queue", "node", "item", "folder", "report", "shift",
    "claim", "quote", "badge", "lease", "panel", "crate", "permit", "invoice", "contract", "device",
    "account", "window", "incident", "booking", "payment", "vendor", "member", "policy", "channel",
)  # fmt: skip


def tool_names(row: dict) -> list[str]:
    """The tools an example's first user turn lists (``- name: description`` lines), in order."""
    first = next((m["content"] for m in row["messages"] if m["role"] == "user"), "")
    return [t for t in _TOOL_LINE.findall(first) if t not in KEEP]


def rename_tools(rows: list[dict], seed: int, share: float) -> list[dict]:
    """``rows`` with the tools of a ``share`` of the writer examples renamed (a deterministic choice
    per example and seed); other rows are returned as they are."""
    if share <= 0:
        return rows
    out = []
    for row in rows:
        rng = random.Random(f"ledgerwright/rename-tools/{seed}/{row['task']}/{row['id']}")
        tools = tool_names(row) if row["task"] in AUGMENTED_TASKS else []
        if not tools or rng.random() >= share:
            out.append(row)
            continue
        text = "\n".join(m["content"] for m in row["messages"])
        fresh: dict[str, str] = {}
        for tool in tools:
            for attempt in range(1000):
                name = f"{rng.choice(_VERBS)}_{rng.choice(_NOUNS)}" + (
                    f"_{attempt}" if attempt >= 100 else ""
                )
                if name not in fresh.values() and name not in tools and name not in text:
                    break
            fresh[tool] = name
        pattern = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, tools)) + r")(?![A-Za-z0-9_])")
        messages = [
            {**m, "content": pattern.sub(lambda x, f=fresh: f[x.group(1)], m["content"])}
            for m in row["messages"]
        ]
        out.append({**row, "messages": messages})
    return out
