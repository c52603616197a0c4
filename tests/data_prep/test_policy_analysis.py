"""``metadata.analysis`` of a policy case: EAL-Bench's ``benchmark`` block, typed and bounded, kept for
the policy-reuse breakdowns and never rendered into a prompt.

The field names and types follow the public repository ``tommasocerruti/eal-bench``
(``domains/procurement/corpus/{benchmark_v1,calibration_v1,generated_v1}/*.yaml``, top-level
``benchmark``: ``split``, ``case_family_id``, ``lifecycle``, ``history_length_band`` strings;
``target_dimensions``, ``distractor_types``, ``memory_hazards`` lists of strings).
"""

import json
from pathlib import Path

import pytest

from data_prep.canonical import dumps_canonical
from data_prep.importers.eal_case import iter_items
from data_prep.policy_case import (
    ANALYSIS_EXTRA_BYTES,
    analysis_values,
    case_analysis,
    validate_analysis,
    validate_policy_case,
)
from data_prep.records import RecordError
from data_prep.sft.config import load_build_config
from data_prep.sft.pipeline import build
from data_prep.synthetic import SynthConfig, generate_corpus

ROOT = Path(__file__).resolve().parents[2]
FIX = Path(__file__).parent / "fixtures" / "eal-bench"
SENTINEL = "zq_analysis_sentinel"


def _imported(name: str, text: str | None = None, tmp_path: Path | None = None):
    path = FIX / name
    if text is not None:
        path = tmp_path / name
        path.write_text(text)
    return next(iter_items([path]))


def test_benchmark_block_becomes_typed_analysis():
    item = _imported("benchmark-revoke-replace.yaml")
    a = item.record["metadata"]["analysis"]
    assert a["memory_hazards"] == ["stale_state", "supersession_loss", "authority_confusion"]
    assert a["target_dimensions"] == ["status", "vendor"]
    assert (a["lifecycle"], a["history_length_band"], a["split"]) == (
        "issue_revoke_replace",
        "short",
        "benchmark",
    )
    assert "benchmark" not in item.record["metadata"]["eal"]  # one home: the analysis mapping
    assert analysis_values(case_analysis(item.record), "memory_hazards") == a["memory_hazards"]


@pytest.mark.parametrize(
    ("old", "new", "field", "problem"),
    [
        (
            "  memory_hazards:\n  - stale_state\n",
            "  memory_hazards: stale_state\n  old:\n  - stale_state\n",
            "$.benchmark.memory_hazards",
            "expected array of strings",
        ),
        (
            "  lifecycle: issue_revoke_replace\n",
            "  lifecycle: 3\n",
            "$.benchmark.lifecycle",
            "expected string",
        ),
        ("  - stale_state\n", "  - ''\n", "$.benchmark.memory_hazards[0]", "must not be empty"),
    ],
)
def test_mistyped_analysis_is_rejected_at_its_line(tmp_path, old, new, field, problem):
    text = (FIX / "benchmark-revoke-replace.yaml").read_text()
    assert old in text
    r = _imported("bad.yaml", text.replace(old, new, 1), tmp_path)
    assert r.field == field and r.problem.startswith(problem)
    assert r.line == text.replace(old, new, 1).splitlines().index(new.splitlines()[0]) + 1


def test_unknown_analysis_keys_are_kept_but_bounded():
    a = {"memory_hazards": ["stale_state"], "reviewer_note": "kept as given", "weights": {"x": 1}}
    assert validate_analysis(a, "$") == a
    big = {"blob": "x" * ANALYSIS_EXTRA_BYTES}
    with pytest.raises(RecordError, match="more than 4096"):
        validate_analysis(big, "$.metadata.analysis")


def test_synthetic_cases_may_leave_it_out(tmp_path):
    generate_corpus(SynthConfig(runs=0, policy_cases=2, seed=3), tmp_path, progress=False)
    for f in (tmp_path / "policy_cases").glob("*.jsonl"):
        for line in f.read_text().splitlines():
            case = validate_policy_case(json.loads(line))
            assert "analysis" not in case["metadata"] and case_analysis(case) == {}


def test_analysis_never_reaches_a_rendered_example(tmp_path):
    """Every built example (writer memory and reader policy, every split) is free of the analysis."""
    corpus = tmp_path / "corpus"
    generate_corpus(SynthConfig(runs=8, policy_cases=6, seed=5), corpus, progress=False)
    for f in (corpus / "policy_cases").glob("*.jsonl"):
        cases = [json.loads(line) for line in f.read_text().splitlines()]
        for c in cases:
            c["metadata"]["analysis"] = {
                "memory_hazards": [f"{SENTINEL}_hazard"],
                "target_dimensions": [f"{SENTINEL}_dim"],
                "lifecycle": f"{SENTINEL}_life",
                "note": f"{SENTINEL}_extra",
            }
            validate_policy_case(c)
        f.write_text("".join(dumps_canonical(c) + "\n" for c in cases))
    out = tmp_path / "sft"
    manifest = build(
        corpus,
        out,
        load_build_config(ROOT / "configs" / "data" / "default.yaml"),
        progress=False,
        allow_unsealed=True,
    )
    rows = [
        json.loads(line)
        for task in ("writer_memory", "reader_policy")
        for p in (out / "jsonl" / task).glob("*.jsonl")
        for line in p.read_text().splitlines()
    ]
    assert {r["task"] for r in rows} >= {"writer_memory", "reader_policy"}, manifest
    for r in rows:
        assert SENTINEL not in json.dumps(r["messages"]), r["id"]
