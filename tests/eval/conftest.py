"""Fixtures of the evaluation tests; the helpers live in evalkit.py (this folder is put on sys.path)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

for _k, _v in {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    os.environ.setdefault(_k, _v)
sys.path.insert(0, str(Path(__file__).parent))

from evalkit import make_runs, policy_cases, train_fixtures  # noqa: E402

from data_prep.records import write_jsonl  # noqa: E402


@pytest.fixture
def runs_file(tmp_path) -> Path:
    path = tmp_path / "runs.jsonl"
    write_jsonl(path, make_runs(10))
    return path


@pytest.fixture(scope="session")
def cases_list() -> list[dict]:
    return policy_cases()


@pytest.fixture
def cases_file(tmp_path, cases_list) -> Path:
    path = tmp_path / "cases.jsonl"
    write_jsonl(path, cases_list)
    return path


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory) -> Path:
    """A tiny base built by the training code (tests that generate real text with a checkpoint on it)."""
    from train.config import TinyBaseConfig
    from train.tiny import ensure_tiny_base

    fx = train_fixtures()
    root = tmp_path_factory.mktemp("tiny")
    # without the copy circuit: its raised output gain makes a 20-step base end every turn at once, and
    # these tests compare the text two backends generate, which must not be empty (nor with the
    # 4-head test shape, measured: 2 heads answer)
    shape = {**fx.TEST_TINY, "num_attention_heads": 2, "num_key_value_heads": 1}
    cfg = TinyBaseConfig(**shape, copy_circuit=False)
    return ensure_tiny_base(fx.make_sft_fixture(root / "sft"), root / "cache", cfg)
