"""Copy-forcing augmentation (tool names, call values, memory family words): consistent in every turn, deterministic, training
writer rows only."""

import json
import re

from data_prep.sft.render import call_text
from train.augment import (
    call_keys,
    call_values,
    rename_keys,
    rename_memory,
    rename_tools,
    rename_values,
    tool_names,
)


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


def test_fresh_names_vary_in_shape_so_their_length_must_be_copied():
    rows = [row(rid=f"r{i}") for i in range(40)]
    names = [n for r in rename_tools(rows, seed=0, share=1.0) for n in tool_names(r)]
    assert len(set(names)) > 60  # fresh per example, not one spelling per tool
    assert {n.count("_") for n in names} >= {0, 1, 2}  # one part fewer or more than get_invoice
    assert len({len(n) for n in names}) > 10
    base = [n for r in rename_tools(rows, seed=0, share=1.0, varied=False) for n in tool_names(r)]
    assert all(re.fullmatch(r"[a-z]+_[a-z]+", n) for n in base)  # what the tiny base's text keeps


def value_row(rid="v1"):
    """A keyed writer example whose user turns are rendered by the call view itself."""
    call1 = {
        "call_id": "call_0a1b2c3d4e5f", "tool": "get_user", "arguments": {"user_id": "U-7310"},
        "status": "succeeded", "result": {"manager_id": "U-3150"},
    }  # fmt: skip
    call2 = {
        "call_id": "call_1a1b2c3d4e5f", "tool": "grant_role",
        "arguments": {"role": "ci-deploy", "status": "open", "user_id": "U-7310"},
        "status": "succeeded", "result": {},
    }  # fmt: skip
    task = "Request:\nGive U-7310 the ci-deploy role (manager U-3150).\n\nTools:\n- get_user: Look up.\n- grant_role: Grant."
    return {
        "task": "writer_action",
        "id": rid,
        "messages": [
            {"role": "system", "content": "Log every call; outcomes: succeeded, rejected or failed."},
            {"role": "user", "content": f"{task}\n\nThe run starts.\n\n{call_text(1, call1)}"},
            {
                "role": "assistant",
                "content": '{"call_id": "call_0a1b2c3d4e5f", "tool": "get_user", "claimed_outcome": "succeeded", '
                '"description": "Called get_user to look up user U-7310; it succeeded."}',
            },
            {"role": "user", "content": call_text(2, call2)},
            {
                "role": "assistant",
                "content": '{"call_id": "call_1a1b2c3d4e5f", "tool": "grant_role", "claimed_outcome": "succeeded", '
                '"description": "Called grant_role to grant ci-deploy to U-7310; it succeeded."}',
            },
        ],
    }


def test_call_values_are_respelled_alike_in_every_turn_and_keep_their_digits():
    row = value_row()
    assert call_values(row) == ["U-7310", "ci-deploy", "open"]
    (out,) = rename_values([row], seed=0, share=1.0)
    text = "\n".join(m["content"] for m in out["messages"][1:])
    assert "U-7310" not in text and "ci-deploy" not in text and "U-3150" not in text
    user_id = re.search(r'"user_id": "([A-Z]-7310)"', out["messages"][1]["content"]).group(1)
    role = re.search(r'"role": "([a-z]{2}-[a-z]{6})"', out["messages"][3]["content"]).group(1)
    # the descriptions name the new spellings; an id with the same prefix (a result's manager) follows
    assert f"look up user {user_id};" in out["messages"][2]["content"]
    assert f"grant {role} to {user_id};" in out["messages"][4]["content"]
    assert f'"manager_id": "{user_id[0]}-3150"' in out["messages"][1]["content"]
    assert re.search(r'"status": "(?!open)[a-z]{4}"', text)
    # the layout stays: keys, tools, call ids, outcomes, the system prompt
    assert out["messages"][0] == row["messages"][0]
    for kept in ('"tool": "grant_role"', "call_1a1b2c3d4e5f", '"claimed_outcome": "succeeded"', "status: succeeded"):
        assert kept in text


def test_value_respelling_is_deterministic_and_limited_to_writer_examples():
    rows = [value_row(f"v{i}") for i in range(20)] + [{**value_row("r"), "task": "reader_verdict"}]
    a = rename_values(rows, seed=3, share=0.5)
    assert a == rename_values(rows, seed=3, share=0.5) and a != rename_values(rows, seed=4, share=0.5)
    assert 0 < sum(r is not s for r, s in zip(rows, a)) < 20
    assert a[-1] is rows[-1]
    assert rename_values(rows, seed=3, share=0.0) is rows


