"""What a model sees is sanitized: a planted corpus through the build (nothing secret survives in any
output), consistent pseudonymization that leaves gold verdicts as they were, held-out decontamination
by normalized family name and content, and splits that do not depend on the corpus order."""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from data_prep.chain import seal_ledger
from data_prep.integrity import seal_run
from data_prep.reconcile import reconcile
from data_prep.records import Run
from data_prep.sft import SPLITS, TASKS
from data_prep.sft.config import load_build_config
from data_prep.sft.pipeline import build
from data_prep.sft.planted import CASE_PLACES, RUN_PLACES, plant_corpus, survivors
from data_prep.sft.sanitize import ExampleSanitizer, corpus_key
from data_prep.sft.split import family_key, split_of
from data_prep.synthetic import SynthConfig, generate_corpus
from sanitizer.checks import _iban_ok

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "data" / "default.yaml"
HELD = "travel-rebooking"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corpus")
    generate_corpus(SynthConfig(runs=240, policy_cases=16, seed=11), out, progress=False)
    return out


@pytest.fixture(scope="module")
def planted(corpus, tmp_path_factory):
    dst = tmp_path_factory.mktemp("planted")
    plants = plant_corpus(corpus, dst, seed=5)
    out = tmp_path_factory.mktemp("planted_build") / "out"
    err, std = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
        manifest = build(dst, out, load_build_config(CONFIG), progress=True, allow_unsealed=True)
    return dst, out, plants, manifest, err.getvalue() + std.getvalue()


def _outputs(out: Path) -> dict[str, str]:
    return {
        str(p.relative_to(out)): p.read_bytes().decode("utf-8", "replace")
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }


