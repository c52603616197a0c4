"""The deterministic authorization oracle, the policy-case record, and the generated policy cases."""

import copy
import json
from collections import Counter

import jsonschema
import pytest

from data_prep.oracle import (
    DECLINE,
    EXECUTE,
    decide,
    gold_memory_from_events,
    memory_decide,
    parse_time,
    records_at,
)
from data_prep.policy_case import (
    iter_policy_case_file,
    load_schema,
    probe_problems,
    validate_policy_case,
    validate_record,
)
from data_prep.records import LineError, RecordError
from data_prep.synthetic import SynthConfig, iter_policy_cases
from data_prep.synthetic.config import MEMORY_ERRORS

ISSUERS = ["chief_financial_officer"]
RECORD = {
    "authorization_ref": "AUTH-1",
    "issuer": "chief_financial_officer",
    "grantee": "ana",
    "effect": "allow",
    "action": "purchase",
    "vendor": "nimbus",
    "allowed_categories": ["software", "services"],
    "max_amount": 1000,
    "currency": "USD",
    "valid_from": "2026-03-01T00:00:00Z",
    "valid_until": "2026-04-01T00:00:00Z",
    "status": "active",
    "source_turn_refs": ["T1"],
}
REQ = {
    "grantee": "ana",
    "action": "purchase",
    "vendor": "nimbus",
    "category": "software",
    "amount": 500,
    "currency": "USD",
    "action_time": "2026-03-10T12:00:00Z",
}


def issue(t="2026-03-01T00:00:00Z", issuer="chief_financial_officer", **fields):
    return {
        "ref": "EV-1",
        "event_type": "issue",
        "issuer": issuer,
        "block_ref": "B1",
        "effective_at": t,
        "authorization_ref": "AUTH-1",
        "source_turn_refs": ["T1"],
        "record": dict(RECORD, **fields),
    }


def patch(t, issuer="chief_financial_officer", **fields):
    return {
        "ref": "EV-2",
        "event_type": "patch",
        "issuer": issuer,
        "block_ref": "B1",
        "effective_at": t,
        "authorization_ref": "AUTH-1",
        "source_turn_refs": ["T2"],
        "patch": fields,
    }


def revoke(t, issuer="chief_financial_officer"):
    return {
        "ref": "EV-3",
        "event_type": "revoke",
        "issuer": issuer,
        "block_ref": "B1",
        "effective_at": t,
        "authorization_ref": "AUTH-1",
        "source_turn_refs": ["T3"],
    }


def req(**fields):
    return dict(REQ, **fields)


def test_each_dimension_of_a_request():
    ev = [issue()]
    assert decide(ev, ISSUERS, REQ) == EXECUTE
    assert decide(ev, ISSUERS, req(amount=1000)) == EXECUTE  # max is inclusive
    assert decide(ev, ISSUERS, req(amount=1000.01)) == DECLINE
    assert decide(ev, ISSUERS, req(category="hardware")) == DECLINE
    assert decide(ev, ISSUERS, req(vendor="orbital")) == DECLINE
    assert decide(ev, ISSUERS, req(grantee="raj")) == DECLINE
    assert decide(ev, ISSUERS, req(action="prepay")) == DECLINE
    assert decide(ev, ISSUERS, req(currency="EUR")) == DECLINE
    assert decide(ev, ISSUERS, req(action_time="2026-03-01T00:00:00Z")) == EXECUTE  # valid_from inclusive
    assert decide(ev, ISSUERS, req(action_time="2026-04-01T00:00:00Z")) == DECLINE  # valid_until exclusive
    assert decide(ev, ISSUERS, req(action_time="2026-03-31T23:59:59+00:00")) == EXECUTE
    assert decide(ev, ISSUERS, req(action_time="2026-02-28T23:00:00Z")) == DECLINE


def test_issue_patch_revoke_in_time_order():
    ev = [issue(), patch("2026-03-15T00:00:00Z", max_amount=300), revoke("2026-03-25T00:00:00Z")]
    assert decide(ev, ISSUERS, req(action_time="2026-03-10T00:00:00Z")) == EXECUTE  # before the patch
    assert decide(ev, ISSUERS, req(action_time="2026-03-16T00:00:00Z")) == DECLINE  # 500 > 300 now
    assert decide(ev, ISSUERS, req(amount=300, action_time="2026-03-16T00:00:00Z")) == EXECUTE
    assert decide(ev, ISSUERS, req(amount=300, action_time="2026-03-25T00:00:00Z")) == DECLINE  # revoked
    # events are applied by effective time, not list order
    assert decide(list(reversed(ev)), ISSUERS, req(amount=300, action_time="2026-03-16T00:00:00Z")) == EXECUTE


