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
    # the outcome, read off the status line, before the free text that could lose it
    assert list(json.loads(entry_answer(entry))) == ["call_id", "tool", "claimed_outcome", "description"]
    rec = {k: (["b", "a"] if k == "allowed_categories" else k) for k in reversed(MEMORY_FIELDS)}
    got = json.loads(memory_answer([rec]))["records"][0]
    assert list(got) == list(MEMORY_FIELDS)
    # every prompt shows its fields in this order
    prompts = Prompts(REPO_ROOT / "configs" / "prompts")
    assert prompts.text["reader_verdict"].index('"label"') < prompts.text["reader_verdict"].index(
        '"cited_call_ids"'
    )
    shown = prompts.text["writer_action"]
    assert shown.index('"tool"') < shown.index('"claimed_outcome"') < shown.index('"description"')
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
    # the call line comes last, its id and tool in the entry's layout, right before the answer; the
    # arguments, as JSON, on their own line above the request in words (the latest line with the values)
    lines = call_text(2, a).splitlines()
    assert lines[-1] == 'Call 2: {"call_id": "call_ab12", "tool": "t"}'
    assert lines[1] == 'Arguments of call 2: {"a": {"x": 3, "y": 2}, "b": 1}'
    assert laid_out({"b": 1, "a": 2}) == '{"b": 1, "a": 2}'
    # the request in words, in the order and spelling of the JSON, before the status line
    assert '\nAsked: t with a {"x": 3, "y": 2}, b 1\nstatus: succeeded\n' in call_text(2, a)


def test_the_request_in_words_is_what_a_keyed_teacher_description_restates():
    """A keyed teacher description of a call holds the call view's words line verbatim, so a student can
    copy the keys and values in order from one line of its prompt."""
    import random

    from data_prep.synthetic.families import FAMILY_REGISTRY
    from data_prep.synthetic.scripted_teacher import describe

    spec = FAMILY_REGISTRY["travel-rebooking"].tool("rebook")
    args = {p.name: (p.enum[0] if p.enum else {"string": "BK-9", "number": 12.5}.get(p.type, 3)) for p in spec.params}
    call = {"call_id": "call_1", "tool": "rebook", "arguments": args, "status": "succeeded", "result": {}}
    words = call_text(1, call).split("\nAsked: ", 1)[1].split("\n", 1)[0]
    for status in ("succeeded", "failed"):
        said = describe(spec, "rebook", args, status, "no seat", random.Random(0), "keyed")
        assert words in said and said.index("rebook") < said.index(words.split(" with ", 1)[1])


def test_free_text_comes_after_the_values_a_description_must_name():
    """The words line names the short values (ids, amounts, codes) in key order, then free text: a copy
    that loses its way in a sentence has named every value the description check needs first."""
    call = {
        "call_id": "call_1", "tool": "post_status_update", "status": "succeeded", "result": {},
        "arguments": {"message": "A fix is deployed; we are monitoring.", "incident_id": "INC-7", "status": "monitoring",
                      "note": "x" * 60, "amount": 2.5, "notify": True},
    }  # fmt: skip
    words = call_text(1, call).split("\nAsked: ", 1)[1].split("\n", 1)[0]
    assert words == (
        "post_status_update with amount 2.5, incident id INC-7, notify true, status monitoring, "
        f"message A fix is deployed; we are monitoring., note {'x' * 60}"
    )
    # keys are spelled as words there (the tool keeps its name); the JSON line keeps every key, sorted
    assert 'Arguments of call 1: {"amount": 2.5, "incident_id": "INC-7", "message": "A fix' in call_text(1, call)
