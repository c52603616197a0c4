"""The CLI: scan, apply, rules; malformed lines; reports; streaming."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import tracemalloc
from pathlib import Path

from sanitizer import Sanitizer
from sanitizer.cli import main, process_stream
from sanitizer.corpus import ledger_record
from sanitizer.report import Report

KEY = "AKIAZ7Q2MV4XK3PLW9RD"
REPO = Path(__file__).resolve().parents[2]


def _write_input(path: Path, n: int = 30) -> list[dict]:
    r = random.Random(5)
    recs = [ledger_record(r, i) for i in range(n)]
    recs[3]["model_ledger"][0]["description"] = f"Uploaded with {KEY} <think>hide it</think>"
    recs[4]["model_ledger"][0]["description"] = "verdict: incident"
    lines = [json.dumps(x, ensure_ascii=False) for x in recs]
    lines.insert(6, '{"broken": ')  # line 7
    lines.insert(9, "")  # line 10: blank
    lines.insert(11, "[1, 2]")  # line 12: not an object
    lines.insert(13, '{"x": NaN}')  # line 14: not JSON
    path.write_bytes(("\n".join(lines) + "\n").encode() + b"\xff\xfe\n")  # last line: bad UTF-8
    return recs


def test_apply_writes_sanitized_canonical_jsonl_and_a_report(tmp_path, capsys):
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    recs = _write_input(src)
    assert main(["apply", str(src), str(dst), "--quiet"]) == 0
    out_lines = dst.read_bytes().decode().splitlines()
    assert len(out_lines) == len(recs) - 1  # the verdict echo is dropped
    for line in out_lines:
        obj = json.loads(line)
        assert line == json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    text = dst.read_text()
    assert KEY not in text and "hide it" not in text and "[SECRET:aws_access_key]" in text
    report = json.loads((tmp_path / "out.report.json").read_text())
    t = report["totals"]
    assert (t["records"], t["malformed"], t["dropped"], t["written"], t["blank_lines"]) == (30, 4, 1, 29, 1)
    assert [m["line"] for m in report["malformed_lines"]] == [7, 12, 14, 35]
    assert report["rules"]["secrets.aws_access_key"]["redacted"] == 1
    assert report["rules"]["reasoning.think_block"]["stripped"] == 1
    assert report["rules"]["leakage.verdict_object_echo"]["dropped"] == 1
    assert KEY not in json.dumps(report) and "hide it" not in json.dumps(report)
    sample = [s for s in report["findings_sample"] if s["rule_id"] == "secrets.aws_access_key"][0]
    assert (
        sample["line"] == 4 and sample["path"] == "model_ledger[0].description" and len(sample["hash"]) == 16
    )
    # deterministic and idempotent at file level
    dst2 = tmp_path / "out2.jsonl"
    assert main(["apply", str(src), str(dst2), "--quiet"]) == 0
    assert dst2.read_bytes() == dst.read_bytes()
    assert main(["scan", str(dst), "--fail-on-findings", "--quiet"]) == 0


def test_scan_reports_and_fails_on_findings(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    _write_input(src)
    assert main(["scan", str(src)]) == 0
    err = capsys.readouterr().err
    assert "in.jsonl:7: malformed line" in err and "secrets.aws_access_key" in err
    assert KEY not in err
    rep = tmp_path / "scan.json"
    assert main(["scan", str(src), "--fail-on-findings", "--quiet", "--report", str(rep)]) == 1
    assert json.loads(rep.read_text())["mode"] == "scan"


def test_strict_stops_at_the_first_malformed_line(tmp_path, capsys):
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    _write_input(src)
    assert main(["apply", str(src), str(dst), "--strict", "--quiet"]) == 2
    assert not dst.exists()
    assert "in.jsonl:7: malformed line" in capsys.readouterr().err


def test_packs_and_fields_options(tmp_path):
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    rec = {"a": {"text": f"k {KEY} <think>x</think>"}, "b": f"k {KEY}"}
    src.write_text(json.dumps(rec) + "\n")
    assert main(["apply", str(src), str(dst), "--packs", "reasoning", "--quiet"]) == 0
    assert json.loads(dst.read_text()) == {"a": {"text": f"k {KEY} "}, "b": f"k {KEY}"}
    assert main(["apply", str(src), str(dst), "--packs", "secrets", "--fields", "b", "--quiet"]) == 0
    assert json.loads(dst.read_text()) == {"a": rec["a"], "b": "k [SECRET:aws_access_key]"}


def test_usage_errors(tmp_path, capsys):
    assert main(["scan", str(tmp_path / "missing.jsonl"), "--quiet"]) == 2
    assert main(["scan", str(tmp_path / "x.jsonl"), "--packs", "nope", "--quiet"]) == 2
    src = tmp_path / "in.jsonl"
    src.write_text("{}\n")
    assert main(["apply", str(src), str(src)]) == 2


def test_rules_and_stdin_stdout_through_python_m():
    listing = subprocess.run(
        [sys.executable, "-m", "sanitizer", "rules"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert listing.returncode == 0, listing.stdout + listing.stderr
    assert "secrets.card_number" in listing.stdout and "0 failing" in listing.stdout
    done = subprocess.run(
        [sys.executable, "-m", "sanitizer", "apply", "-", "-", "--quiet"],
        cwd=REPO,
        input=json.dumps({"note": f"key {KEY}", "n": 1.5}) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == '{"n":1.5,"note":"key [SECRET:aws_access_key]"}\n'


def test_memory_stays_flat_while_streaming():
    san = Sanitizer.from_packs()
    r = random.Random(1)
    line = (json.dumps(ledger_record(r, 0)) + "\n").encode()
    secret_line = (json.dumps({"model_ledger": [{"description": f"k {KEY} and a@b.io"}]}) + "\n").encode()

    def peak(n: int) -> int:
        def lines():
            for i in range(n):
                yield secret_line if i % 10 == 0 else line

        report = Report("apply", {x.id: x.action for x in san.rules})
        sink = _NullSink()
        tracemalloc.start()
        process_stream(lines(), san, report, out=sink)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert report.records == n and sink.lines == n
        return top

    small, large = peak(200), peak(1200)
    assert large < small * 1.5 + 256 * 1024, (small, large)


class _NullSink(io.RawIOBase):
    def __init__(self):
        self.lines = 0

    def write(self, b):
        self.lines += 1
        return len(b)