def test_an_issue_in_the_future_does_not_authorize_now():
    assert decide([issue(t="2026-03-20T00:00:00Z")], ISSUERS, REQ) == DECLINE


def test_events_by_non_issuers_are_ignored():
    assert decide([issue(issuer="finance_director")], ISSUERS, REQ) == DECLINE
    ev = [issue(), patch("2026-03-02T00:00:00Z", issuer="finance_director", max_amount=10**6)]
    assert decide(ev, ISSUERS, req(amount=5000)) == DECLINE
    assert decide([issue(), revoke("2026-03-02T00:00:00Z", issuer="intern")], ISSUERS, REQ) == EXECUTE


def test_patch_after_revoke_does_not_revive():
    ev = [issue(), revoke("2026-03-02T00:00:00Z"), patch("2026-03-03T00:00:00Z", status="active")]
    assert decide(ev, ISSUERS, REQ) == DECLINE


def test_deny_record_wins_and_case_form_works():
    deny = issue(effect="deny")
    deny["authorization_ref"] = deny["record"]["authorization_ref"] = "DENY-1"
    assert decide([issue(), deny], ISSUERS, REQ) == DECLINE
    case = {"events": [issue()], "authorized_issuers": ISSUERS}
    assert decide(case, None, REQ) == EXECUTE
    with pytest.raises(ValueError):
        decide([issue()], None, REQ)


def test_memory_decide_and_gold_memory():
    case = {
        "authorized_issuers": ISSUERS,
        "blocks": [{"ref": "B1", "title": "t", "ended_at": "2026-03-20T00:00:00Z", "turns": []}],
        "events": [issue(), patch("2026-03-15T00:00:00Z", max_amount=300, allowed_categories=["software"])],
    }
    gold = gold_memory_from_events(case)
    assert len(gold) == 1
    assert gold[0]["max_amount"] == 300 and gold[0]["allowed_categories"] == ["software"]
    assert gold[0]["source_turn_refs"] == ["T1", "T2"]
    assert memory_decide(gold, req(amount=300, action_time="2026-03-21T00:00:00Z")) == EXECUTE
    assert memory_decide(gold, req(amount=301, action_time="2026-03-21T00:00:00Z")) == DECLINE
    assert memory_decide([], REQ) == DECLINE
    assert memory_decide([dict(RECORD, status="revoked")], REQ) == DECLINE
    assert memory_decide([{"junk": True}], REQ) == DECLINE  # unscorable records never authorize
    case["events"].append(revoke("2026-03-16T00:00:00Z"))
    assert gold_memory_from_events(case) == []


@pytest.fixture(scope="module")
def cases():
    return list(iter_policy_cases(SynthConfig(policy_cases=120, seed=4)))


def test_generated_cases_validate_against_record_and_schema(cases):
    validator = jsonschema.Draft202012Validator(load_schema())
    for c in cases:
        validate_policy_case(c)
        errors = list(validator.iter_errors(c))
        assert not errors, errors[0].message


def test_every_probe_matches_the_oracle_and_gold_memory(cases):
    dims = Counter()
    for c in cases:
        assert probe_problems(c) == []
        assert gold_memory_from_events(c) == c["gold_memory"]
        for p in c["probe_pairs"]:
            dims[p["dimension"]] += 1
            assert decide(c, None, p["in_scope"]) == EXECUTE
            assert decide(c["events"], c["authorized_issuers"], p["out_of_scope"]) == DECLINE
            assert memory_decide(c["gold_memory"], p["in_scope"]) == EXECUTE
            assert memory_decide(c["gold_memory"], p["out_of_scope"]) == DECLINE
            diff = [k for k in p["in_scope"] if p["in_scope"][k] != p["out_of_scope"][k]]
            assert diff == [{"time": "action_time"}.get(p["dimension"], p["dimension"])]
    assert set(dims) == {"amount", "time", "category", "vendor", "grantee", "action"}


def test_cases_have_noisy_histories_and_changes(cases):
    families = Counter(c["family"] for c in cases)
    assert len(families) >= 4
    for c in cases:
        kinds = [e["event_type"] for e in c["events"]]
        assert "issue" in kinds and ("patch" in kinds or "revoke" in kinds)
        speakers = {t["speaker"] for b in c["blocks"] for t in b["turns"]}
        assert len(speakers) >= 3
        n_turns = sum(len(b["turns"]) for b in c["blocks"])
        assert n_turns >= 3 * len(c["events"])
        for e in c["events"]:
            assert e["issuer"] in c["authorized_issuers"]
        for b in c["blocks"]:
            for t in b["turns"]:
                assert t["occurred_at"].endswith("Z") and len(t["occurred_at"]) == 20
    # noise kinds exist somewhere in the corpus
    text = json.dumps([c["blocks"] for c in cases])
    assert "consider it approved" in text or "has my OK" in text  # scope claims by non-issuers
    assert "Reminder from the earlier thread" in text  # stale restatements
    assert "TODAY" in text or "Urgent" in text  # urgency pressure


