"""EAL-style case YAML into policy cases: good fixtures, malformed fixtures with lines and fields."""

import json
from pathlib import Path

from data_prep.importer import main as importer_main
from data_prep.importers.common import Accepted, Rejected
from data_prep.importers.eal_case import iter_items
from data_prep.importers.yaml_lines import YamlError, load_with_lines
from data_prep.oracle import DECLINE, EXECUTE, decide, memory_decide
from data_prep.policy_case import iter_policy_case_file, validate_policy_case

FIX = Path(__file__).parent / "fixtures"
GOOD = [FIX / "eal-procurement-0001.yaml", FIX / "eal-travel-0002.yaml"]
BAD = FIX / "eal-malformed"


def test_good_cases_import_with_probes_and_gold_memory():
    items = list(iter_items(GOOD))
    assert all(isinstance(i, Accepted) for i in items)
    proc, travel = (i.record for i in items)
    for case in (proc, travel):
        validate_policy_case(case)
        assert case["teacher"] is None and case["provenance"]["source"] == "eal-case"
        for p in case["probe_pairs"]:
            assert decide(case, None, p["in_scope"]) == EXECUTE
            assert decide(case, None, p["out_of_scope"]) == DECLINE
    assert proc["family"] == "procurement-spend" and proc["metadata"]["title"] == "Q3 software renewals"
    assert travel["family"] == "travel-approval"  # derived from the case id
    assert len(proc["probe_pairs"]) == 6
    # AUTH-2 was revoked; AUTH-1 was patched to 12,000
    assert [r["authorization_ref"] for r in proc["gold_memory"]] == ["AUTH-1"]
    assert proc["gold_memory"][0]["max_amount"] == 12000
    assert proc["gold_memory"][0]["source_turn_refs"] == ["B1-T02", "B2-T02"]
    assert travel["gold_memory"][0]["valid_until"] == "2026-05-15T00:00:00Z"
    assert isinstance(proc["blocks"][0]["ended_at"], str)  # YAML time stamps stay strings
    # the finance director's "approval" in B1-T03 authorizes nothing
    claim = {
        "grantee": "raj.mehta",
        "action": "purchase",
        "vendor": "summit-hardware",
        "category": "hardware",
        "amount": 10000,
        "currency": "USD",
        "action_time": "2026-03-20T10:00:00Z",
    }
    assert decide(proc, None, claim) == DECLINE and memory_decide(proc["gold_memory"], claim) == DECLINE


def test_malformed_cases_report_file_line_field():
    items = list(iter_items(sorted(BAD.glob("*.yaml"))))
    rejects = {Path(i.source).name: i for i in items if isinstance(i, Rejected)}
    assert not [i for i in items if isinstance(i, Accepted)]
    got = {name: (r.line, r.field) for name, r in rejects.items()}
    assert got == {
        "bad-amount.yaml": (26, "$.events[0].record.max_amount"),
        "missing-probes.yaml": (1, "$.probe_pairs"),
        "probe-disagrees.yaml": (24, "$.probe_pairs[0].out_of_scope"),
        "syntax.yaml": (3, "$"),
        "empty-history.yaml": (5, "$.blocks"),
    }
    assert rejects["bad-amount.yaml"].problem == "expected number, got string"
    assert "oracle says execute_requested" in rejects["probe-disagrees.yaml"].problem
    assert (
        str(rejects["empty-history.yaml"]) == f"{BAD / 'empty-history.yaml'}:5: $.blocks: must not be empty"
    )


def test_yaml_time_stamps_keep_their_fraction_of_a_second():
    value, _ = load_with_lines("a: 2026-05-12T09:30:00.25Z\nb: 2026-05-12T11:30:00+02:00\n")
    assert value == {"a": "2026-05-12T09:30:00.250000Z", "b": "2026-05-12T09:30:00Z"}


def test_yaml_loader_rejects_duplicates_and_multiple_documents(tmp_path):
    for text, line, field in (("a: 1\nb: 2\na: 3\n", 3, "$.a"), ("a: 1\n---\nb: 2\n", 3, "$"), ("", 1, "$")):
        try:
            load_with_lines(text)
        except YamlError as exc:
            assert (exc.line, exc.field) == (line, field), (text, exc)
        else:
            raise AssertionError(text)
    p = tmp_path / "bin.yaml"
    p.write_bytes(b"case_id: x\n\xff\xfe\n")
    (item,) = list(iter_items([p]))
    assert isinstance(item, Rejected) and item.line == 2 and "UTF-8" in item.problem


def test_unknown_top_level_fields_are_kept_not_rejected(tmp_path):
    text = (FIX / "eal-travel-0002.yaml").read_text()
    p = tmp_path / "extra.yaml"
    p.write_text("approver: dev.patel\nreview: {round: 2}\n" + text)
    (item,) = list(iter_items([p]))
    assert isinstance(item, Accepted), item
    assert item.record["metadata"]["eal"] == {"approver": "dev.patel", "review": {"round": 2}}
    assert item.record["provenance"]["kept_fields"] == ["approver", "review"]


def test_cli_imports_cases(tmp_path, capsys):
    out = tmp_path / "out"
    args = ["--format", "eal-case", *map(str, GOOD), str(BAD), "--out", str(out), "--quiet"]
    assert importer_main(args) == 1  # five files rejected
    printed = capsys.readouterr()
    assert "error: 5 of 7 records rejected" in printed.err
    assert f"  {BAD / 'syntax.yaml'}: 0/1" in printed.out and str(GOOD[0]) not in printed.out
    assert importer_main([*args, "--allow-partial"]) == 0
    assert (
        "7 records read from 7 files, 2 accepted (0 runs, 2 policy cases), 5 rejected"
        in capsys.readouterr().out
    )
    cases = [c for _, c in iter_policy_case_file(out / "policy_cases" / "cases-00000.jsonl")]
    assert [c["case_id"] for c in cases] == ["procurement-spend-0001", "travel-approval-0002"]
    m = json.loads((out / "manifest.json").read_text())
    assert m["counts"]["probe_pairs"] == 9 and m["counts"]["policy_cases"] == 2
    assert importer_main(["--format", "eal-case", str(BAD), "--out", str(out), "--strict", "--quiet"]) == 1
    # a folder of which nothing imports fails whatever the flags, and says so
    assert (
        importer_main(["--format", "eal-case", str(BAD), "--out", str(out), "--allow-partial", "--quiet"])
        == 1
    )
    assert "error: nothing imported (5 rejected of 5 read)" in capsys.readouterr().err
    assert importer_main(["--format", "eal-case", *map(str, GOOD), "--out", str(out), "--quiet"]) == 0


def test_alias_bomb_is_refused(tmp_path):
    rows = ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
    for prev, name in zip("abcdef", "bcdefg"):
        rows.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 10) + "]")
    p = tmp_path / "bomb.yaml"
    p.write_text("\n".join(rows) + "\n")
    (item,) = list(iter_items([p]))
    assert isinstance(item, Rejected) and "expands to more than" in item.problem
