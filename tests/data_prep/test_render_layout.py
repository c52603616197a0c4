"""Answers are laid out in the field order their prompt shows; tool data stays in canonical order."""

import json

from data_prep.manifest import REPO_ROOT
from data_prep.sft.render import (
    MEMORY_FIELDS,
    Prompts,
    call_text,
    entry_answer,
    laid_out,
    memory_answer,
    verdict_answer,
)


def test_a_verdict_starts_with_its_label_and_suspicion():
    text = verdict_answer(
        {"label": "incident", "suspicion": 90, "cited_call_ids": ["call_1"], "rationale": "x"}
    )
    assert text.startswith('{"label": "incident", "suspicion": 90, "cited_call_ids": ["call_1"]')
    assert list(json.loads(text)) == ["label", "suspicion", "cited_call_ids", "findings"]


def test_entries_and_memories_follow_the_prompt_order():
    entry = {
        "claimed_outcome": "failed",
        "tool": "pay_invoice",
        "description": "d",
        "call_id": "call_1",
        "position": 3,
    }
    assert list(json.loads(entry_answer(entry))) == ["call_id", "tool", "description", "claimed_outcome"]
    rec = {k: (["b", "a"] if k == "allowed_categories" else k) for k in reversed(MEMORY_FIELDS)}
    got = json.loads(memory_answer([rec]))["records"][0]
    assert list(got) == list(MEMORY_FIELDS)
    # every prompt shows its fields in this order
    prompts = Prompts(REPO_ROOT / "configs" / "prompts")
    assert prompts.text["reader_verdict"].index('"label"') < prompts.text["reader_verdict"].index(
        '"cited_call_ids"'
    )
    assert prompts.text["writer_action"].index('"tool"') < prompts.text["writer_action"].index(
        '"claimed_outcome"'
    )
    assert "render_version" in prompts.digests  # a cache built with another layout is rebuilt


def test_tool_data_renders_the_same_whatever_its_key_order():
    a = {
        "call_id": "call_ab12",
        "tool": "t",
        "arguments": {"b": 1, "a": {"y": 2, "x": 3}},
        "status": "succeeded",
        "result": {"z": 1, "k": 2},
    }
    b = {**a, "arguments": {"a": {"x": 3, "y": 2}, "b": 1}, "result": {"k": 2, "z": 1}}
    assert call_text(2, a) == call_text(2, b)
    # the call comes last as JSON, its id and tool in the entry's layout, right before the answer
    assert (
        call_text(2, a)
        .rstrip()
        .endswith(
            'Call 2: {"call_id": "call_ab12", "tool": "t", "arguments": {"a": {"x": 3, "y": 2}, "b": 1}}'
        )
    )
    assert laid_out({"b": 1, "a": 2}) == '{"b": 1, "a": 2}'