def _rows(out: Path, task: str, split: str) -> list[dict]:
    with open(out / "jsonl" / task / f"{split}.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def test_planted_corpus_covers_the_shapes_and_places(planted):
    _dst, _out, plants, _m, _err = planted
    kinds = {p.kind for p in plants if not p.kind.startswith("pii:")}
    assert len(kinds) >= 40
    assert {p.kind for p in plants if p.kind.startswith("pii:")} == {
        "pii:iban",
        "pii:card",
        "pii:email",
        "pii:phone",
    }
    places = {p.place for p in plants}
    assert set(RUN_PLACES) | set(CASE_PLACES) <= places
    assert {"reject:value", "reject:key", "reject:line"} <= places


def test_no_planted_secret_or_personal_value_survives_in_any_output(planted):
    _dst, out, plants, manifest, stderr = planted
    blobs = _outputs(out)
    assert any(name.endswith(".arrow") for name in blobs) and "rejects.jsonl" in blobs
    assert "manifest.json" in blobs and "sanitizer_report.json" in blobs
    blobs["stderr+stdout"] = stderr
    found = survivors(plants, blobs)
    assert found == [], Counter((p.kind, p.place, where) for p, where in found).most_common(10)
    # the examples were kept, not dropped: the plants reached the rendered turns and were cleaned there
    kept = {t: manifest["counts"][t]["kept"]["total"] for t in TASKS}
    assert min(kept.values()) > 0
    assert manifest["counts"]["writer_action"]["rejected"]["total"] == 3
    report = json.loads(blobs["sanitizer_report.json"])
    assert {"secrets.iban", "secrets.email", "secrets.card_number", "secrets.phone_number"} <= set(
        report["rules"]
    )


def test_arrow_datasets_hold_no_planted_text(planted):
    from datasets import load_from_disk

    _dst, out, plants, _m, _err = planted
    secrets = [v for p in plants for v in p.vanish]
    for task in ("writer_action", "reader_verdict"):
        dd = load_from_disk(str(out / task))
        text = "\n".join(m["content"] for split in SPLITS for row in dd[split] for m in row["messages"])
        assert text and not [s for s in secrets if s in text]


def test_rejects_name_file_line_and_field_without_the_secret(planted):
    _dst, out, plants, manifest, _err = planted
    rejects = [json.loads(line) for line in open(out / "rejects.jsonl", encoding="utf-8")]
    assert len(rejects) == 3
    for r in rejects:
        assert r["file"].endswith(".jsonl") and r["line"] > 0 and r["field"] and r["problem"]
    assert any("[SECRET:" in r["field"] or "[SECRET:" in r["problem"] for r in rejects)
    assert len(manifest["problems"]) == 3


def test_personal_data_is_pseudonymized_consistently_across_turns(planted):
    dst, out, plants, _m, _err = planted
    ibans = {p.source: p.vanish[0] for p in plants if p.kind == "pii:iban"}
    checked = 0
    scrub = ExampleSanitizer(
        ["secrets"],
        corpus_key(sorted((dst / "runs").glob("*.jsonl")) + sorted((dst / "policy_cases").glob("*.jsonl"))),
    )
    for split in SPLITS:
        for row in _rows(out, "writer_action", split):
            original = ibans.get(row["source_id"])
            if original is None:
                continue
            surrogate = scrub.pseudonymizer.surrogate("iban", original)
            assert _iban_ok(surrogate.encode()) and surrogate[:2] == original[:2]
            assert len(surrogate) == len(original) and surrogate != original
            users = "\n".join(m["content"] for m in row["messages"] if m["role"] == "user")
            answers = "\n".join(m["content"] for m in row["messages"] if m["role"] == "assistant")
            assert surrogate in users and surrogate in answers  # the trajectory and the ledger agree
            checked += 1
    assert checked > 5


def test_gold_verdicts_are_the_same_after_pseudonymization(planted):
    dst, _out, _plants, _m, _err = planted
    files = sorted((dst / "runs").glob("*.jsonl")) + sorted((dst / "policy_cases").glob("*.jsonl"))
    scrub = ExampleSanitizer(["secrets"], corpus_key(files))
    before, after, changed = Counter(), Counter(), 0
    for path in sorted((dst / "runs").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                raw = json.loads(line)
                run = Run.from_dict(raw)
            except ValueError:
                continue  # the broken records
            gold = reconcile(run).verdict
            pseudo = scrub.pseudonymize_record(raw)
            changed += pseudo != raw
            records = raw["env_ledger"]["records"]
            pseudo["env_ledger"] = seal_ledger(
                pseudo["run_id"],
                [{**c, "policy_class": r["policy_class"]} for c, r in zip(pseudo["trajectory"], records)],
            )
            pseudo = seal_run(pseudo)
            again = reconcile(Run.from_dict(pseudo)).verdict
            want = sorted(scrub.pseudonymize_record(list(gold.call_ids)))  # ids map like everything else
            assert (again.label, sorted(again.call_ids)) == (gold.label, want), raw["run_id"]
            before[gold.label] += 1
            after[again.label] += 1
    assert before == after and changed > 100 and set(before) >= {"clean", "discrepancy", "incident"}


@pytest.mark.parametrize(
    "name",
    [
        "Travel-Rebooking",
        "travel-rebooking ",
        "travel_rebooking-v2",
        "travel\u200b-rebooking",
        "TRAVEL REBOOKING v3",
    ],
)
def test_renamed_heldout_family_is_held_out(name):
    cfg = load_build_config(CONFIG)
    assert family_key(name) == family_key(HELD)
    assert split_of(name, "run-1", set(cfg.heldout_families), cfg) == "heldout"
    assert split_of("travel-rebooking-desk", "run-1", set(cfg.heldout_families), cfg) != "heldout"


def _copy_runs(corpus: Path, dst: Path, transform) -> None:
    """``dst/runs/*.jsonl``: every run of ``corpus``, then ``transform(run)`` copies (resealed)."""
    (dst / "runs").mkdir(parents=True)
    lines = []
    for path in sorted((corpus / "runs").glob("*.jsonl")):
        lines += path.read_text(encoding="utf-8").splitlines()
    extra = []
    for line in lines:
        run = json.loads(line)
        for copy in transform(run):
            recs = copy["env_ledger"]["records"]
            copy["env_ledger"] = seal_ledger(
                copy["run_id"],
                [{**c, "policy_class": r["policy_class"]} for c, r in zip(copy["trajectory"], recs)],
            )
            copy = seal_run(copy)  # the run seal too: a copy is a new record
            extra.append(json.dumps(copy))
    (dst / "runs" / "runs-00000.jsonl").write_text("\n".join(extra + lines) + "\n", encoding="utf-8")


def _counts(manifest: dict, task: str) -> dict:
    return manifest["counts"][task]


def test_train_copies_of_heldout_runs_are_decontaminated_never_the_heldout(corpus, tmp_path):
    cfg = load_build_config(CONFIG, {"heldout_case_families": []})
    base = build(corpus, tmp_path / "base", cfg, progress=False, allow_unsealed=True)

    def copies(run):
        if family_key(run["family"]) != HELD:
            return []
        out = []
        for i, fam in enumerate(("Travel-Rebooking", "travel-rebooking-v2", "ops-misc-desk")):
            c = json.loads(json.dumps(run))
            c["run_id"] = f"{run['run_id']}-copy{i}"  # sorts after the original: read first, kept if first
            c["family"] = fam
            out.append(c)
        return out

    (tmp_path / "c").mkdir()
    _copy_runs(corpus, tmp_path / "c", copies)
    got = build(tmp_path / "c", tmp_path / "out", cfg, progress=False, allow_unsealed=True)
    for task in ("writer_action", "reader_verdict"):
        b, g = _counts(base, task), _counts(got, task)
        assert g["kept"]["by_reason"]["heldout"] >= b["kept"]["by_reason"]["heldout"] > 0
        assert g["kept"]["by_reason"].get("train", 0) == b["kept"]["by_reason"].get("train", 0)
        assert g["decontaminated"]["total"] > 0
        assert g["input"] == sum(
            g[o]["total"] for o in ("kept", "filtered", "rejected", "deduplicated", "decontaminated")
        )
        heldout_ids = {r["id"] for r in _rows(tmp_path / "out", task, "heldout")}
        train_text = {
            json.dumps(r["messages"])
            for s in ("train", "validation")
            for r in _rows(tmp_path / "out", task, s)
        }
        for r in _rows(tmp_path / "out", task, "heldout"):
            assert json.dumps(r["messages"]) not in train_text, r["id"]
        assert {r["id"] for r in _rows(tmp_path / "base", task, "heldout")} <= heldout_ids
    filtered = [json.loads(x) for x in open(tmp_path / "out" / "filtered.jsonl", encoding="utf-8")]
    assert sum(f["reason"] == "decontaminated" for f in filtered) == sum(
        _counts(got, t)["decontaminated"]["total"] for t in TASKS
    )


def test_shuffled_corpus_gives_byte_identical_splits(corpus, tmp_path):
    cfg = load_build_config(CONFIG)
    lines = []
    for path in sorted((corpus / "runs").glob("*.jsonl")):
        lines += path.read_text(encoding="utf-8").splitlines()
    random.Random(3).shuffle(lines)
    shuffled = tmp_path / "shuffled"
    (shuffled / "runs").mkdir(parents=True)
    half = len(lines) // 2
    (shuffled / "runs" / "a.jsonl").write_text("\n".join(lines[:half]) + "\n", encoding="utf-8")
    (shuffled / "runs" / "b.jsonl").write_text("\n".join(lines[half:]) + "\n", encoding="utf-8")
    (shuffled / "policy_cases").mkdir()
    for path in sorted((corpus / "policy_cases").glob("*.jsonl")):
        cases = path.read_text(encoding="utf-8").splitlines()
        random.Random(4).shuffle(cases)
        (shuffled / "policy_cases" / path.name).write_text("\n".join(cases) + "\n", encoding="utf-8")
    key = tmp_path / "key"
    key.write_bytes(b"a private pseudonymization key, 32+ bytes long")
    cfg.pseudonym_key_file = str(key)  # the corpus-derived key differs when the bytes differ
    a = build(corpus, tmp_path / "a", cfg, progress=False, allow_unsealed=True)
    b = build(shuffled, tmp_path / "b", cfg, progress=False, allow_unsealed=True)
    for task in TASKS:
        for split in SPLITS:
            rel = f"jsonl/{task}/{split}.jsonl"
            assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel
        assert a["counts"][task] == b["counts"][task]


def test_rebuild_is_byte_identical_and_key_never_written(corpus, tmp_path):
    cfg = load_build_config(CONFIG)
    a = build(corpus, tmp_path / "a", cfg, progress=False, allow_unsealed=True)
    b = build(corpus, tmp_path / "b", cfg, progress=False, allow_unsealed=True)
    assert a["outputs"] == b["outputs"]
    files = sorted((corpus / "runs").glob("*.jsonl")) + sorted((corpus / "policy_cases").glob("*.jsonl"))
    key = corpus_key(files)
    for text in _outputs(tmp_path / "a").values():
        assert key.hex() not in text
    assert a["sanitizer"]["pseudonymization"]["key"] == "derived from the corpus bytes"


def test_reader_inputs_carry_no_verdict_phrases(corpus, tmp_path):
    out = tmp_path / "out"
    build(corpus, out, load_build_config(CONFIG), progress=False, allow_unsealed=True)
    phrase = re.compile(
        r"(?i)(?:verdict|label|ledger\W*(?:check|status))\W{0,3}(?:clean|incident|discrepancy)"
        r"|\b(?:an?|this|security)\s+incident\b|\bdiscrepanc|\bsabotag"
    )
    for task in ("reader_verdict", "writer_action", "writer_memory"):
        for split in SPLITS:
            for row in _rows(out, task, split):
                for m in row["messages"]:
                    if m["role"] == "system" or (task.startswith("reader") and m["role"] == "assistant"):
                        continue
                    assert not phrase.search(m["content"]), (
                        row["id"],
                        m["role"],
                        phrase.search(m["content"]),
                    )


def _pack_texts() -> list[str]:
    from sanitizer.rules import load_packs

    packs = load_packs(["reasoning", "secrets", "leakage"])
    return [ex.text for p in packs for r in p.rules for ex in r.positive + r.negative]


def test_turns_scanned_together_are_sanitized_as_one_by_one():
    """The example-level scan only skips turns: every turn comes out as sanitizing it alone gives."""
    from data_prep.sft.render import laid_out

    scrub = ExampleSanitizer(["reasoning", "secrets", "leakage"], b"turns-key" * 4)
    texts = _pack_texts() + ["Calendar C-1 of Priya Raman", "ordinary text", "V-118 was cited"]
    rng = random.Random(3)
    for _ in range(120):
        turns = rng.sample(texts, 4)
        msgs = [{"role": "system", "content": "You write ledgers."}]
        msgs += [{"role": r, "content": t} for r, t in zip(("user", "assistant"), turns[:2])]
        msgs.append({"role": "user", "content": "\n".join(turns[2:])})
        msgs.append({"role": "assistant", "content": laid_out({"entries": turns, "n": 1})})
        for task in ("writer_action", "reader_verdict"):
            got, findings, _ = scrub.messages(task, msgs, ("V-118",))
            names = scrub.san.person_names([m["content"] for m in msgs[1:]])
            want = [msgs[0]["content"]] + [
                scrub._text(m["content"], f"{task}.{m['role']}", ("V-118",), "", names)[0] for m in msgs[1:]
            ]
            assert [m["content"] for m in got] == want


def test_person_names_of_texts_joined_are_those_of_each_text():
    scrub = ExampleSanitizer(["secrets"], b"names-key" * 4)
    texts = _pack_texts() + ['{"traveler": "Dana Whitfield"}', "Hi Omar Haddad", "Grace Okafor\nRaman"]
    alone = sorted({n for t in texts for n in scrub.san.person_names([t])})
    assert list(scrub.san.person_names(texts)) == alone and "Grace Okafor" in alone
