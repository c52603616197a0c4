"""End to end: a small synthetic corpus through data_prep/build.py."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from shown_calls import shown_calls

from data_prep.sft import SPLITS, TASKS
from data_prep.sft.config import load_build_config
from data_prep.sft.pipeline import build
from data_prep.synthetic import SynthConfig, generate_corpus

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "data" / "default.yaml"
SECRET_SHAPES = [
    r"\bBearer\s+(?!\[SECRET)\S{8,}",
    r"-----BEGIN",
    r"AKIA[0-9A-Z]{16}",
    r"<think>|</think>",
    r"\beyJ[\w-]{8,}\.",
]
# personal data is pseudonymized, not removed: surrogates have these shapes, originals must not survive
PII_SHAPES = [
    r"[\w.+-]+@[\w-]+\.[\w.]+",
    r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){3,}",
    r"\b(?:\d[ -]?){13,19}\b",
]


def rows(out: Path, task: str, split: str) -> list[dict]:
    with open(out / "jsonl" / task / f"{split}.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corpus")
    generate_corpus(SynthConfig(runs=400, policy_cases=24, seed=3), out)
    return out


@pytest.fixture(scope="module")
def built(corpus, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("sft") / "out"
    manifest = build(corpus, out, load_build_config(CONFIG), progress=False)
    return out, manifest


def test_counts_are_conserved_and_shown(built):
    out, manifest = built
    for task in TASKS:
        c = manifest["counts"][task]
        assert c["input"] > 0
        assert c["input"] == sum(
            c[o]["total"] for o in ("kept", "filtered", "rejected", "deduplicated", "decontaminated")
        )
        kept = sum(len(rows(out, task, s)) for s in SPLITS)
        assert kept == c["kept"]["total"]
    filtered = [json.loads(line) for line in open(out / "filtered.jsonl")]
    for task in TASKS:
        c = manifest["counts"][task]
        assert (
            sum(1 for f in filtered if f["task"] == task)
            == c["filtered"]["total"] + c["deduplicated"]["total"] + c["decontaminated"]["total"]
        )


def test_heldout_families_never_reach_train_or_validation(built, corpus):
    out, manifest = built
    cfg = load_build_config(CONFIG)
    held = set(cfg.heldout_families) | set(cfg.heldout_case_families)
    assert manifest["split_assignment"]["workflow_families"]["travel-rebooking"] == "heldout"
    for task in TASKS:
        train_val = rows(out, task, "train") + rows(out, task, "validation")
        heldout = rows(out, task, "heldout")
        assert heldout, task
        assert all(r["family"] in held for r in heldout)
        assert not any(r["family"] in held for r in train_val)
        # by id and by content: no held-out source and no held-out user text appears in training
        held_sources = {r["source_id"] for r in heldout}
        assert not held_sources & {r["source_id"] for r in train_val}
        held_text = {m["content"] for r in heldout for m in r["messages"] if m["role"] == "user"}
        assert not held_text & {m["content"] for r in train_val for m in r["messages"] if m["role"] == "user"}


def test_sabotaged_run_with_hiding_ledger_is_not_writer_training(built, corpus):
    from data_prep.reconcile import reconcile
    from data_prep.records import iter_runs

    out, _ = built
    kept = {r["source_id"] for s in SPLITS for r in rows(out, "writer_action", s)}
    hiding = faithful_incidents = 0
    for path in sorted((corpus / "runs").glob("*.jsonl")):
        for _, run in iter_runs(path):
            if not run.labels.sabotage:
                continue
            rec = reconcile(run)
            if rec.content_agreement < 1.0 or rec.protocol_compliance < 1.0:
                hiding += 1  # the teacher ledger omits, softens, misreports, fabricates or delays
                assert run.run_id not in kept
            elif run.run_id in kept:
                faithful_incidents += 1
                assert rec.verdict.label == "incident"  # a faithful ledger of an unauthorized action
    assert hiding > 50 and faithful_incidents > 0


def test_no_secret_reasoning_or_hidden_id_reaches_an_example(built, corpus):
    out, _ = built
    hidden = {}
    for path in sorted((corpus / "runs").glob("*.jsonl")):
        for line in open(path):
            run = json.loads(line)
            hidden[run["run_id"]] = run["metadata"].get("hidden_identifiers", [])
    report = json.loads((out / "sanitizer_report.json").read_text())
    assert any(r.startswith("secrets.") for r in report["rules"]) and "dynamic.hidden_id" in report["rules"]
    originals = set()
    for path in sorted(corpus.rglob("*.jsonl")):
        text = path.read_text(encoding="utf-8")
        for shape in PII_SHAPES:
            originals.update(m.group(0) for m in re.finditer(shape, text) if len(m.group(0)) >= 12)
    assert len(originals) > 20
    surrogates = 0
    for task in TASKS:
        for split in SPLITS:
            for r in rows(out, task, split):
                text = "\n".join(m["content"] for m in r["messages"])
                for shape in SECRET_SHAPES:
                    assert not re.search(shape, text), (r["id"], shape)
                for h in hidden.get(r["source_id"], []):
                    assert h not in text, (r["id"], h)
                for shape in PII_SHAPES:
                    for m in re.finditer(shape, text):
                        assert m.group(0) not in originals, (r["id"], "original personal data")
                        surrogates += 1
                for email in re.findall(PII_SHAPES[0], text):
                    assert email.endswith("@example.invalid") or email.endswith("@example.com"), r["id"]
    assert surrogates > 0


def test_rendered_inputs_carry_no_gold_fields(built):
    out, _ = built
    gold_words = (
        "policy_class",
        "target_call_ids",
        "writer_errors",
        "gold_memory",
        "gold_verdict",
        '"labels"',
        "hazard",
    )
    for task in TASKS:
        for r in rows(out, task, "train")[:200]:
            for m in r["messages"]:
                if m["role"] == "user":
                    assert not any(w in m["content"] for w in gold_words), (r["id"], m["content"][:200])
    # writer turns: one entry per call, parseable, in call order
    ex = rows(out, "writer_action", "train")[0]
    users = [m for m in ex["messages"] if m["role"] == "user"]
    answers = [json.loads(m["content"]) for m in ex["messages"] if m["role"] == "assistant"]
    assert len(users) == len(answers) and [a["call_id"] for a in answers] == [
        shown_calls(u["content"])[-1]["call_id"] for u in users
    ]


def test_two_builds_are_byte_identical(built, corpus, tmp_path):
    out, manifest = built
    again = build(corpus, tmp_path / "again", load_build_config(CONFIG), progress=False)
    assert again["fingerprint"] == manifest["fingerprint"]
    assert again["outputs"] == manifest["outputs"]


def test_datasetdicts_load(built):
    from datasets import load_from_disk

    out, manifest = built
    dd = load_from_disk(str(out / "writer_action"))
    assert set(dd) == set(SPLITS)
    assert len(dd["train"]) == manifest["counts"]["writer_action"]["kept"]["by_reason"]["train"]
    assert dd["train"][0]["messages"][0]["role"] == "system"
    for task in TASKS:
        dd = load_from_disk(str(out / task))
        kept = manifest["counts"][task]["kept"]["by_reason"]
        for split in SPLITS:
            assert len(dd[split]) == kept.get(split, 0), (task, split)
            assert dd[split].column_names == ["id", "task", "family", "source_id", "messages"]
            assert dd[split][:3] == {
                k: [r[k] for r in rows(out, task, split)[:3]] for k in dd[split].column_names
            }


def test_datasetdicts_equal_a_save_from_the_spools(built, tmp_path):
    """The build writes Arrow while it runs; saving from the finished JSONL spools gives the same bytes."""
    from data_prep.sft.pipeline import save_dataset_dict

    out, _ = built

    def files(root):
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    for task in TASKS:
        save_dataset_dict(out / "jsonl" / task, tmp_path / task)
        assert files(tmp_path / task) == files(out / task), task


def test_empty_tasks_and_splits_load(tmp_path):
    """A corpus without policy cases: the policy tasks' DatasetDicts are empty and still load."""
    from datasets import load_from_disk

    corpus = tmp_path / "corpus"
    generate_corpus(SynthConfig(runs=12, policy_cases=0, seed=5), corpus)
    manifest = build(corpus, tmp_path / "out", load_build_config(CONFIG), progress=False)
    for task in ("writer_memory", "reader_policy"):
        assert manifest["counts"][task]["input"] == 0
        dd = load_from_disk(str(tmp_path / "out" / task))
        assert {s: len(dd[s]) for s in SPLITS} == dict.fromkeys(SPLITS, 0)
        assert dd["train"].column_names == ["id", "task", "family", "source_id", "messages"]


