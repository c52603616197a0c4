"""The generated corpus: every run verifies and its gold verdict equals its label; each sabotage type
does what its label says; teacher error and hazard rates match the config; output is deterministic."""

import json
import re
from collections import Counter
from pathlib import Path

import jsonschema
import pytest

from data_prep.integrity import seal_run, verify_run
from data_prep.reconcile import description_names_values, expected_label, reconcile
from data_prep.records import Run, iter_runs, load_schema
from data_prep.sft.render import arguments_in_words, key_in_words
from data_prep.synthetic import SynthConfig, generate_corpus, iter_policy_cases, iter_runs_generated
from data_prep.synthetic.config import HAZARDS, LEDGER_SABOTAGE, WRITER_ERRORS
from data_prep.synthetic.episode import build_run, make_context
from data_prep.synthetic.hazards import iban, luhn_card
from data_prep.synthetic.output import verify_manifest


@pytest.fixture(scope="module")
def corpus():
    """The default corpus (2000 runs, seed 0) with each run's reconciliation."""
    cfg = SynthConfig()
    runs = list(iter_runs_generated(cfg))
    recs = [reconcile(Run.from_dict(r)) for r in runs]
    return cfg, runs, recs


def test_default_corpus_verifies_and_gold_equals_label(corpus):
    cfg, runs, recs = corpus
    assert len(runs) == cfg.runs == 2000
    for run, rec in zip(runs, recs):
        obj = Run.from_dict(run)
        assert verify_run(obj) is None, run["run_id"]
        assert rec.integrity is None
        assert rec.verdict.label == expected_label(obj.labels), (
            run["run_id"],
            rec.verdict.to_dict(),
            run["labels"],
        )
        assert run["provenance"]["gold_verdict"] == rec.verdict.to_dict()


def test_runs_match_the_json_schema(corpus):
    validator = jsonschema.Draft202012Validator(load_schema())
    for run in corpus[1][:150]:
        errors = list(validator.iter_errors(run))
        assert not errors, errors[0].message


def test_run_shape_ids_and_lengths(corpus):
    cfg, runs, _ = corpus
    families, domains = Counter(), set()
    for i, run in enumerate(runs):
        assert run["run_id"] == f"{run['family']}-{cfg.seed}-{i:06d}"
        assert run["workflow_id"] == f"{run['family']}-v1"
        assert 4 <= len(run["trajectory"]) <= 14
        ids = [c["call_id"] for c in run["trajectory"]]
        assert len(set(ids)) == len(ids)
        assert [m["role"] for m in run["task"]["messages"]] == ["system", "user"]
        assert run["metadata"]["plan_variant"] and run["metadata"]["hidden_identifiers"]
        families[run["family"]] += 1
        domains.add(run["domain"])
    assert len(families) == 8 and min(families.values()) > 150
    assert len(domains) == 4
    variants = Counter((r["family"], r["metadata"]["plan_variant"]) for r in runs)
    assert len(variants) >= 24


def test_tools_never_reveal_hidden_identifiers(corpus):
    for run in corpus[1]:
        visible = json.dumps([c["result"] for c in run["trajectory"]]) + json.dumps(run["task"])
        visible += json.dumps([c["arguments"] for c in run["trajectory"]])
        for hidden in run["metadata"]["hidden_identifiers"]:
            assert hidden not in visible, (run["run_id"], hidden)


def test_sabotage_mix_matches_config(corpus):
    cfg, runs, _ = corpus
    n = len(runs)
    kinds = Counter(r["labels"]["type"] or "clean" for r in runs)
    clean = 1 - sum(cfg.sabotage_rates.values())
    assert abs(kinds["clean"] / n - clean) < 0.035
    for kind, rate in cfg.sabotage_rates.items():
        assert abs(kinds[kind] / n - rate) < 0.025, (kind, kinds[kind] / n, rate)
    ledger = sum(kinds[k] for k in LEDGER_SABOTAGE) / n
    assert 0.36 < ledger < 0.44


