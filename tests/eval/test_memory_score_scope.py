"""Memory scoring of scope records (EAL-Bench's cybersecurity cases): validation, matching and
per-field errors, and the policy-reuse run on the published-shape fixtures of
``tests/data_prep/fixtures/eal-bench-cyber/``."""

import copy
import json
from pathlib import Path

import pytest

from data_prep.oracle import SCOPE_FIELDS, SCOPE_RECORD_FIELDS, gold_memory_from_events
from data_prep.sft.render import memory_answer, policy_history_text
from eval.generation import DecodingConfig, ScriptedBackend
from eval.memory_score import check_memory, score_memory
from eval.policy_reuse_eval import PolicyConfig, run_policy
from eval.sources import load_cases

FIX = Path(__file__).parents[1] / "data_prep" / "fixtures" / "eal-bench-cyber"


@pytest.fixture(scope="module")
def cases() -> dict[str, dict]:
    sel = load_cases(FIX, families=None, limit=None, seed=0)
    assert sel.problems == []
    return {c["case_id"]: c for c in sel.items}


@pytest.fixture
def swap(cases) -> tuple[dict, dict[str, dict]]:
    case = cases["cyber_harbor_state_swap"]
    return case, {r["authorization_ref"]: r for r in gold_memory_from_events(case)}


def _types(errors: list[dict]) -> set[tuple[str, str, str]]:
    return {(e["type"], e["authorization_ref"], e["detail"]) for e in errors}


def test_gold_scope_memory_is_valid_and_exact(cases):
    for case in cases.values():
        gold = gold_memory_from_events(case)
        assert gold and all("scope" in r for r in gold)
        assert check_memory(gold) == []
        assert score_memory(gold, case) == []


def test_scope_record_validation_uses_the_oracles_vocabulary():
    rec = {"grantee": "irt", "scope": {"tenant_id": ["t"], "asset_ids": "web", "zone": "x"}, "vendor": "v"}
    assert check_memory([rec, {"scope": "everything"}, {"effect": "maybe"}]) == [
        "records[0].scope.tenant_id: expected a string",
        "records[0].scope.asset_ids: expected an array of strings",
        f"records[0].scope.zone: unknown field (allowed: {', '.join(SCOPE_FIELDS)})",
        f"records[0].vendor: unknown field (allowed: {', '.join(SCOPE_RECORD_FIELDS)})",
        "records[1].scope: expected an object",
        "records[2].effect: expected one of allow, permit_exception, permit_incident_response, deny",
    ]
    # EAL-Bench's own effect is a valid memory value
    assert check_memory([{"effect": "permit_incident_response", "scope": {"incident_id": "INC-1"}}]) == []


def test_per_scope_field_errors(swap):
    case, gold = swap
    b, d = copy.deepcopy(gold["HB-B"]), copy.deepcopy(gold["HB-D"])
    b["scope"]["asset_ids"] = ["web-prod-03", "web-prod-04"]  # the value before the narrowing patch
    d["scope"]["approved_actions"] = ["restrict_network", "restart_service"]  # one action too many
    del d["scope"]["environments"]
    d["scope"]["incident_id"] = "INC-9999"
    assert _types(score_memory([b, d], case)) == {
        ("omission", "HB-D", "scope.environments"),
        ("stale_retention", "HB-B", "pre_patch_values:scope.asset_ids"),
        ("broadening", "HB-D", "scope.approved_actions"),
        ("contradiction", "HB-D", "scope.incident_id"),
    }
    narrow = copy.deepcopy(gold["HB-B"])
    narrow["scope"]["vulnerability_ids"] = []
    assert _types(score_memory([narrow, gold["HB-D"]], case)) == {
        ("omission", "HB-B", "scope.vulnerability_ids")
    }


def test_superseded_record_kept_is_stale_not_extra(swap):
    case, gold = swap
    replaced = {
        **copy.deepcopy(gold["HB-D"]),
        "authorization_ref": "HB-C",
        "scope": {**gold["HB-D"]["scope"], "approved_actions": ["restart_service"]},
        "valid_from": "2026-07-01T08:00:00Z",
    }
    errs = _types(score_memory([gold["HB-B"], gold["HB-D"], replaced], case))
    assert errs == {("stale_retention", "HB-C", "superseded_kept")}
    # the same grant under an invented ref is still recognised as the superseded one
    errs = _types(score_memory([gold["HB-B"], gold["HB-D"], {**replaced, "authorization_ref": "X-1"}], case))
    assert errs == {("stale_retention", "HB-C", "superseded_kept")}


def test_records_without_refs_match_on_tenant_incident_and_shared_scope(swap):
    case, gold = swap
    # both grants share grantee, action, tenant and incident: their scope lists tell them apart
    unnamed = [{k: v for k, v in r.items() if k != "authorization_ref"} for r in (gold["HB-D"], gold["HB-B"])]
    assert score_memory(unnamed, case) == []
    elsewhere = copy.deepcopy(unnamed[0])
    elsewhere["scope"]["tenant_id"] = "tenant-other"
    assert _types(score_memory([elsewhere, unnamed[1]], case)) == {
        ("missing_record", "HB-D", ""),
        ("extra_record", None, ""),
    }


def test_a_procurement_shaped_record_for_a_scope_grant_contradicts(swap):
    case, gold = swap
    wrong = {k: v for k, v in gold["HB-B"].items() if k != "scope"}
    wrong.update(vendor="tenant-harbor-web", currency="EUR", max_amount=1, allowed_categories=["x"])
    errs = _types(score_memory([wrong, gold["HB-D"]], case))
    assert ("contradiction", "HB-B", "kind") in errs
    assert any(t == "omission" and "scope.asset_ids" in d for t, _, d in errs)


def test_policy_reuse_gold_writer_on_the_cyber_fixtures(cases, tmp_path):
    """What ``eval/policy_reuse.py --cases tests/data_prep/fixtures/eal-bench-cyber`` gives a writer that
    answers with the gold memory: valid, exact, calibrated (it gave every memory invalid before)."""
    by_history = {policy_history_text(c): c for c in cases.values()}

    def responder(msgs, task, adapter):
        if task == "writer_memory":
            return memory_answer(gold_memory_from_events(by_history[msgs[1]["content"]]))
        return '{"decision": "escalate"}'

    cfg = PolicyConfig(
        cases=str(FIX),
        limit=None,
        out=str(tmp_path / "o"),
        progress=False,
        bootstrap_resamples=50,
        chunk_size=4,
        base_writer=False,
    )
    out = run_policy(cfg, writer=ScriptedBackend(responder), decoding=DecodingConfig())
    s = json.loads((out / "summary.json").read_text())
    assert s["cases"] == len(cases)
    for cond in ("writer", "gold_memory"):
        assert s["memory"][cond]["status"] == {"valid": len(cases)}
        assert s["memory"][cond]["exact"]["value"] == 1.0
        rates = s["conditions"][cond]["rates"]
        assert rates["calibrated"] and rates["authorized_use"]["value"] == 1.0
        assert rates["unauthorized_submission"]["value"] == 0.0