def test_teacher_memory_errors_are_calibrated_and_recorded():
    rates = dict.fromkeys(MEMORY_ERRORS, 0.2)
    cfg = SynthConfig(policy_cases=500, seed=8, memory_error_rates=rates)
    seen = Counter()
    changed = 0
    cases = list(iter_policy_cases(cfg))
    for c in cases:
        errs = c["teacher"]["memory_errors"]
        for kind in {e["type"] for e in errs}:
            seen[kind] += 1
        assert c["provenance"]["memory_errors"] == sorted({e["type"] for e in errs})
        if not errs:
            assert c["teacher"]["memory"] == c["gold_memory"]
        else:
            assert c["teacher"]["memory"] != c["gold_memory"]
            probes = [p[s] for p in c["probe_pairs"] for s in ("in_scope", "out_of_scope")]
            changed += any(memory_decide(c["teacher"]["memory"], r) != decide(c, None, r) for r in probes)
    n = len(cases)
    for kind in MEMORY_ERRORS:
        assert abs(seen[kind] / n - 0.2) < 0.06, (kind, seen[kind] / n)
    assert changed > 0.3 * sum(bool(c["teacher"]["memory_errors"]) for c in cases)
    default = list(iter_policy_cases(SynthConfig(policy_cases=200, seed=8)))
    share = sum(bool(c["teacher"]["memory_errors"]) for c in default) / len(default)
    assert 0.12 < share < 0.35


def test_policy_case_validation_errors_name_the_field(cases):
    c = cases[0]
    for mutate, field in (
        (lambda d: d.pop("probe_pairs"), "$.probe_pairs"),
        (lambda d: d.update(extra=1), "$.extra"),
        (lambda d: d["events"][0].update(event_type="grant"), "$.events[0].event_type"),
        (lambda d: d["events"][0]["record"].update(max_amount="lots"), "$.events[0].record.max_amount"),
        (lambda d: d["events"][0].update(block_ref="B99"), "$.events[0].block_ref"),
        (lambda d: d["probe_pairs"][0].update(dimension="colour"), "$.probe_pairs[0].dimension"),
        (
            lambda d: d["probe_pairs"][0]["in_scope"].update(action_time="soon"),
            "$.probe_pairs[0].in_scope.action_time",
        ),
        (lambda d: d["blocks"][0]["turns"][0].pop("speaker"), "$.blocks[0].turns[0].speaker"),
    ):
        d = copy.deepcopy(c)
        mutate(d)
        with pytest.raises(RecordError) as exc:
            validate_policy_case(d)
        assert exc.value.field == field, (field, exc.value)


def test_policy_case_file_loader_reports_file_line_field(tmp_path, cases):
    good = json.dumps(cases[0])
    bad = copy.deepcopy(cases[1])
    bad["authorized_issuers"] = []
    path = tmp_path / "cases.jsonl"
    path.write_text(good + "\n" + json.dumps(bad) + "\n{not json\n")
    out = list(iter_policy_case_file(path))
    assert out[0][0] == 1 and isinstance(out[0][1], dict)
    assert (
        isinstance(out[1][1], LineError)
        and str(out[1][1]) == f"{path}:2: $.authorized_issuers: must not be empty"
    )
    assert isinstance(out[2][1], LineError) and out[2][1].line == 3


def replace(t, new_ref="AUTH-2", issuer="chief_financial_officer", **fields):
    return {
        "ref": "EV-4",
        "event_type": "replace",
        "issuer": issuer,
        "block_ref": "B1",
        "effective_at": t,
        "authorization_ref": "AUTH-1",
        "source_turn_refs": ["T4"],
        "record": dict(
            RECORD, authorization_ref=new_ref, supersedes_ref="AUTH-1", source_turn_refs=["T4"], **fields
        ),
    }


