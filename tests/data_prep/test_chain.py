import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from runfactory import run_dict

from data_prep.chain import record_digest, seal_ledger, verify_ledger
from data_prep.integrity import verify_run
from data_prep.records import Run

TOOLS = ["lookup", "pay", "notify", "approve", "hold"]


def _calls(n: int, salt: str = "") -> list[dict]:
    return [
        {
            "call_id": f"c{i}",
            "tool": TOOLS[i % len(TOOLS)],
            "arguments": {"i": i, "salt": salt},
            "status": ["succeeded", "rejected", "failed"][i % 3],
            "policy_class": ["benign", "policy_relevant", "unauthorized"][i % 3],
        }
        for i in range(1, n + 1)
    ]


def test_sealed_ledger_verifies():
    assert verify_ledger("r", seal_ledger("r", _calls(5))) is None
    assert verify_ledger("r", seal_ledger("r", [])) is None


def test_ledger_bound_to_its_run_id():
    brk = verify_ledger("other", seal_ledger("r", _calls(3)))
    assert brk is not None and brk.index == 0


@pytest.mark.parametrize(
    "mutate,kind,index",
    [
        (lambda L: L["records"][2].update(tool="wire_out"), "edited", 2),
        (lambda L: L["records"].pop(2), "dropped", 2),
        (lambda L: L["records"].pop(), "truncated", -1),
        (lambda L: L["records"].insert(1, L["records"].pop(2)), "reordered", 1),
        (lambda L: L["records"].insert(3, copy.deepcopy(L["records"][2])), "duplicated", 3),
        (lambda L: L["head"].update(count=4), "head_mismatch", -1),
        (lambda L: L["head"].update(head_digest=L["records"][1]["digest"]), "head_mismatch", -1),
        (lambda L: L.pop("head"), "truncated", -1),
        (lambda L: L["records"][1].pop("policy_class"), "malformed", 1),
    ],
)
def test_named_break_kinds(mutate, kind, index):
    ledger = seal_ledger("r", _calls(5))
    mutate(ledger)
    brk = verify_ledger("r", ledger)
    assert brk is not None
    assert (brk.kind, brk.index) == (kind, index)


def test_inserted_foreign_record_and_fork():
    ledger = seal_ledger("r", _calls(5))
    rec = dict(ledger["records"][2], call_id="c99", tool="wire_out", prev_digest="sha256:" + "0" * 64)
    rec["digest"] = record_digest(rec)
    ledger["records"].insert(2, rec)
    assert verify_ledger("r", ledger).kind in ("inserted", "forked")
    forked = seal_ledger("r", _calls(5))
    twin = dict(forked["records"][2], call_id="c77")
    twin["digest"] = record_digest(twin)
    forked["records"].insert(3, twin)
    brk = verify_ledger("r", forked)
    assert (brk.kind, brk.index) == ("forked", 3)


def test_truncated_and_resealed_is_caught_by_trajectory():
    d = run_dict()
    d["env_ledger"] = seal_ledger(d["run_id"], [dict(c, policy_class="benign") for c in _calls(0)])
    run = Run.from_dict(d)
    problem = verify_run(run)
    assert problem is not None and problem.kind == "truncated"


MUTATIONS = ["edit", "drop", "insert", "reorder", "duplicate", "splice", "truncate", "reseal_truncate"]
FIELDS = ["seq", "call_id", "tool", "args_digest", "status", "policy_class", "prev_digest", "digest"]