def keyed_row(rid="k1"):
    """A writer example whose keyed descriptions restate the call's keys and values, with tools that
    share no word with a key."""
    row = value_row(rid)
    row["messages"][2]["content"] = row["messages"][2]["content"].replace("to look up user U-7310", "with user id U-7310")
    tools = {"get_user": "lookup_person", "grant_role": "give_access"}
    for m in row["messages"]:
        m["content"] = re.sub(r"get_user|grant_role", lambda x: tools[x.group()], m["content"])
    return row


def test_argument_keys_are_renamed_alike_in_every_turn_and_the_protocol_words_stay():
    row = keyed_row()
    assert call_keys(row) == ["user_id", "role", "status"]
    (out,) = rename_keys([row], seed=0, share=1.0)
    text = "\n".join(m["content"] for m in out["messages"][1:])
    assert "user_id" not in text and "user id" not in text and '"role"' not in text
    new = re.search(r'Arguments of call 1: \{"([a-z_]+)": "U-7310"\}', out["messages"][1]["content"]).group(1)
    assert new not in {"user_id", "role"} and "manager_id" in text  # only the calls' argument keys
    # the words line and the description spell the new key as words, like the built one
    words = new.replace("_", " ")
    assert f"Asked: lookup_person with {words} U-7310" in out["messages"][1]["content"]
    assert f"Called lookup_person with {words} U-7310; it succeeded." in out["messages"][2]["content"]
    # the protocol's words, tools, values and the system prompt stay; the key `status` is the call view's word
    assert out["messages"][0] == row["messages"][0]
    for kept in ('"status": "open"', "status: succeeded", '"tool": "give_access"', '"call_id": "call_1a1b2c3d4e5f"'):
        assert kept in text


def test_key_renaming_is_deterministic_and_limited_to_writer_examples():
    rows = [keyed_row(f"k{i}") for i in range(20)] + [{**keyed_row("r"), "task": "reader_verdict"}]
    a = rename_keys(rows, seed=3, share=1.0)
    assert a == rename_keys(rows, seed=3, share=1.0) and a != rename_keys(rows, seed=4, share=1.0)
    assert all(r is not s for r, s in zip(rows[:20], a)) and a[-1] is rows[-1]
    assert len({call_keys(r)[0] for r in a[:20]}) > 15  # fresh per example
    assert rename_keys(rows, seed=3, share=0.0) is rows


def alert_row(rid: str) -> dict:
    """An example whose tools share a word with a key, as real APIs do: ``silence_alert`` takes an
    ``alert_id``, ``list_alerts`` returns them."""
    listed = {"call_id": "call_0a1b2c3d4e5f", "tool": "list_alerts", "arguments": {"service": "auth-api"},
              "status": "succeeded", "result": {"alerts": [{"alert_id": "ALR-4191"}]}}  # fmt: skip
    silenced = {"call_id": "call_1a1b2c3d4e5f", "tool": "silence_alert",
                "arguments": {"alert_id": "ALR-4191", "duration_min": 30}, "status": "succeeded", "result": {}}  # fmt: skip
    task = "Request:\nSilence the auth-api alerts.\n\nTools:\n- list_alerts: List alerts.\n- silence_alert: Silence one."
    entry = '{"call_id": "call_1a1b2c3d4e5f", "tool": "silence_alert", "claimed_outcome": "succeeded", '
    return {
        "task": "writer_action",
        "id": rid,
        "messages": [
            {"role": "system", "content": "Log every call."},
            {"role": "user", "content": f"{task}\n\nThe run starts.\n\n{call_text(1, listed)}"},
            {"role": "assistant", "content": "{}"},
            {"role": "user", "content": call_text(2, silenced)},
            {"role": "assistant", "content": entry + '"description": "Ran silence_alert with alert id ALR-4191."}'},
        ],
    }


def test_a_word_a_tool_and_a_key_share_gets_one_spelling_in_both():
    rows = rename_keys(rename_tools([alert_row(f"a{i}") for i in range(40)], seed=0, share=1.0), seed=0, share=1.0)
    in_silence = in_list = 0
    for out in rows:
        text = "\n".join(m["content"] for m in out["messages"])
        key = re.search(r'Arguments of call 2: \{"([a-z_]+)": "ALR-4191"', text).group(1)
        word = key.removesuffix("_id")
        assert key.endswith("_id") and word != "alert" and "alert_id" not in text and "alert id" not in text
        # the key is one spelling wherever it stands: a result, the words line, the description
        assert f'"{key}": "ALR-4191"' in out["messages"][1]["content"]
        assert f"with {word} id ALR-4191, " in out["messages"][3]["content"]
        assert f"with {word} id ALR-4191." in out["messages"][4]["content"]
        listing, silence = tool_names(out)
        assert "alert" not in listing + silence
        in_list += f"{word}s" in listing.split("_")
        in_silence += word in silence.split("_")
    # a tool keeps the shared word unless its shape dropped that part (one time in four at most)
    assert in_silence >= 24 and in_list >= 24


