"""The synth entry script: run by path, flags and presets, clear errors, deterministic output."""

import json
import subprocess
import sys
from pathlib import Path

from data_prep.synthetic import SynthConfig
from data_prep.synthetic.config import config_from_mapping

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "data_prep" / "synth.py"


def run(*args, cwd):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd)


def test_script_writes_corpus_and_is_deterministic(tmp_path):
    preset = tmp_path / "preset.yaml"
    preset.write_text("runs: 12\nshard_size: 5\nhazard_rates: {email: 0.5}\n")
    flags = ("--config", str(preset), "--policy-cases", "3", "--seed", "4", "--sabotage-rates", "late=0.3")
    a = run("--out", str(tmp_path / "a"), *flags, "--quiet", cwd=tmp_path)
    assert a.returncode == 0, a.stderr
    assert "wrote 12 runs and 3 policy cases" in a.stdout
    m = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert m["config"]["hazard_rates"]["email"] == 0.5 and m["config"]["hazard_rates"]["phone"] == 0.04
    assert m["config"]["sabotage_rates"]["late"] == 0.3 and m["seed"] == 4
    assert sorted(m["files"]) == [
        "policy_cases/cases-00000.jsonl",
        "runs/runs-00000.jsonl",
        "runs/runs-00001.jsonl",
        "runs/runs-00002.jsonl",
    ]
    b = run("--out", str(tmp_path / "b"), *flags, "--quiet", cwd=tmp_path)
    assert b.returncode == 0
    for rel in m["files"]:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()


def test_bad_options_exit_2_without_traceback(tmp_path):
    for args in (("--sabotage-rates", "bogus=0.1"), ("--families", "nope"), ("--reader-accuracy", "1.5")):
        p = run("--out", str(tmp_path / "x"), "--runs", "1", *args, cwd=tmp_path)
        assert p.returncode == 2 and "Traceback" not in p.stderr and "error:" in p.stderr, (args, p.stderr)


def test_config_from_mapping_names_unknown_keys():
    try:
        config_from_mapping({"runz": 5}, where="preset.yaml")
    except ValueError as exc:
        assert str(exc) == "preset.yaml.runz: unknown field"
    else:
        raise AssertionError
    cfg = config_from_mapping({"writer_error_rates": {"omission": 0.1}})
    assert cfg.writer_error_rates == dict(SynthConfig().writer_error_rates, omission=0.1)