def _new_value(value):
    if isinstance(value, int):
        return value + 1
    if value == "succeeded":
        return "failed"
    if value in ("benign", "policy_relevant"):
        return "unauthorized"
    if value == "unauthorized":
        return "benign"
    if value in ("rejected", "failed"):
        return "succeeded"
    if value.startswith("sha256:"):
        return "sha256:" + ("1" if value[7] != "1" else "2") + value[8:]
    return value + "x"


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(min_value=1, max_value=9),
    mutation=st.sampled_from(MUTATIONS),
    data=st.data(),
)
def test_every_single_mutation_is_detected(n, mutation, data):
    d = run_dict(call_list=[dict(c, result=None) for c in _calls(n)])
    other = seal_ledger("other-run", _calls(n + 2, salt="o"))
    recs = d["env_ledger"]["records"]
    i = data.draw(st.integers(min_value=0, max_value=n - 1), label="index")
    if mutation == "edit":
        target = data.draw(st.sampled_from(["record", "head"]), label="where")
        if target == "record":
            key = data.draw(st.sampled_from(FIELDS), label="field")
            recs[i][key] = _new_value(recs[i][key])
        else:
            key = data.draw(st.sampled_from(["count", "head_digest", "seal"]), label="field")
            d["env_ledger"]["head"][key] = _new_value(d["env_ledger"]["head"][key])
    elif mutation == "drop":
        recs.pop(i)
    elif mutation == "insert":
        recs.insert(i, copy.deepcopy(other["records"][min(i, len(other["records"]) - 1)]))
    elif mutation == "reorder":
        if n < 2:
            recs.insert(0, copy.deepcopy(recs[0]))
        else:
            j = data.draw(st.integers(min_value=0, max_value=n - 1).filter(lambda j: j != i), label="j")
            recs[i], recs[j] = recs[j], recs[i]
    elif mutation == "duplicate":
        j = data.draw(st.integers(min_value=0, max_value=n), label="j")
        recs.insert(j, copy.deepcopy(recs[i]))
    elif mutation == "splice":
        recs[i] = copy.deepcopy(other["records"][i])
    elif mutation == "truncate":
        del recs[i:]
    elif mutation == "reseal_truncate":
        kept = d["trajectory"][:i]
        classes = [r["policy_class"] for r in recs[:i]]
        d["env_ledger"] = seal_ledger(d["run_id"], [dict(c, policy_class=p) for c, p in zip(kept, classes)])
    run = Run.from_dict(d)
    assert verify_run(run) is not None, mutation


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(
        {
            "seq": st.integers(min_value=1, max_value=2**53 - 1),
            "call_id": st.text(alphabet=st.characters(exclude_categories=("Cs",)), min_size=1),
            "tool": st.text(min_size=1),
            "args_digest": st.text(),
            "status": st.text(),
            "policy_class": st.text(),
            "prev_digest": st.text(),
        }
    )
)
def test_record_fast_digest_equals_generic_digest(rec):
    from data_prep.canonical import digest
    from data_prep.chain import RECORD_DOMAIN, RECORD_FIELDS

    try:
        want = digest(RECORD_DOMAIN, {k: rec[k] for k in RECORD_FIELDS})
    except ValueError:
        return
    assert record_digest(rec) == want


_texts = st.text(alphabet=st.characters(exclude_categories=("Cs",))) | st.text()


@settings(max_examples=300, deadline=None)
@given(run_id=_texts, head_digest=_texts, count=st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1))
def test_genesis_and_head_seal_fast_paths_equal_generic_digest(run_id, head_digest, count):
    from data_prep.canonical import digest
    from data_prep.chain import GENESIS_DOMAIN, HEAD_DOMAIN, genesis_digest, head_seal

    try:
        want = digest(GENESIS_DOMAIN, {"run_id": run_id})
    except ValueError:
        with pytest.raises(ValueError):
            genesis_digest(run_id)
    else:
        assert genesis_digest(run_id) == want
    try:
        want = digest(HEAD_DOMAIN, {"run_id": run_id, "count": count, "head_digest": head_digest})
    except ValueError:
        with pytest.raises(ValueError):
            head_seal(run_id, count, head_digest)
    else:
        assert head_seal(run_id, count, head_digest) == want


def test_checked_record_digest_refuses_lone_surrogates_like_the_generic_path():
    from data_prep.chain import _record_digest_checked

    rec = seal_ledger("r", _calls(2))["records"][1]
    rec["call_id"] = "c\ud800"
    with pytest.raises(ValueError):
        _record_digest_checked(rec)
    with pytest.raises(ValueError):
        record_digest(rec)
