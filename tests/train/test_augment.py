"""Tool-name augmentation: consistent in every turn, deterministic, training writer rows only."""

import re

from train.augment import rename_tools, tool_names


def row(task="writer_action", rid="r1"):
    user = (
        "Request:\nPay INV-7.\n\nTools:\n- get_invoice: Open an invoice.\n- pay_invoice: Pay it.\n"
        "- log_action: Record the call.\n\nThe run starts.\n\nCall 1: get_invoice (id call_0a1b2c3d4e5f)"
    )
    answer = '{"call_id": "call_0a1b2c3d4e5f", "tool": "get_invoice", "description": "Called get_invoice on INV-7."}'
    return {
        "task": task,
        "id": rid,
        "messages": [
            {"role": "system", "content": "You write ledgers; log_action is not logged."},
            {"role": "user", "content": user},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "Call 2: pay_invoice (id call_1a1b2c3d4e5f)"},
        ],
    }


def test_tools_are_renamed_in_every_turn_and_the_protocol_tool_is_kept():
    (out,) = rename_tools([row()], seed=0, share=1.0)
    new = tool_names(out)
    assert len(new) == 2 and not {"get_invoice", "pay_invoice"} & set(new)
    text = "\n".join(m["content"] for m in out["messages"])
    assert "get_invoice" not in text and "pay_invoice" not in text and "log_action" in text
    assert f'"tool": "{new[0]}"' in out["messages"][2]["content"]
    assert f"Called {new[0]} on INV-7" in out["messages"][2]["content"]
    assert re.search(rf"Call 1: {new[0]} \(id call_0a1b2c3d4e5f\)", out["messages"][1]["content"])
    assert out["messages"][3]["content"].startswith(f"Call 2: {new[1]} ")


def test_renaming_is_deterministic_and_limited_to_writer_examples():
    rows = [row(rid=f"r{i}") for i in range(20)] + [row(task="reader_verdict", rid="v")]
    a = rename_tools(rows, seed=3, share=0.5)
    assert a == rename_tools(rows, seed=3, share=0.5)
    assert a != rename_tools(rows, seed=4, share=0.5)
    renamed = sum(r is not s for r, s in zip(rows, a))
    assert 0 < renamed < 20  # about half of the writer rows
    assert a[-1] is rows[-1]  # a reader row is untouched
    assert rename_tools(rows, seed=3, share=0.0) is rows
