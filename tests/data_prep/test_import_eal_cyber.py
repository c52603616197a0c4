"""EAL-Bench cybersecurity cases: scope records, ``permit_incident_response``, and the oracle on their probes.

The format's source is the public repository ``tommasocerruti/eal-bench``: ``domains/base.py`` (the
authorization envelope: shared fields plus a domain ``scope``), ``domains/cybersecurity/models.py`` (the
response request: ``actor_id, tenant_id, incident_id, asset_id, environment, response_action,
vulnerability_id, requested_at``; a patch's ``scope`` replaces only the keys it names),
``domains/cybersecurity/semantics.py`` (when a record permits a request) and
``domains/cybersecurity/corpus_v3.py`` (event replay: issue, patch, revoke, replace). The fixtures under
``fixtures/eal-bench-cyber/`` are our own text in that shape (the repository declares no license), and the
reference evaluator below is written here from those rules, not taken from there.
"""

import copy
import json
from datetime import datetime
from pathlib import Path

import jsonschema
import pytest

from data_prep.build import main as build_main
from data_prep.importer import main as importer_main
from data_prep.importers.common import Accepted, Rejected
from data_prep.importers.eal_case import iter_items
from data_prep.oracle import DECLINE, EXECUTE, SCOPE_RECORD_FIELDS, decide, memory_decide
from data_prep.policy_case import iter_policy_case_file, load_schema

FIX = Path(__file__).parent / "fixtures" / "eal-bench-cyber"
FILES = sorted(FIX.glob("*.yaml"))


@pytest.fixture(scope="module")
def cases():
    items = list(iter_items(FILES))
    assert all(isinstance(i, Accepted) for i in items), [str(i) for i in items]
    return {Path(i.source).stem: i.record for i in items}


