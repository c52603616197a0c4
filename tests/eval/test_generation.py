"""Decoding settings, the backend interface and its failure paths (the transformers backend on a real
tiny checkpoint is exercised in tests/e2e/test_eval_tiny.py)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from eval.generation import (
    DEFAULT_DECODING,
    BackendError,
    DecodingConfigError,
    ScriptedBackend,
    VLLMBackend,
    load_decoding,
    read_checkpoint,
)

REPO = Path(__file__).resolve().parents[2]


def test_default_decoding_file_is_greedy_and_complete():
    d = load_decoding(DEFAULT_DECODING)
    assert d.temperature == 0.0 and d.backend == "transformers"
    assert set(d.max_new_tokens) == {"writer_action", "reader_verdict", "writer_memory", "reader_policy"}
    assert d.digest() == load_decoding(DEFAULT_DECODING).digest()
    assert (
        load_decoding(DEFAULT_DECODING, {"threads": 3}).digest() == d.digest()
    )  # threads do not change answers
    assert load_decoding(DEFAULT_DECODING, {"temperature": 0.7}).digest() != d.digest()


def test_decoding_errors_name_the_file_and_field(tmp_path):
    bad = tmp_path / "d.yaml"
    bad.write_text("temprature: 0.1\n")
    with pytest.raises(DecodingConfigError, match=r"d.yaml: temprature: unknown field"):
        load_decoding(bad)
    bad.write_text("max_new_tokens: {writer_action: -3}\n")
    with pytest.raises(DecodingConfigError, match="max_new_tokens"):
        load_decoding(bad)
    bad.write_text("backend: tgi\n")
    with pytest.raises(DecodingConfigError, match="backend"):
        load_decoding(bad)
    bad.write_text("max_new_tokens: {writer_action: 7}\n")
    d = load_decoding(bad)
    assert d.tokens_for("writer_action") == 7 and d.tokens_for("reader_policy") == 16


def test_complete_turns_failures_into_per_item_provider_errors():
    def responder(msgs, task, adapter):
        if "boom" in msgs[-1]["content"]:
            raise ConnectionError("reset by peer")
        return msgs[-1]["content"].upper()

    b = ScriptedBackend(responder)
    prompts = [[{"role": "user", "content": t}] for t in ("a", "boom", "c")]
    out = b.complete(prompts, task="reader_policy")
    assert [c.text for c in out] == ["A", None, "C"]
    assert out[1].error == "ConnectionError: reset by peer" and not out[1].ok
    assert b.complete([], task="reader_policy") == []


def test_checkpoint_errors_are_clear(tmp_path):
    with pytest.raises(BackendError, match="no such checkpoint directory"):
        read_checkpoint(tmp_path / "nope")
    (tmp_path / "ck").mkdir()
    with pytest.raises(BackendError, match="adapter_config.json is missing"):
        read_checkpoint(tmp_path / "ck")


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_backend_says_what_is_missing(tmp_path):
    with pytest.raises(BackendError, match="needs the vllm package"):
        VLLMBackend(tmp_path, load_decoding(DEFAULT_DECODING))


def test_cli_reports_a_missing_checkpoint(tmp_path, runs_file):
    proc = subprocess.run(
        [sys.executable, str(REPO / "eval" / "sabotage.py"), "--writer", str(tmp_path / "none"), "--reader",
         str(tmp_path / "none"), "--runs", str(runs_file), "--out", str(tmp_path / "o"), "--no-progress"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "no such checkpoint directory" in proc.stderr
    proc = subprocess.run(
        [sys.executable, str(REPO / "eval" / "policy_reuse.py"), "--writer", str(tmp_path / "none"), "--cases",
         str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "p")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2 and "error" in proc.stderr
    proc = subprocess.run(
        [sys.executable, str(REPO / "eval" / "policy_reuse.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "--executor" in proc.stdout and "--incremental" in proc.stdout
