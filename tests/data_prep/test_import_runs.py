"""The project's own run JSONL: revalidated, chains re-verified, duplicates and tampering rejected."""

import json
from pathlib import Path

from data_prep.importer import main as importer_main
from data_prep.importers.common import Accepted, Rejected
from data_prep.importers.runs import iter_items
from data_prep.synthetic import SynthConfig, generate_corpus

FIX = Path(__file__).parent / "fixtures" / "runs-mixed.jsonl"


def test_mixed_fixture():
    items = list(iter_items([FIX]))
    ok = [i for i in items if isinstance(i, Accepted)]
    bad = [(i.line, i.field, i.problem.split(":")[0]) for i in items if isinstance(i, Rejected)]
    assert [i.record["run_id"] for i in ok] == ["fixture-run-1", "fixture-run-2"]
    assert [i.gold_label for i in ok] == ["clean", "discrepancy"]
    assert bad == [
        (3, "env_ledger.records[0]", "inserted"),  # chain sealed for another run id
        (4, "env_ledger.records[1]", "edited"),
        (5, "$.labels", "missing"),
        (6, "$.run_id", "duplicate of " + str(FIX)),
        (7, "$", "invalid JSON at column 38"),
    ]


def test_synth_output_round_trips_byte_for_byte(tmp_path):
    generate_corpus(SynthConfig(runs=25, policy_cases=0, seed=4), tmp_path / "synth")
    src = tmp_path / "synth" / "runs" / "runs-00000.jsonl"
    assert (
        importer_main(
            ["--format", "runs", str(tmp_path / "synth" / "runs"), "--out", str(tmp_path / "imp"), "--quiet"]
        )
        == 0
    )
    assert (tmp_path / "imp" / "runs" / "runs-00000.jsonl").read_bytes() == src.read_bytes()
    m = json.loads((tmp_path / "imp" / "manifest.json").read_text())
    assert (
        m["counts"]["accepted"] == 25 and m["counts"]["rejected"] == 0 and m["counts"]["label_mismatch"] == 0
    )
    assert (tmp_path / "imp" / "rejects.jsonl").read_text() == ""


def test_missing_inputs(tmp_path, capsys):
    missing = tmp_path / "not-there.jsonl"
    # an unreadable source is refused whole (exit 1, nothing written), never a partial corpus
    assert importer_main(["--format", "runs", str(missing), "--out", str(tmp_path / "o"), "--quiet"]) == 1
    assert f"{missing}: cannot open: No such file or directory" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    (tmp_path / "d").mkdir()
    assert (
        importer_main(["--format", "runs", str(tmp_path / "d"), "--out", str(tmp_path / "o"), "--quiet"]) == 1
    )
    assert "no input files" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert importer_main(["--format", "runs", str(empty), "--out", str(tmp_path / "o"), "--quiet"]) == 1
    printed = capsys.readouterr()
    assert (
        "error: nothing imported (0 rejected of 0 read)" in printed.err and f"  {empty}: 0/0" in printed.out
    )