def t(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


# --- a reference evaluator, written from EAL-Bench's cybersecurity rules ----------------------------
# Replay: issue adds a record, patch changes fields (a scope patch only the scope keys it names), revoke
# marks it revoked, replace marks the named record superseded and adds the new one; only the authorized
# issuers' events count. A request is permitted when some active record has no reason for denial: the
# issuer is authorized, the grantee is the request's actor, the effect permits, the window holds the
# request time (half-open), tenant and incident are equal, and the asset, environment, response action
# and vulnerability are each in the scope's lists.
def reference_permits(case: dict, req: dict) -> bool:
    ledger: dict[str, dict] = {}
    issuers = set(case["authorized_issuers"])
    for ev in sorted(case["events"], key=lambda e: t(e["effective_at"])):
        if ev["issuer"] not in issuers:
            continue
        ref = ev["authorization_ref"]
        if ev["event_type"] == "issue":
            ledger[ref] = copy.deepcopy(ev["record"])
        elif ev["event_type"] == "patch":
            changes = dict(ev["patch"])
            scope = {**ledger[ref]["scope"], **changes.pop("scope", {})}
            ledger[ref] = {**ledger[ref], **changes, "scope": scope}
        elif ev["event_type"] == "revoke":
            ledger[ref]["status"] = "revoked"
        elif ev["event_type"] == "replace":
            ledger[ref]["status"] = "superseded"
            ledger[ev["record"]["authorization_ref"]] = copy.deepcopy(ev["record"])

    def denial(r: dict) -> str | None:
        s = r["scope"]
        checks = [
            (r["status"] == "active", "inactive"),
            (r["issuer"] in issuers, "issuer"),
            (r["grantee"] == req["grantee"], "actor"),
            (r["effect"] in ("allow", "permit_incident_response"), "effect"),
            (t(r["valid_from"]) <= t(req["action_time"]) < t(r["valid_until"]), "time"),
            (s["tenant_id"] == req["tenant_id"], "tenant"),
            (s["incident_id"] == req["incident_id"], "incident"),
            (req["asset_id"] in s["asset_ids"], "asset"),
            (req["environment"] in s["environments"], "environment"),
            (req["response_action"] in s["approved_actions"], "response_action"),
            (req["vulnerability_id"] in s["vulnerability_ids"], "vulnerability"),
        ]
        return next((why for ok, why in checks if not ok), None)

    return any(denial(r) is None for r in ledger.values())


def test_cyber_cases_import_with_scope_records(cases):
    swap, auth = cases["cyber-state-swap"], cases["cyber-authority"]
    assert swap["family"] == "cyber_harbor_state_swap"
    assert swap["provenance"]["effects_mapped"] == {"map": {"permit_incident_response": "allow"}, "count": 3}
    assert swap["metadata"]["analysis"]["memory_hazards"] == ["stale_scope", "supersession_loss"]
    # EAL-Bench's request words are read as ours
    req = swap["probe_pairs"][0]["in_scope"]
    assert req["grantee"] == "incident_response_team" and req["action_time"] == "2026-07-01T12:00:00Z"
    assert "actor_id" not in req and "requested_at" not in req
    # the gold memory: what is in force at the end, scope patches merged, the replaced grant gone
    gold = {r["authorization_ref"]: r for r in swap["gold_memory"]}
    assert sorted(gold) == ["HB-B", "HB-D"] and all(tuple(r) == SCOPE_RECORD_FIELDS for r in gold.values())
    assert gold["HB-B"]["scope"]["asset_ids"] == ["web-prod-03"]
    assert gold["HB-B"]["scope"]["approved_actions"] == ["isolate_host"]  # the patch named only asset_ids
    assert gold["HB-D"]["scope"]["approved_actions"] == ["restrict_network"]
    # EAL-Bench's envelope names (authorization_id, source_turn_ids) are read as ours; the non-issuer's
    # "grant" is not in memory, and the patch shortened the window
    (a,) = auth["gold_memory"]
    assert a["authorization_ref"] == "LM-A" and a["source_turn_refs"] == ["u1", "u3"]
    assert a["valid_until"] == "2026-08-01T18:00:00Z"
    schema = jsonschema.Draft202012Validator(load_schema())
    for c in cases.values():
        assert not list(schema.iter_errors(c))


def test_oracle_decides_every_probe_as_labelled(cases):
    n = 0
    for c in cases.values():
        for p in c["probe_pairs"]:
            for side, want in (("in_scope", EXECUTE), ("out_of_scope", DECLINE)):
                req = p[side]
                assert decide(c, None, req) == want, (c["case_id"], p["ref"], side)
                assert reference_permits(c, req) == (want == EXECUTE), (c["case_id"], p["ref"], side)
                assert memory_decide(c["gold_memory"], req, c) == want  # gold memory is calibrated
                n += 1
    assert n == 2 * (5 + 5)


def test_stale_and_non_authoritative_scope_authorizes_nothing(cases):
    swap, auth = cases["cyber-state-swap"], cases["cyber-authority"]
    stale = swap["probe_pairs"][1]["out_of_scope"]  # restart_service: the superseded grant's action
    memory_with_stale = [
        *swap["gold_memory"],
        {**swap["gold_memory"][1], "authorization_ref": "HB-C",
         "scope": {**swap["gold_memory"][1]["scope"], "approved_actions": ["restart_service"]}},
    ]  # fmt: skip
    assert memory_decide(memory_with_stale, stale, swap) == EXECUTE  # a memory that kept HB-C overgrants
    assert decide(swap, None, stale) == DECLINE
    claim = next(e["record"] for e in auth["events"] if e["issuer"] == "service_owner")
    req = auth["probe_pairs"][3]["out_of_scope"]  # mx-prod-09, only in the service owner's "grant"
    assert memory_decide([claim], req) == EXECUTE  # trusted whole
    assert memory_decide([claim], req, auth) == DECLINE  # issuer checked: authority confusion refused


def test_mislabelled_probe_and_bad_scope_name_line_and_field(tmp_path):
    text = (FIX / "cyber-state-swap.yaml").read_text()
    flipped = text.replace(
        "asset_id: web-prod-04, environment: production", "asset_id: web-prod-03, environment: production"
    )
    p = tmp_path / "flipped.yaml"
    p.write_text(flipped)
    (r,) = list(iter_items([p]))
    assert isinstance(r, Rejected) and r.field == "$.probe_pairs[0].out_of_scope"
    assert "oracle says execute_requested for an out-of-scope request" in r.problem
    assert "out_of_scope:" in flipped.splitlines()[r.line - 1]

    no_vulns = text.replace("      vulnerability_ids: [CVE-2026-4411]\n", "", 1)
    p = tmp_path / "no-vulns.yaml"
    p.write_text(no_vulns)
    (r,) = list(iter_items([p]))
    assert isinstance(r, Rejected) and r.field == "$.events[0].record.scope.vulnerability_ids"
    assert r.problem == "missing" and "scope:" in no_vulns.splitlines()[r.line - 1]

    half = text.replace(
        "    asset_id: web-prod-03, environment: production, response_action: isolate_host,\n",
        "    asset_id: web-prod-03, response_action: isolate_host,\n",
        1,
    )
    p = tmp_path / "half.yaml"
    p.write_text(half)
    (r,) = list(iter_items([p]))
    assert isinstance(r, Rejected) and r.field == "$.probe_pairs[0].in_scope.environment"


def test_cli_imports_cyber_cases(tmp_path, capsys):
    out = tmp_path / "corpus"
    assert importer_main(["--format", "eal-case", str(FIX), "--out", str(out), "--quiet"]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["policy_cases"] == 2 == m["counts"]["input_records"] and m["counts"]["rejected"] == 0
    loaded = [c for _, c in iter_policy_case_file(out / "policy_cases" / "cases-00000.jsonl")]
    assert sorted(c["case_id"] for c in loaded) == ["cyber_harbor_state_swap", "cyber_lumen_authority"]
    # and they build: reader-policy examples show the scope request whole, decided as labelled
    assert build_main(["--corpus", str(out), "--out", str(tmp_path / "built"), "--no-progress"]) == 0
    examples = [
        json.loads(line)
        for split in ("train", "validation", "heldout")
        for line in (tmp_path / "built" / "jsonl" / "reader_policy" / f"{split}.jsonl")
        .read_text()
        .splitlines()
    ]
    assert examples
    for ex in examples:
        user, answer = ex["messages"][-2]["content"], json.loads(ex["messages"][-1]["content"])
        request = json.loads(user.split("Request:\n", 1)[1])
        assert set(request) == {"grantee", "tenant_id", "incident_id", "asset_id", "environment",
                                "response_action", "vulnerability_id", "action_time"}  # fmt: skip
        case = next(
            c for c in loaded if any(request in (p["in_scope"], p["out_of_scope"]) for p in c["probe_pairs"])
        )
        assert answer["decision"] == decide(case, None, request)