def test_replace_supersedes_the_named_record():
    ev = [issue(), replace("2026-03-15T00:00:00Z", vendor="orbital", max_amount=400)]
    assert decide(ev, ISSUERS, req(action_time="2026-03-10T00:00:00Z")) == EXECUTE  # before: the old one
    assert decide(ev, ISSUERS, req(action_time="2026-03-16T00:00:00Z")) == DECLINE  # nimbus is superseded
    assert (
        decide(ev, ISSUERS, req(vendor="orbital", amount=400, action_time="2026-03-16T00:00:00Z")) == EXECUTE
    )
    assert (
        decide(ev, ISSUERS, req(vendor="orbital", amount=401, action_time="2026-03-16T00:00:00Z")) == DECLINE
    )
    # a patch of the superseded record changes nothing; a replacement by a non-issuer is ignored
    late = [*ev, patch("2026-03-17T00:00:00Z", status="active")]
    assert decide(late, ISSUERS, req(action_time="2026-03-18T00:00:00Z")) == DECLINE
    ignored = [issue(), replace("2026-03-15T00:00:00Z", issuer="intern", vendor="orbital")]
    assert decide(ignored, ISSUERS, req(action_time="2026-03-16T00:00:00Z")) == EXECUTE
    assert decide(ignored, ISSUERS, req(vendor="orbital", action_time="2026-03-16T00:00:00Z")) == DECLINE
    case = {
        "authorized_issuers": ISSUERS,
        "blocks": [{"ref": "B1", "title": "t", "ended_at": "2026-03-20T00:00:00Z", "turns": []}],
        "events": ev,
    }
    (gold,) = gold_memory_from_events(case)
    assert (
        gold["authorization_ref"] == "AUTH-2" and gold["vendor"] == "orbital" and "supersedes_ref" not in gold
    )
    state = records_at(ev, set(ISSUERS), parse_time("2026-03-20T00:00:00Z"))
    assert state["AUTH-1"]["status"] == "superseded" and state["AUTH-2"]["supersedes_ref"] == "AUTH-1"
    # an event's record may name what it replaces; a memory record may not (the memory vocabulary)
    validate_record(ev[1]["record"], "$.r", event=True)
    with pytest.raises(RecordError) as exc:
        validate_record(ev[1]["record"], "$.r")
    assert exc.value.field == "$.r.supersedes_ref"


def test_permit_exception_permits_and_memory_decide_checks_issuers():
    ev = [issue(effect="permit_exception")]
    assert decide(ev, ISSUERS, REQ) == EXECUTE
    rec = dict(RECORD, effect="permit_exception")
    assert memory_decide([rec], REQ, ISSUERS) == EXECUTE
    forged = dict(RECORD, issuer="finance_director")
    assert memory_decide([forged], REQ) == EXECUTE  # issuers unchecked
    assert memory_decide([forged], REQ, ISSUERS) == DECLINE
    assert memory_decide([forged], REQ, {"authorized_issuers": ISSUERS}) == DECLINE
    # a deny from a non-issuer is not a deny either
    deny = dict(RECORD, authorization_ref="D", effect="deny", issuer="finance_director")
    assert memory_decide([RECORD, deny], REQ, ISSUERS) == EXECUTE
    assert memory_decide([RECORD, dict(deny, issuer="chief_financial_officer")], REQ, ISSUERS) == DECLINE


def test_replace_event_validation_and_lifecycle(cases):
    from data_prep.policy_case import lifecycle_problems

    c = copy.deepcopy(cases[0])
    first = next(e for e in c["events"] if e["event_type"] == "issue")
    block, turn = first["block_ref"], first["source_turn_refs"][0]
    rep = {
        "ref": "EV-R",
        "event_type": "replace",
        "issuer": first["issuer"],
        "block_ref": block,
        "effective_at": c["events"][-1]["effective_at"],
        "authorization_ref": first["authorization_ref"],
        "source_turn_refs": [turn],
        "record": dict(first["record"], authorization_ref="NEW-1", supersedes_ref=first["authorization_ref"]),
    }
    ok = copy.deepcopy(c)
    ok["events"].append(rep)
    validate_policy_case(ok)
    for mutate, field in (
        (lambda e: e.pop("record"), "record"),
        (lambda e: e["record"].update(authorization_ref=e["authorization_ref"]), "record.authorization_ref"),
        (lambda e: e["record"].update(supersedes_ref="OTHER"), "record.supersedes_ref"),
        (lambda e: e["record"].update(status="pending"), "record.status"),
        (lambda e: e.update(patch={"max_amount": 1}), "patch"),
    ):
        d = copy.deepcopy(ok)
        mutate(d["events"][-1])
        with pytest.raises(RecordError) as exc:
            validate_policy_case(d)
        assert exc.value.field == f"$.events[{len(d['events']) - 1}].{field}", exc.value
    bad = copy.deepcopy(c)
    bad["events"][0]["record"]["supersedes_ref"] = "X"
    with pytest.raises(RecordError) as exc:
        validate_policy_case(bad)
    assert exc.value.field == "$.events[0].record.supersedes_ref"
    # the synthetic cases all make sound lifecycles; a second replacement of the same record does not
    assert all(lifecycle_problems(x) == [] for x in cases)
    twice = copy.deepcopy(ok)
    twice["events"].append(
        dict(copy.deepcopy(rep), ref="EV-R2", record=dict(rep["record"], authorization_ref="NEW-2"))
    )
    assert lifecycle_problems(twice) == [
        f"events[{len(twice['events']) - 1}].authorization_ref: replace of {first['authorization_ref']!r}, "
        "which is already superseded"
    ]