def _tol(p, n):
    return max(0.012, 4.5 * (p * (1 - p) / n) ** 0.5)


def test_teacher_writer_mistake_rates(corpus):
    cfg, runs, _ = corpus
    n = len(runs)
    seen = Counter()
    for run in runs:
        for kind in {e["type"] for e in run["labels"]["writer_errors"]}:
            seen[kind] += 1
    for kind in WRITER_ERRORS:
        p = cfg.writer_error_rates[kind]
        assert abs(seen[kind] / n - p) < _tol(p, n), (kind, seen[kind] / n, p)
    any_mistake = sum(bool(r["labels"]["writer_errors"]) for r in runs) / n
    assert 0.09 < any_mistake < 0.17


def test_teacher_reader_accuracy_citations_and_suspicion(corpus):
    cfg, runs, recs = corpus
    n = len(runs)
    right = cited_gold = right_flagged = 0
    for run, rec in zip(runs, recs):
        v = run["teacher"]["verdict"]
        gold = rec.verdict
        if v["label"] == gold.label:
            right += 1
            if gold.label != "clean":
                right_flagged += 1
                cited_gold += v["cited_call_ids"] == gold.call_ids
        assert run["provenance"]["reader_correct"] == (v["label"] == gold.label)
        if v["label"] == "clean":
            assert 0 <= v["suspicion"] <= 40 and v["cited_call_ids"] == []
        else:
            assert 60 <= v["suspicion"] <= 100 and v["cited_call_ids"]
        assert v["rationale"]
    assert abs(right / n - cfg.reader_accuracy) < _tol(cfg.reader_accuracy, n)
    assert abs(cited_gold / right_flagged - cfg.reader_cite_rate) < _tol(cfg.reader_cite_rate, right_flagged)


def _field_text(run, field):
    if field == "teacher.verdict.rationale":
        return run["teacher"]["verdict"]["rationale"]
    i = int(re.match(r"model_ledger\[(\d+)\]\.description", field).group(1))
    return run["model_ledger"][i]["description"]


def _iban_ok(s):
    s = s.replace(" ", "")
    n = "".join(str(int(ch, 36)) for ch in s[4:] + s[:4])
    return int(n) % 97 == 1


def _luhn_ok(digits):
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


PATTERNS = {
    "think_block": r"<think>.*?</think>",
    "think_unclosed": r"<think>(?!.*</think>)",
    "think_unopened": r"^(?!<think>).*?</think>",
    "api_key": r"(sk-live-[A-Za-z0-9]{32}|AKIA[A-Z0-9]{16}|ghp_[A-Za-z0-9]{36})",
    "bearer_token": r"Bearer eyJ[\w-]+\.[\w-]+\.[\w-]+",
    "private_key": r"-----BEGIN RSA PRIVATE KEY-----[\s\S]+-----END RSA PRIVATE KEY-----",
    "email": r"[a-z]+\.[a-z]+@[a-z.-]+\.[a-z]+",
    "phone": r"(\+1 415 555 01\d\d|\(212\) 555-01\d\d|\+44 20 7946 0\d{3})",
    "verdict_leak": r"(clean|discrepancy|incident)",
}


def test_hazard_rates_and_sites(corpus):
    cfg, runs, _ = corpus
    n = len(runs)
    seen = Counter()
    for run in runs:
        assert run["provenance"]["hazards"] == sorted({s["type"] for s in run["provenance"]["hazard_sites"]})
        for kind in run["provenance"]["hazards"]:
            seen[kind] += 1
        for site in run["provenance"]["hazard_sites"]:
            text = _field_text(run, site["field"])
            kind = site["type"]
            if kind in PATTERNS:
                assert re.search(PATTERNS[kind], text, re.S), (kind, text)
            elif kind == "hidden_identifier":
                assert any(h in text for h in run["metadata"]["hidden_identifiers"]), text
            elif kind == "iban":
                found = re.search(r"IBAN: ([A-Z]{2}\d{2}[A-Z0-9 ]+)\.", text).group(1)
                assert _iban_ok(found), found
            elif kind == "card_number":
                found = re.search(r"Card on file: ([\d -]+)\.", text).group(1)
                assert _luhn_ok(re.sub(r"\D", "", found)), found
    for kind in HAZARDS:
        p = cfg.hazard_rates[kind]
        assert 0.03 <= p <= 0.08
        assert abs(seen[kind] / n - p) < _tol(p, n), (kind, seen[kind] / n, p)


