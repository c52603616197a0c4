"""EAL-Bench's published case files as they are: fixtures in that format, the oracle against its rules.

The format's source is the public repository ``tommasocerruti/eal-bench``:
``domains/procurement/corpus/benchmark_v1/*.yaml``, ``calibration_v1/*.yaml`` and ``generated_v1/*.yaml``
(authoring YAML), ``domains/procurement/compile_corpus.py`` (how a missing ``occurred_at`` is derived),
``domains/procurement/cases.py`` (event replay: ``replace`` supersedes) and
``domains/procurement/semantics.py`` (when a record authorizes a transaction). That repository declares no
license, so the fixtures under ``fixtures/eal-bench/`` are our own text in its layout, and the reference
evaluator below is written here from the rules, not taken from there.
"""

import copy
import itertools
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jsonschema
import pytest

from data_prep.importer import main as importer_main
from data_prep.importers.common import Rejected
from data_prep.importers.eal_case import iter_items
from data_prep.oracle import (
    DECLINE,
    EXECUTE,
    RECORD_FIELDS,
    decide,
    gold_memory_from_events,
    memory_decide,
    records_at,
)
from data_prep.policy_case import iter_policy_case_file, load_schema, validate_policy_case
from data_prep.synthetic import SynthConfig, iter_policy_cases

FIX = Path(__file__).parent / "fixtures" / "eal-bench"
FILES = sorted(FIX.glob("*.yaml"))


@pytest.fixture(scope="module")
def cases():
    items = list(iter_items(FILES))
    bad = [str(i) for i in items if isinstance(i, Rejected)]
    assert not bad, bad
    return {Path(i.source).stem: i.record for i in items}


