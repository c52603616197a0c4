import json
import subprocess
import sys
from pathlib import Path

from runfactory import calls, run_dict

from data_prep.assemble import faithful_entry
from data_prep.integrity import seal_run
from data_prep.records import write_jsonl

SCRIPT = Path(__file__).resolve().parents[2] / "data_prep" / "verify.py"


def run_cli(*files):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, files)], capture_output=True, text=True, timeout=120
    )


def test_valid_file_exits_zero_and_prints_verdicts(tmp_path):
    ledger = [faithful_entry(c) for c in calls()]
    del ledger[0]
    p = tmp_path / "ok.jsonl"
    write_jsonl(p, [seal_run(run_dict("a")), seal_run(run_dict("b", ledger=ledger))])
    out = run_cli(p)
    assert out.returncode == 0, out.stderr
    assert "a: clean" in out.stdout and "b: discrepancy [omitted]" in out.stdout
    assert "2 valid, 0 invalid" in out.stdout


def test_bad_records_exit_one_with_file_line_field(tmp_path):
    bad = seal_run(run_dict("t"))
    bad["env_ledger"]["records"][2]["tool"] = "wire_out"
    p = tmp_path / "bad.jsonl"
    good = seal_run(run_dict("a"))
    lines = [json.dumps(good), json.dumps(bad), "{not json", json.dumps(good)]
    p.write_text("\n".join(lines) + "\n")
    out = run_cli(p)
    assert out.returncode == 1
    assert f"{p}:2: env_ledger.records[2]: edited" in out.stderr
    assert f"{p}:3: $: invalid JSON" in out.stderr
    assert f"{p}:4: run_id: duplicate of {p}:1" in out.stderr
    assert "4 records, 1 valid, 3 invalid" in out.stdout


def test_cli_survives_garbage(tmp_path):
    p = tmp_path / "junk.jsonl"
    p.write_bytes(b"\x00\xff" * 1000 + b"\n[1,2]\n" + b"{" * 100000 + b"\n")
    out = run_cli(p, tmp_path / "missing.jsonl")
    assert out.returncode == 1
    assert "Traceback" not in out.stderr


def test_unsealed_runs_are_refused_unless_allowed(tmp_path):
    p = tmp_path / "legacy.jsonl"
    write_jsonl(p, [run_dict("a")])
    out = run_cli(p)
    assert out.returncode == 1
    assert f"{p}:1: seal: unsealed" in out.stderr
    assert run_cli(p, "--allow-unsealed").returncode == 0
