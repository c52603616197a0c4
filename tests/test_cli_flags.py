"""Every entry script takes its flags only as spelled: an abbreviation (``--writ`` for ``--writer``)
is an error naming it, exit 2, before any work starts, never silently another setting."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from data_prep.yaml_config import strict_parser

ROOT = Path(__file__).resolve().parents[1]

# script (or -m module and subcommand), then an unambiguous prefix of one of its long flags
ABBREVIATED = [
    (["data_prep/verify.py", "runs.jsonl"], "--allow-uns"),
    (["data_prep/teacher.py"], "--concur"),
    (["data_prep/importer.py", "x"], "--label"),
    (["data_prep/embedded.py"], "--qui"),
    (["data_prep/build.py"], "--overw"),
    (["data_prep/synth.py"], "--qui"),
    (["train/writer.py"], "--learn"),
    (["train/reader.py"], "--learn"),
    (["train/export.py"], "--base-mod"),
    (["eval/sabotage.py"], "--writ"),
    (["eval/policy_reuse.py"], "--writ"),
    (["eval/compare.py", "x"], "--se"),
    (["eval/serve.py"], "--ada"),
    (["slurm/submit.py", "x.yaml"], "--max-par"),
    (["slurm/aggregate.py", "x"], "--stri"),
    (["slurm/task_runner.py", "train"], "--ind"),
    (["-m", "sanitizer", "scan", "-"], "--pack"),
    (["bench/synth.py"], "--repe"),
    (["bench/ledger.py"], "--run"),
    (["bench/build.py"], "--smal"),
    (["bench/sanitizer.py"], "--recor"),
]


@pytest.mark.parametrize(
    ("command", "flag"), ABBREVIATED, ids=[c[0] if c[0] != "-m" else c[1] for c, _ in ABBREVIATED]
)
def test_abbreviated_flag_is_refused(command: list[str], flag: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, *command, flag, "1"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert f"unrecognized arguments: {flag}" in proc.stderr


def test_unknown_flag_named_before_missing_required(capsys: pytest.CaptureFixture[str]) -> None:
    ap = strict_parser(prog="x")
    ap.add_argument("--writer", required=True)
    with pytest.raises(SystemExit) as exc:
        ap.parse_args(["--writ", "ckpt/"])
    assert exc.value.code == 2 and "unrecognized arguments: --writ ckpt/" in capsys.readouterr().err
    assert ap.parse_args(["--writer", "w"]).writer == "w"  # still required, still parsed
    with pytest.raises(SystemExit):
        ap.parse_args([])


def test_exact_flags_and_values_after_double_dash_still_parse() -> None:
    ap = strict_parser(prog="x")
    ap.add_argument("--writer")
    ap.add_argument("rest", nargs="*")
    ns = ap.parse_args(["--writer=ckpt/", "--", "--not-a-flag"])
    assert ns.writer == "ckpt/" and ns.rest == ["--not-a-flag"]