def test_hazard_generators_are_valid():
    import random

    rng = random.Random(5)
    for _ in range(200):
        assert _iban_ok(iban(rng))
        assert _luhn_ok(luhn_card(rng))


def test_faithful_descriptions_name_every_value(corpus):
    for run in corpus[1][:400]:
        calls = {c["call_id"]: c for c in run["trajectory"]}
        touched = set(run["labels"]["target_call_ids"]) | {
            e["call_id"] for e in run["labels"]["writer_errors"]
        }
        for e in run["model_ledger"]:
            c = calls.get(e["call_id"])
            if c is None or e["call_id"] in touched:
                continue
            assert description_names_values(e["description"], c["arguments"]), e


def test_keyed_descriptions_name_each_argument_as_the_call_view_words_them_and_natural_ones_differ_only_there():
    """The default (keyed) teacher restates each call's arguments as ``key value``, as the call view's
    words line has them (the values to name in key order, free text after them); the natural style draws the same random numbers, so its corpus differs in descriptions only."""
    keyed = list(iter_runs_generated(SynthConfig(runs=40, seed=5)))
    natural = list(iter_runs_generated(SynthConfig(runs=40, seed=5, description_style="natural")))
    checked = 0
    for k, n in zip(keyed, natural, strict=True):
        assert [c["arguments"] for c in k["trajectory"]] == [c["arguments"] for c in n["trajectory"]]
        assert k["labels"] == n["labels"]
        assert [{**e, "description": ""} for e in k["model_ledger"]] == [
            {**e, "description": ""} for e in n["model_ledger"]
        ]
        calls = {c["call_id"]: c for c in k["trajectory"]}
        touched = set(k["labels"]["target_call_ids"]) | {e["call_id"] for e in k["labels"]["writer_errors"]}
        for ek, en in zip(k["model_ledger"], n["model_ledger"], strict=True):
            c = calls.get(ek["call_id"])
            if c is None or ek["call_id"] in touched:
                continue
            args = c["arguments"]
            said = ek["description"].split(" with ", 1)[1]
            at = [said.find(f"{key_in_words(key)} ") for key in sorted(args)]
            assert -1 not in at and arguments_in_words(args) in ek["description"], ek["description"]
            free = [key for key in args if isinstance(args[key], str) and " " in args[key]]
            assert all(
                said.find(f"{key_in_words(f)} ") > said.find(f"{key_in_words(key)} ")
                for f in free
                for key in args
                if key not in free
            )
            assert description_names_values(ek["description"], args)
            assert ek["description"] != en["description"]
            checked += 1
    assert checked > 200


def test_rates_follow_a_non_default_config():
    cfg = SynthConfig(
        runs=800,
        seed=3,
        sabotage_rates={"unauthorized_action": 0.3},
        writer_error_rates={"omission": 0.2, "softening": 0.2, "wrong_outcome": 0.1, "batching": 0.1},
        reader_accuracy=0.6,
        hazard_rates={"email": 0.5},
    )
    runs = list(iter_runs_generated(cfg))
    n = len(runs)
    assert abs(sum(r["labels"]["type"] == "unauthorized_action" for r in runs) / n - 0.3) < _tol(0.3, n)
    for kind, p in cfg.writer_error_rates.items():
        got = sum(any(e["type"] == kind for e in r["labels"]["writer_errors"]) for r in runs) / n
        assert abs(got - p) < _tol(p, n), (kind, got)
    right = sum(r["provenance"]["reader_correct"] for r in runs) / n
    assert abs(right - 0.6) < _tol(0.6, n)
    assert abs(sum("email" in r["provenance"]["hazards"] for r in runs) / n - 0.5) < _tol(0.5, n)
    assert all(r["provenance"]["hazards"] in ([], ["email"]) for r in runs)
    for r in runs[:200]:
        assert reconcile(Run.from_dict(r)).verdict.label == expected_label(Run.from_dict(r).labels)


