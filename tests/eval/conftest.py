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

from evalkit import make_runs, policy_cases  # noqa: E402

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