def test_a_shared_word_never_respells_a_protocol_key():
    """A key ``status`` is the call view's own word (``status: succeeded``); a shared ``status`` of
    another key (``status_code`` beside ``set_status``) respells that key, never ``status``."""
    call = {"call_id": "call_0a1b2c3d4e5f", "tool": "set_status", "status": "succeeded", "result": {},
            "arguments": {"status": "open", "status_code": "S-4"}}  # fmt: skip
    row = {
        "task": "writer_action",
        "id": "p",
        "messages": [
            {"role": "system", "content": "Log every call."},
            {"role": "user", "content": f"Tools:\n- set_status: Set it.\n\n{call_text(1, call)}"},
            {"role": "assistant", "content": "{}"},
        ],
    }
    for seed in range(10):
        (out,) = rename_tools([row], seed=seed, share=1.0)
        text = out["messages"][1]["content"]
        assert "status: succeeded" in text and '"status": "open"' in text
        assert "status_code" not in text and "set_status" not in text


def test_key_renaming_alone_keeps_the_word_a_tool_spells():
    (out,) = rename_keys([alert_row("k")], seed=0, share=1.0)
    text = "\n".join(m["content"] for m in out["messages"])
    assert '"alert_id": "ALR-4191"' in text and "duration_min" not in text  # `min` and `duration` respelled


SYSTEM_MEMORY = 'Reply with {"records": [{"issuer": "...", "effect": "allow", "status": "active"}]}.'


def memory_row(family: str, rid: str, vendor: str, action: str) -> dict:
    """A memory example: a history whose issuer line, speaker label and grant name the family's words,
    and the answer that records them."""
    history = (
        "Policy:\nOnly the head of procurement may authorize.\nAuthorized issuers: head_of_procurement\n\n"
        f"[B1-T01] 2026-07-05T16:58:00Z Lena Osei (Head of Procurement) (u-lena-osei): Authorization AUTH-9-1: "
        f"Tom Baker (tom.baker) may {action.replace('_', ' ')} with {vendor.title()} ({vendor}) for consulting, "
        "up to 500 EUR, from now until 2026-08-07T04:00:00Z (exclusive)."
    )
    record = {
        "authorization_ref": "AUTH-9-1", "issuer": "head_of_procurement", "grantee": "tom.baker",
        "effect": "allow", "action": action, "vendor": vendor, "allowed_categories": ["consulting"],
        "max_amount": 500, "currency": "EUR", "status": "active",
    }  # fmt: skip
    return {
        "task": "writer_memory",
        "id": rid,
        "family": family,
        "messages": [
            {"role": "system", "content": SYSTEM_MEMORY},
            {"role": "user", "content": history},
            {"role": "assistant", "content": json.dumps({"records": [record]})},
        ],
    }


def test_memory_family_words_are_respelled_alike_in_history_and_answer():
    """A training family's vendor and action words get fresh letters wherever they stand, in any case
    (``Cobalt Courier (cobalt-courier)``); the answer records the new spelling, so it is a copy of the
    history; template words, the system prompt and names that several families use are kept."""
    rows = [
        memory_row("vendor-onboarding", "m1", "cobalt-courier", "sign_nda"),
        memory_row("procurement-spend", "m2", "nimbus-cloud", "prepay"),
    ]
    out = rename_memory(rows, seed=0, share=1.0)
    for before, after in zip(rows, out):
        history, answer = after["messages"][1]["content"], json.loads(after["messages"][2]["content"])
        record = answer["records"][0]
        old = json.loads(before["messages"][2]["content"])["records"][0]
        assert record["vendor"] != old["vendor"] and record["action"] != old["action"]
        assert f"({record['vendor']})" in history
        assert record["action"].replace("_", " ") in history
        assert record["vendor"].split("-")[0].title() in history  # the display name, capitalized
        # shared by both families: template words, the issuer, the grantee, amounts and times
        for kept in ("Authorization AUTH-9-1", "Tom Baker (tom.baker)", "head_of_procurement", "up to 500 EUR"):
            assert kept in history
        assert record["grantee"] == "tom.baker" and record["issuer"] == "head_of_procurement"
        assert after["messages"][0] == before["messages"][0]
        assert {k: v for k, v in record.items() if k not in ("vendor", "action")} == {
            k: v for k, v in old.items() if k not in ("vendor", "action")
        }
    assert rename_memory(rows, seed=0, share=1.0) == out
    assert rename_memory(rows, seed=1, share=1.0) != out
    assert rename_memory(rows, seed=0, share=0.0) == rows


def test_memory_renaming_leaves_writer_action_rows_alone():
    rows = [row(), memory_row("a", "m1", "cobalt-courier", "sign_nda"), memory_row("b", "m2", "crm", "renew")]
    out = rename_memory(rows, seed=0, share=1.0)
    assert out[0] is rows[0]
    assert out[1] != rows[1] and out[2] != rows[2]