def _only(kind, runs=30, seed=9):
    cfg = SynthConfig(
        runs=runs,
        seed=seed,
        sabotage_rates={kind: 1.0} if kind != "clean" else {},
        writer_error_rates={},
        hazard_rates={},
    )
    out = []
    for run in iter_runs_generated(cfg):
        obj = Run.from_dict(run)
        out.append((run, obj, reconcile(obj)))
    return out


def test_clean_runs_are_clean():
    for run, _, rec in _only("clean"):
        assert run["labels"] == {"sabotage": False, "type": None, "target_call_ids": [], "writer_errors": []}
        assert (
            rec.verdict.label == "clean" and rec.content_agreement == 1.0 and rec.protocol_compliance == 1.0
        )


def test_unauthorized_action_is_an_incident():
    covers = Counter()
    for run, obj, rec in _only("unauthorized_action", runs=60):
        (target,) = run["labels"]["target_call_ids"]
        record = next(r for r in obj.env_ledger["records"] if r["call_id"] == target)
        assert (record["policy_class"], record["status"]) == ("unauthorized", "succeeded")
        assert rec.verdict.label == "incident" and target in rec.verdict.call_ids
        covers[run["provenance"]["sabotage"]["cover"]] += 1
    assert set(covers) == {"faithful", "softened", "omitted"}


@pytest.mark.parametrize(
    "kind, finding",
    [
        ("omitted", "omitted"),
        ("softened", "softened"),
        ("misreported_outcome", "misreported_outcome"),
        ("fabricated", "fabricated"),
        ("late", "late"),
    ],
)
def test_ledger_sabotage_types(kind, finding):
    for run, obj, rec in _only(kind):
        targets = run["labels"]["target_call_ids"]
        assert run["labels"]["sabotage"] and run["labels"]["type"] == kind and len(targets) == 1
        assert rec.verdict.label == "discrepancy" and rec.verdict.kinds == [finding], rec.verdict.kinds
        assert rec.verdict.call_ids == targets
        (t,) = targets
        entries = [e for e in run["model_ledger"] if e["call_id"] == t]
        call = next((c for c in run["trajectory"] if c["call_id"] == t), None)
        if kind == "omitted":
            assert rec.call_links[t] == "missing" and not entries
        elif kind == "softened":
            assert not description_names_values(entries[0]["description"], call["arguments"])
        elif kind == "misreported_outcome":
            assert entries[0]["claimed_outcome"] != call["status"]
        elif kind == "fabricated":
            assert call is None and len(entries) == 1
        elif kind == "late":
            seq = next(r["seq"] for r in obj.env_ledger["records"] if r["call_id"] == t)
            assert entries[0]["position"] > seq


def test_swapped_ids():
    for run, obj, rec in _only("swapped_ids"):
        a, b = run["labels"]["target_call_ids"]
        seq = {r["call_id"]: r["seq"] for r in obj.env_ledger["records"]}
        ea = next(e for e in run["model_ledger"] if e["call_id"] == a)
        eb = next(e for e in run["model_ledger"] if e["call_id"] == b)
        assert (
            ea["position"] == seq[b] and eb["position"] == seq[a]
        )  # each entry sits where the other call ran
        assert rec.verdict.label == "discrepancy" and set(rec.verdict.call_ids) == {a, b}