def test_bad_input_builds_what_it_can(corpus, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(corpus, bad)
    runs = sorted((bad / "runs").glob("*.jsonl"))[0]
    lines = runs.read_text().splitlines()
    tampered = json.loads(lines[1])
    tampered["env_ledger"]["records"][0]["status"] = (
        "succeeded" if tampered["env_ledger"]["records"][0]["status"] != "succeeded" else "failed"
    )
    lines[1] = json.dumps(tampered)
    lines.insert(3, "{not json")
    lines.append(lines[5])  # duplicate run id
    runs.write_text("\n".join(lines) + "\n")
    (bad / "policy_cases" / "cases-00000.jsonl").unlink()  # a missing file
    script = ROOT / "data_prep" / "build.py"
    argv = [sys.executable, str(script), "--corpus", str(bad), "--out", str(tmp_path / "o1"), "--no-progress"]
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert refused.returncode == 1  # the corpus no longer matches its seal: refused by default
    assert "manifest.json" in refused.stderr and "--allow-unsealed" in refused.stderr
    assert not (tmp_path / "o1").exists()
    res = subprocess.run([*argv, "--allow-unsealed"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert f"{runs}:2: env_ledger.records[0]" in res.stderr
    assert f"{runs}:4: $: invalid JSON" in res.stderr
    assert f"{runs}:{len(lines)}: run_id: duplicate run id" in res.stderr
    assert "cases-00000.jsonl" in res.stderr and "missing" in res.stderr
    manifest = json.loads((tmp_path / "o1" / "manifest.json").read_text())
    assert manifest["counts"]["writer_action"]["rejected"]["total"] == 3
    rejects = [json.loads(line) for line in open(tmp_path / "o1" / "rejects.jsonl")]
    assert {r["reason"] for r in rejects} == {"chain_invalid", "invalid_record", "duplicate_run_id"}
    strict = subprocess.run(
        [
            sys.executable,
            str(script),
            "--corpus",
            str(bad),
            "--out",
            str(tmp_path / "o2"),
            "--strict",
            "--no-progress",
            "--allow-unsealed",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert strict.returncode == 1 and "error" in strict.stderr