def t(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


# --- a reference evaluator, written from EAL-Bench's rules ------------------------------------------
# The final ledger: events replayed in effective-time order (issue adds a record; patch changes its fields;
# revoke sets it revoked; replace sets the named record superseded and adds the replacement). A request is
# authorized when some record in that ledger has no reason for denial: its issuer is an authorized one,
# its effect permits, it is active, grantee/action/vendor/currency equal the request's, the category is
# allowed, the amount is at most the maximum, and valid_from <= action_time < valid_until.


def reference_ledger(case: dict) -> dict[str, dict]:
    ledger: dict[str, dict] = {}
    for ev in sorted(case["events"], key=lambda e: t(e["effective_at"])):
        kind, ref = ev["event_type"], ev["authorization_ref"]
        if kind == "issue":
            ledger[ref] = dict(ev["record"])
        elif kind == "patch":
            ledger[ref] = {**ledger[ref], **ev["patch"]}
        elif kind == "revoke":
            ledger[ref] = {**ledger[ref], "status": "revoked"}
        elif kind == "replace":
            ledger[ref] = {**ledger[ref], "status": "superseded"}
            ledger[ev["record"]["authorization_ref"]] = dict(ev["record"])
    return ledger


def reference_authorized(case: dict, request: dict) -> bool:
    def denial(r: dict) -> str | None:
        if r["issuer"] not in case["authorized_issuers"]:
            return "issuer"
        if r["effect"] not in ("permit_exception", "allow"):
            return "effect"
        if r["status"] != "active":
            return "status"
        for f in ("grantee", "action", "vendor", "currency"):
            if r[f] != request[f]:
                return f
        if request["category"] not in r["allowed_categories"]:
            return "category"
        if request["amount"] > r["max_amount"]:
            return "amount"
        if not t(r["valid_from"]) <= t(request["action_time"]) < t(r["valid_until"]):
            return "time"
        return None

    return any(denial(r) is None for r in reference_ledger(case).values())


def requests_around(case: dict) -> list[dict]:
    """Every probe, and variations of each in-scope probe on every dimension (all after the history)."""
    out = []
    records = list(reference_ledger(case).values())
    vendors = sorted({r["vendor"] for r in records} | {"ElsewhereInc"})
    categories = sorted({c for r in records for c in r["allowed_categories"]} | {"furniture"})
    bounds = sorted({b for r in records for b in (r["valid_from"], r["valid_until"])})
    last = max(t(e["effective_at"]) for e in case["events"])
    times = sorted({x for b in bounds for x in (t(b) - timedelta(seconds=1), t(b)) if x > last})
    for p in case["probe_pairs"]:
        out += [p["in_scope"], p["out_of_scope"]]
        base = p["in_scope"]
        amounts = sorted({a for r in records for a in (r["max_amount"], r["max_amount"] + 1)})
        for vendor, category, amount in itertools.product(vendors, categories, amounts):
            out.append(dict(base, vendor=vendor, category=category, amount=amount))
        for at in times:
            out.append(dict(base, action_time=at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")))
        out.append(dict(base, grantee="someone_else"))
        out.append(dict(base, currency="EUR"))
    return out


# --- the tests --------------------------------------------------------------------------------------


def test_published_shapes_import_with_their_metadata(cases):
    assert sorted(cases) == ["benchmark-revoke-replace", "calibration-narrowing", "generated-revoke-replace"]
    schema = jsonschema.Draft202012Validator(load_schema())
    for c in cases.values():
        validate_policy_case(c)
        assert not list(schema.iter_errors(c))
        eal, analysis = c["metadata"]["eal"], c["metadata"]["analysis"]
        assert set(eal) == {"schema_version", "source_id_namespace", "tags"}
        assert c["family"] == analysis["case_family_id"]
        assert c["provenance"]["kept_fields"] == sorted([*eal, "benchmark"])
        # EAL's permitting effect is the project's "allow"; nothing else is renamed
        assert {e["record"]["effect"] for e in c["events"] if "record" in e} == {"allow"}
    b = cases["benchmark-revoke-replace"]
    assert b["metadata"]["analysis"]["memory_hazards"] == [
        "stale_state",
        "supersession_loss",
        "authority_confusion",
    ]
    assert b["metadata"]["eal"]["tags"][:2] == ["revocation", "replacement"]
    assert b["provenance"]["effects_mapped"] == {"map": {"permit_exception": "allow"}, "count": 2}
    assert "derived_occurred_at" not in b["provenance"]  # every turn had its time


def test_missing_turn_times_are_derived_as_eal_derives_them(cases):
    def times(c):
        return [(tr["ref"], tr["occurred_at"][5:16]) for blk in c["blocks"] for tr in blk["turns"]]

    # calibration: block_00 has no event (ends at ended_at, 5 min apart); turn_006 and turn_010 take their
    # events' effective_at; turn_012 keeps its own time; block_03 ends at its ended_at again
    assert times(cases["calibration-narrowing"]) == [
        ("turn_001", "05-04T17:50"),
        ("turn_002", "05-04T17:55"),
        ("turn_003", "05-04T18:00"),
        ("turn_004", "05-06T11:50"),
        ("turn_005", "05-06T11:55"),
        ("turn_006", "05-06T12:00"),
        ("turn_007", "05-06T12:05"),
        ("turn_008", "05-06T12:10"),
        ("turn_009", "05-12T09:25"),
        ("turn_010", "05-12T09:30"),
        ("turn_011", "05-12T09:35"),
        ("turn_012", "05-12T17:00"),
        ("turn_013", "05-15T17:55"),
        ("turn_014", "05-15T18:00"),
    ]
    assert cases["calibration-narrowing"]["provenance"]["derived_occurred_at"] == 13
    # generated: refs out of order; the time follows the position, not the ref
    gen = dict(times(cases["generated-revoke-replace"]))
    assert gen["turn_007"] == "03-21T17:50" and gen["turn_001"] == "03-21T18:00"
    assert gen["turn_005"] == "04-10T12:00" and gen["turn_011"] == "04-10T11:55"
    assert cases["generated-revoke-replace"]["provenance"]["derived_occurred_at"] == 12


def test_replace_supersedes_and_the_replacement_is_the_gold_memory(cases):
    b = cases["benchmark-revoke-replace"]
    end = t("2026-08-27T18:00:00Z")
    state = records_at(b["events"], set(b["authorized_issuers"]), end)
    assert {k: v["status"] for k, v in state.items()} == {"auth_first": "superseded", "auth_second": "active"}
    assert state["auth_first"]["source_turn_refs"] == ["turn_003", "turn_009"]
    (gold,) = b["gold_memory"]
    assert (
        gold["authorization_ref"] == "auth_second" and state["auth_second"]["supersedes_ref"] == "auth_first"
    )
    assert list(gold) == list(RECORD_FIELDS)  # memory keeps the memory vocabulary: no supersedes_ref
    assert gold["vendor"] == "QuartzLab" and gold["max_amount"] == 6000 and gold["effect"] == "allow"
    old_vendor = dict(b["probe_pairs"][0]["in_scope"], vendor="VialWorks")
    assert decide(b, None, old_vendor) == DECLINE  # the superseded exception no longer authorizes
    between = dict(old_vendor, action_time="2026-08-15T12:00:00Z")
    assert decide(b, None, between) == EXECUTE  # ... it did before the revocation
    # a replacement also works without a revocation first, and one record never in memory stays out
    direct = copy.deepcopy(b)
    direct["events"] = [e for e in direct["events"] if e["event_type"] != "revoke"]
    assert gold_memory_from_events(direct) == b["gold_memory"]
    assert decide(direct, None, old_vendor) == DECLINE


def test_oracle_agrees_with_labels_and_eal_rules_on_every_probe(cases):
    probes = agree = variations = 0
    for c in [*cases.values(), *_older_fixtures()]:
        for p in c["probe_pairs"]:
            for side, want in (("in_scope", EXECUTE), ("out_of_scope", DECLINE)):
                probes += 1
                got = decide(c, None, p[side])
                assert got == want, (c["case_id"], p["ref"], side)
                assert reference_authorized(c, p[side]) == (want == EXECUTE)
                assert memory_decide(c["gold_memory"], p[side], c) == want
                agree += 1
        for r in requests_around(c):
            variations += 1
            assert (decide(c, None, r) == EXECUTE) == reference_authorized(c, r), (c["case_id"], r)
    assert (
        probes == agree == 3 * 3 * 2 + 9 * 2
    )  # three EAL-Bench-shape cases of 3 pairs; older fixtures 9 pairs
    assert variations > 500


def _older_fixtures():
    older = [
        Path(__file__).parent / "fixtures" / n for n in ("eal-procurement-0001.yaml", "eal-travel-0002.yaml")
    ]
    return [i.record for i in iter_items(older)]


def test_memory_decide_refuses_records_from_non_issuers(cases):
    """EAL's authority_confusion hazard: the lab director's claim, remembered as if it were a record."""
    b = cases["benchmark-revoke-replace"]
    claim = dict(
        b["gold_memory"][0],
        authorization_ref="director_reagents",
        issuer="lab_director",
        vendor="VialWorks",
        allowed_categories=["reagents"],
        max_amount=12000,
        valid_from="2026-08-12T10:00:00Z",
        valid_until="2026-12-31T00:00:00Z",
    )
    req = dict(b["probe_pairs"][0]["in_scope"], vendor="VialWorks", category="reagents", amount=10000)
    memory = [*b["gold_memory"], claim]
    assert decide(b, None, req) == DECLINE
    assert memory_decide(memory, req) == EXECUTE  # issuers unchecked: the memory is trusted whole
    assert memory_decide(memory, req, b) == DECLINE  # the case form
    assert memory_decide(memory, req, b["authorized_issuers"]) == DECLINE  # the list form
    assert memory_decide([dict(claim, issuer="chief_financial_officer")], req, b) == EXECUTE
    assert memory_decide([{k: v for k, v in claim.items() if k != "issuer"}], req, b) == DECLINE


def test_issuer_check_leaves_gold_and_teacher_results_unchanged():
    synth = list(iter_policy_cases(SynthConfig(policy_cases=150, seed=11)))
    n = 0
    for c in synth:
        for memory in (c["gold_memory"], c["teacher"]["memory"]):
            for p in c["probe_pairs"]:
                for side in ("in_scope", "out_of_scope"):
                    n += 1
                    assert memory_decide(memory, p[side], c) == memory_decide(memory, p[side])
    assert n == sum(4 * len(c["probe_pairs"]) for c in synth) > 0


# --- bad EAL-Bench-shape files: file, line, field ---------------------------------------------------


def _line(text: str, marker: str) -> int:
    return text[: text.index(marker)].count("\n") + 1


def _reject(tmp_path, name: str, text: str) -> Rejected:
    p = tmp_path / name
    p.write_text(text)
    (item,) = list(iter_items([p]))
    assert isinstance(item, Rejected), f"{name} was accepted"
    return item


def test_bad_published_shape_files_name_line_and_field(tmp_path):
    bench = (FIX / "benchmark-revoke-replace.yaml").read_text()
    cal = (FIX / "calibration-narrowing.yaml").read_text()

    wrong = bench.replace("    supersedes_ref: auth_first", "    supersedes_ref: auth_zero")
    r = _reject(tmp_path, "supersedes.yaml", wrong)
    assert (r.line, r.field) == (
        _line(wrong, "supersedes_ref: auth_zero"),
        "$.events[2].record.supersedes_ref",
    )
    assert "must name the replaced record 'auth_first'" in r.problem

    same = bench.replace("    authorization_ref: auth_second\n", "    authorization_ref: auth_first\n")
    r = _reject(tmp_path, "same-ref.yaml", same)
    assert r.field == "$.events[2].record.authorization_ref" and "its own authorization_ref" in r.problem

    orphan = re.sub(
        r"(- ref: event_revoke\n(?:  .*\n)*?  authorization_ref: )auth_first", r"\1auth_ghost", bench
    )
    r = _reject(tmp_path, "orphan.yaml", orphan)
    assert (r.line, r.field) == (_line(orphan, "auth_ghost"), "$.events[1].authorization_ref")
    assert "no earlier event issued" in r.problem

    again = bench.replace(
        "probe_pairs:\n",
        "- ref: event_revoke_again\n  event_type: revoke\n  issuer: chief_financial_officer\n"
        "  block_ref: block_03\n  effective_at: '2026-08-20T15:00:00Z'\n  authorization_ref: auth_first\n"
        "  source_turn_refs:\n  - turn_008\nprobe_pairs:\n",
    )
    r = _reject(tmp_path, "revoke-twice.yaml", again)
    assert r.field == "$.events[3].authorization_ref" and "already revoked" in r.problem

    effect = bench.replace("    effect: permit_exception\n", "    effect: permit_everything\n", 1)
    r = _reject(tmp_path, "effect.yaml", effect)
    assert (r.line, r.field) == (_line(effect, "permit_everything"), "$.events[0].record.effect")
    assert "must be allow|permit_exception|permit_incident_response|deny" in r.problem

    scope = bench.replace("    vendor: VialWorks\n", "    scope: {tenant: acme}\n", 1)
    r = _reject(tmp_path, "scope.yaml", scope)  # a cybersecurity scope on a procurement record
    assert (r.line, r.field) == (_line(scope, "scope: {tenant"), "$.events[0].record.scope")
    assert "not both" in r.problem

    bench_type = bench.replace(
        "benchmark:\n  split: benchmark\n", "benchmark: long\nold_benchmark:\n  split: benchmark\n"
    )
    r = _reject(tmp_path, "benchmark-type.yaml", bench_type)
    assert (r.line, r.field, r.problem) == (4, "$.benchmark", "expected a mapping")

    # block_02: turn_009 pinned at 09:28, turn_010 takes the patch's 09:30: no room for a turn between
    crowded = cal.replace(
        "  - ref: turn_009\n", "  - ref: turn_009\n    occurred_at: '2026-05-12T09:28:00Z'\n"
    ).replace(
        "  - ref: turn_010\n",
        "  - ref: turn_010b\n    actor_id: facilities\n    speaker: Facilities\n    content: ok\n  - ref: turn_010\n",
    )
    r = _reject(tmp_path, "crowded.yaml", crowded)
    assert (r.line, r.field) == (_line(crowded, "  - ref: turn_010b"), "$.blocks[2].turns[1].occurred_at")
    assert "no room to derive occurred_at for the 1 turn(s) between 'turn_009' and 'turn_010'" in r.problem

    # block_02 ends at 09:32: turn_011, five minutes after the patch's turn, would fall after it
    late = cal.replace("  ended_at: '2026-05-12T18:00:00Z'", "  ended_at: '2026-05-12T09:32:00Z'").replace(
        "    occurred_at: '2026-05-12T17:00:00Z'\n", ""
    )
    r = _reject(tmp_path, "late.yaml", late)
    assert (r.line, r.field) == (_line(late, "  - ref: turn_011"), "$.blocks[2].turns[2].occurred_at")
    assert "derived time 2026-05-12T09:35:00Z is after the block's ended_at" in r.problem

    # turn_006 (no time of its own) cited by the issue at 05-06 12:00 and by the patch at 05-12 09:30
    marker = "  source_turn_refs:\n  - turn_010\n"
    cited = cal.replace(marker, marker + "  - turn_006\n")
    r = _reject(tmp_path, "cited-twice.yaml", cited)
    assert (r.line, r.field) == (_line(cited, marker), "$.events[1].source_turn_refs")
    assert "'turn_006' has no occurred_at and is cited by events at different times" in r.problem


def test_cli_on_published_shapes(tmp_path, capsys):
    out = tmp_path / "out"
    assert importer_main(["--format", "eal-case", str(FIX), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "3 records read from 3 files, 3 accepted (0 runs, 3 policy cases), 0 rejected" in printed
    assert "files with rejected" not in printed
    cases = [c for _, c in iter_policy_case_file(out / "policy_cases" / "cases-00000.jsonl")]
    assert sorted(c["case_id"] for c in cases) == sorted(
        [
            "calibration_v1_cleaning_narrowing",
            "procurement_v1_glassware_revoke_replace",
            "procurement_v1_gen_rr_g1_s0_print_00",
        ]
    )
    # the same files imported twice give the same bytes
    again = tmp_path / "again"
    assert importer_main(["--format", "eal-case", str(FIX), "--out", str(again), "--quiet"]) == 0
    for rel in ("policy_cases/cases-00000.jsonl", "manifest.json"):
        assert (out / rel).read_bytes() == (again / rel).read_bytes()


@pytest.mark.skipif(not os.environ.get("EAL_BENCH_DIR"), reason="set EAL_BENCH_DIR to an EAL-Bench checkout")
def test_an_eal_bench_checkout_imports_and_agrees(capsys):
    """Every procurement case of a local EAL-Bench checkout imports as it is, and the oracle, the gold
    memory and the reference evaluator give each probe its label (EAL_BENCH_DIR=path/to/eal-bench)."""
    root = Path(os.environ["EAL_BENCH_DIR"]) / "domains" / "procurement" / "corpus"
    files = sorted(root.glob("*/*.yaml"))
    assert files, f"no case files under {root}"
    items = list(iter_items(files))
    rejected = [str(i) for i in items if isinstance(i, Rejected)]
    cases = [i.record for i in items if not isinstance(i, Rejected)]
    probes = agree = variations = 0
    for c in cases:
        for p in c["probe_pairs"]:
            for side, want in (("in_scope", EXECUTE), ("out_of_scope", DECLINE)):
                probes += 1
                agree += (
                    decide(c, None, p[side]) == want
                    and reference_authorized(c, p[side]) == (want == EXECUTE)
                    and memory_decide(c["gold_memory"], p[side], c) == want
                )
        for r in requests_around(c):
            variations += 1
            assert (decide(c, None, r) == EXECUTE) == reference_authorized(c, r), (c["case_id"], r)
    with capsys.disabled():
        print(
            f"\nEAL-Bench checkout {root}: {len(files)} files, {len(cases)} imported, {len(rejected)} rejected; "
            f"{agree}/{probes} probes agree; {variations} variations agree with the reference evaluator"
        )
    assert not rejected, rejected[:5]
    assert agree == probes