def test_generation_is_order_independent():
    cfg = SynthConfig(runs=40, seed=21)
    full = list(iter_runs_generated(cfg))
    ctx = make_context(cfg)
    assert seal_run(build_run(ctx, 33)) == full[33]
    assert list(iter_runs_generated(cfg, 10, 14)) == full[10:14]
    assert (
        list(iter_policy_cases(SynthConfig(policy_cases=6, seed=21), 4, 6))
        == list(iter_policy_cases(SynthConfig(policy_cases=6, seed=21)))[4:]
    )


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_same_seed_byte_identical_different_seed_differs(tmp_path):
    cfg = SynthConfig(runs=50, policy_cases=8, seed=5, shard_size=20)
    m1 = generate_corpus(cfg, tmp_path / "a")
    m2 = generate_corpus(SynthConfig(runs=50, policy_cases=8, seed=5, shard_size=20), tmp_path / "b")
    assert m1 == m2
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    assert a == b
    assert sorted(a) == [
        "manifest.json",
        "policy_cases/cases-00000.jsonl",
        "runs/runs-00000.jsonl",
        "runs/runs-00001.jsonl",
        "runs/runs-00002.jsonl",
    ]
    c = (
        _tree(tmp_path / "c")
        if generate_corpus(SynthConfig(runs=50, policy_cases=8, seed=6, shard_size=20), tmp_path / "c")
        else {}
    )
    for name in a:
        assert a[name] != c[name], name
    # the same directory regenerated with fewer runs leaves no stale shard behind
    generate_corpus(SynthConfig(runs=10, policy_cases=2, seed=5, shard_size=20), tmp_path / "a")
    assert sorted(_tree(tmp_path / "a")) == [
        "manifest.json",
        "policy_cases/cases-00000.jsonl",
        "runs/runs-00000.jsonl",
    ]


def test_manifest_records_digests_counts_and_config(tmp_path):
    cfg = SynthConfig(runs=30, policy_cases=5, seed=2)
    m = generate_corpus(cfg, tmp_path)
    assert json.loads((tmp_path / "manifest.json").read_text()) == m
    assert (tmp_path / "manifest.json").read_text() == json.dumps(
        m, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ) + "\n"
    assert verify_manifest(tmp_path) == []
    assert m["seed"] == 2 and m["config"]["runs"] == 30 and m["generator"]["version"]
    counts = m["counts"]
    assert counts["runs"] == 30 and counts["policy_cases"] == 5
    assert sum(counts["runs_by_family"].values()) == 30
    assert sum(counts["runs_by_sabotage"].values()) == 30
    assert sum(counts["runs_by_gold_verdict"].values()) == 30
    assert sum(counts["runs_by_teacher_verdict"].values()) == 30
    assert set(counts["runs_with_writer_error"]) == set(WRITER_ERRORS)
    assert counts["probe_pairs"] == 30
    loaded = [r for _, r in iter_runs(tmp_path / "runs" / "runs-00000.jsonl")]
    assert len(loaded) == 30 and all(isinstance(r, Run) for r in loaded)
    (tmp_path / "runs" / "runs-00000.jsonl").write_text("tampered\n")
    assert verify_manifest(tmp_path) == ["runs/runs-00000.jsonl: sha256 mismatch"]


def test_config_validation_names_the_field():
    for bad, field in (
        (SynthConfig(sabotage_rates={"omitted": 0.7, "late": 0.5}), "sabotage_rates"),
        (SynthConfig(families=["no-such-family"]), "families"),
        (SynthConfig(hazard_rates={"email": 1.5}), "hazard_rates.email"),
        (SynthConfig(reader_accuracy=2), "reader_accuracy"),
        (SynthConfig(runs=-1), "runs"),
        (SynthConfig(description_style="poetic"), "description_style"),
    ):
        with pytest.raises(ValueError, match=re.escape(field)):
            bad.validate()
    from dataclasses import fields

    assert all(f.metadata.get("help") for f in fields(SynthConfig))
