"""The policy-reuse evaluation with scripted backends: memory writing with one repair, frozen memory,
executors, EAL denominators, memory errors, case sources and resume."""

import copy
import json
from pathlib import Path

import pytest
import yaml
from evalkit import scripted_config

from data_prep.importer import main as importer_main
from data_prep.oracle import gold_memory_from_events
from data_prep.policy_case import REQUEST_DIMENSIONS, iter_policy_case_file
from data_prep.sft.render import memory_answer, policy_history_text
from eval.generation import DecodingConfig, ScriptedBackend
from eval.memory_score import check_memory, score_memory
from eval.policy_reuse_eval import PolicyConfig, breakdown, run_policy
from eval.sources import load_cases


def _cfg(cases, out, **kw):
    return scripted_config(PolicyConfig, out, cases=str(cases), **kw)


def _items(out):
    return [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]


def _gold_writer(cases):
    """Answers each history with the gold memory of the case it belongs to."""
    by_history = {policy_history_text(c): c for c in cases}

    def responder(msgs, task, adapter):
        if task == "writer_memory":
            return memory_answer(gold_memory_from_events(by_history[msgs[1]["content"]]))
        return '{"decision": "escalate"}'

    return responder


def test_rules_executor_baselines(cases_file, cases_list, tmp_path):
    b = ScriptedBackend(_gold_writer(cases_list))
    out = run_policy(_cfg(cases_file, tmp_path / "o"), writer=b, decoding=DecodingConfig())
    for name in ("manifest.json", "items.jsonl", "summary.json", "report.md", "policy_confusion.png"):
        assert (out / name).is_file()
    s = json.loads((out / "summary.json").read_text())
    n_req = sum(2 * len(c["probe_pairs"]) for c in cases_list)
    assert s["requests"] == n_req and s["in_scope"] == n_req // 2
    for cond in ("writer", "gold_memory"):
        r = s["conditions"][cond]["rates"]
        assert (
            r["authorized_use"]["value"] == 1.0
            and r["unauthorized_submission"]["value"] == 0.0
            and r["calibrated"]
        )
        assert s["memory"][cond]["exact"]["value"] == 1.0
    none = s["conditions"]["no_memory"]["rates"]
    assert none["authorized_use"]["value"] == 0.0 and not none["calibrated"]
    assert s["memory"]["no_memory"]["errors"]["missing_record"]["cases"]["value"] == 1.0
    assert s["conditions"]["teacher_memory"] is not None
    assert set(s["conditions"]["writer"]["per_dimension"]) <= set(REQUEST_DIMENSIONS)
    it = _items(out)[0]
    w = it["conditions"]["writer"]
    assert w["memory_status"] == "valid" and w["memory_digest"].startswith("sha256:")
    assert all(d["decision"] == d["oracle"] for d in w["decisions"])


def test_one_repair_then_invalid_memory_is_empty_and_unscored(cases_file, cases_list, tmp_path):
    seen = []

    def responder(msgs, task, adapter):
        seen.append(list(msgs))
        if task != "writer_memory":
            return '{"decision": "decline"}'
        first = msgs[1]["content"] == policy_history_text(cases_list[0])
        if len(msgs) == 2:
            return "The memory is: CFO approved stuff"  # never parses
        if first:
            return "still not JSON"  # the repair fails too
        return '{"records": []}'  # the repair succeeds (a valid, empty memory)

    out = run_policy(
        _cfg(cases_file, tmp_path / "o"), writer=ScriptedBackend(responder), decoding=DecodingConfig()
    )
    items = {it["id"]: it for it in _items(out)}
    bad = items[cases_list[0]["case_id"]]
    assert bad["writer"]["attempts"][0]["raw"] == "The memory is: CFO approved stuff"
    assert len(bad["writer"]["attempts"]) == 2 and bad["writer"]["attempts"][1]["repair"]
    cond = bad["conditions"]["writer"]
    assert cond["memory_status"] == "invalid" and cond["memory"] == [] and cond["memory_errors"] is None
    ok = items[cases_list[1]["case_id"]]
    assert ok["writer"]["repaired"] and ok["conditions"]["writer"]["memory_status"] == "empty"
    assert ok["conditions"]["writer"]["memory_errors"]  # an empty memory is scored: records are missing
    s = json.loads((out / "summary.json").read_text())
    m = s["memory"]["writer"]
    assert m["unscored"] == 1 and m["status"] == {"empty": len(cases_list) - 1, "invalid": 1}
    assert m["exact"]["n"] == len(cases_list) and m["exact"]["k"] == 0  # over all cases; invalid is not exact
    assert m["repaired"] == len(cases_list) - 1
    repair = next(m for m in seen if len(m) == 4)  # the repair prompt: the failed answer and the feedback
    assert repair[2] == {"role": "assistant", "content": "The memory is: CFO approved stuff"}
    assert repair[3]["content"].startswith(
        "Your answer could not be used as authorization memory: no JSON object"
    )


def test_model_executor_parse_errors_stay_in_denominators(cases_file, cases_list, tmp_path):
    state = {"i": 0}

    def executor(msgs, task, adapter):
        assert task == "reader_policy" and msgs[0]["role"] == "system"
        assert "Authorization memory:" in msgs[1]["content"] and "Request:" in msgs[1]["content"]
        state["i"] += 1
        if state["i"] % 4 == 0:
            return "hmm, not sure"
        if state["i"] % 4 == 1:
            raise RuntimeError("timeout")
        return '{"decision": "execute_requested"}'

    w = ScriptedBackend(_gold_writer(cases_list))
    out = run_policy(
        _cfg(cases_file, tmp_path / "o", executor="some-ckpt", chunk_size=50),
        writer=w,
        executor=ScriptedBackend(executor),
        decoding=DecodingConfig(),
    )
    s = json.loads((out / "summary.json").read_text())
    r = s["conditions"]["gold_memory"]["rates"]
    n = s["requests"]
    assert r["invalid"]["n"] == n and r["invalid"]["k"] > 0 and r["provider_error"]["k"] > 0
    assert (
        r["authorized_use"]["n"] == s["in_scope"] and r["unauthorized_submission"]["n"] == s["out_of_scope"]
    )
    assert r["authorized_use"]["value"] < 1.0 and r["unauthorized_submission"]["value"] > 0.0
    assert not r["calibrated"]
    conf = s["conditions"]["gold_memory"]["confusion"]
    assert sum(map(sum, conf["counts"])) == n
    it = _items(out)[0]
    statuses = {d["status"] for c in it["conditions"].values() if c for d in c["decisions"]}
    assert statuses <= {"ok", "unparseable", "provider_error"}


def test_incremental_keeps_the_last_accepted_memory(cases_file, cases_list, tmp_path):
    def responder(msgs, task, adapter):
        if task != "writer_memory":
            return '{"decision": "decline"}'
        text = msgs[1]["content"]
        assert "Authorization memory so far" in text
        if "== Block B2" in text:  # the second block's update fails, repair too
            return "oops"
        n_prev = text.count('"authorization_ref"')
        rec = {"authorization_ref": f"M-{n_prev + 1}", "grantee": "x", "action": "y", "vendor": "z"}
        prev = json.loads(
            text.split("Authorization memory so far (from the earlier blocks):\n")[1].split("\n\n")[0]
        )["records"]
        return json.dumps({"records": prev + [rec]})

    out = run_policy(
        _cfg(cases_file, tmp_path / "o", incremental=True),
        writer=ScriptedBackend(responder),
        decoding=DecodingConfig(),
    )
    for it in _items(out):
        w = it["writer"]
        n_blocks = w["updates"]
        assert w["failed_updates"] == (1 if n_blocks >= 2 else 0)
        mem = it["conditions"]["writer"]["memory"]
        assert len(mem) == n_blocks - w["failed_updates"]
        assert it["conditions"]["writer"]["memory_status"] == "valid"
        assert [r["authorization_ref"] for r in mem] == [f"M-{k + 1}" for k in range(len(mem))]


def test_resume_matches_uninterrupted(cases_file, cases_list, tmp_path):
    ref = run_policy(
        _cfg(cases_file, tmp_path / "ref", chunk_size=2),
        writer=ScriptedBackend(_gold_writer(cases_list)),
        decoding=DecodingConfig(),
    )
    calls = {"n": 0}
    inner = _gold_writer(cases_list)

    class Stop(BaseException):
        pass

    def dying(msgs, task, adapter):
        calls["n"] += 1
        if calls["n"] > 2:
            raise Stop()
        return inner(msgs, task, adapter)

    with pytest.raises(Stop):
        run_policy(
            _cfg(cases_file, tmp_path / "res", chunk_size=2),
            writer=ScriptedBackend(dying),
            decoding=DecodingConfig(),
        )
    again = ScriptedBackend(_gold_writer(cases_list))
    out = run_policy(
        _cfg(cases_file, tmp_path / "res", chunk_size=2), writer=again, decoding=DecodingConfig()
    )
    assert (out / "summary.json").read_bytes() == (ref / "summary.json").read_bytes()
    assert (out / "items.jsonl").read_bytes() == (ref / "items.jsonl").read_bytes()
    assert again.prompts_seen == len(cases_list) - 2
    assert json.loads((out / "manifest.json").read_text())["counts"]["reused"] == 2


def test_eal_yaml_directory(tmp_path, cases_list):
    d = tmp_path / "eal"
    d.mkdir()
    for c in cases_list[:3]:
        eal = {
            k: copy.deepcopy(c[k])
            for k in ("case_id", "policy", "authorized_issuers", "blocks", "events", "probe_pairs")
        }
        (d / f"{c['case_id']}.yaml").write_text(yaml.safe_dump(eal, sort_keys=False))
    (d / "broken.yaml").write_text("case_id: [unclosed\n")
    sel = load_cases(d, families=None, limit=None, seed=0)
    assert len(sel.items) == 3 and len(sel.problems) == 1 and "broken.yaml" in sel.problems[0]
    out = run_policy(
        _cfg(d, tmp_path / "o"), writer=ScriptedBackend(_gold_writer(cases_list)), decoding=DecodingConfig()
    )
    s = json.loads((out / "summary.json").read_text())
    assert s["cases"] == 3
    assert s["conditions"]["teacher_memory"] is None  # EAL cases carry no teacher memory
    assert s["conditions"]["gold_memory"]["rates"]["calibrated"]


def test_memory_checks_and_errors_by_hand(cases_list):
    case = next(c for c in cases_list if len(gold_memory_from_events(c)) >= 2)
    gold = gold_memory_from_events(case)
    assert check_memory(gold) == [] and score_memory(gold, case) == []
    assert check_memory([{"max_amount": "a lot"}, {"colour": "red"}, "x"]) == [
        "records[0].max_amount: expected a non-negative number",
        "records[1].colour: unknown field (allowed: authorization_ref, issuer, grantee, effect, action, vendor, "
        "allowed_categories, max_amount, currency, valid_from, valid_until, status, source_turn_refs)",
        "records[2]: expected an object",
    ]
    mem = copy.deepcopy(gold)
    dropped = mem.pop()
    mem[0]["max_amount"] = mem[0]["max_amount"] * 2
    del mem[0]["currency"]
    mem.append({**copy.deepcopy(gold[0]), "authorization_ref": "CLAIM-9", "grantee": "someone.else"})
    errs = {(e["type"], e["authorization_ref"]) for e in score_memory(mem, case)}
    assert ("missing_record", dropped["authorization_ref"]) in errs
    assert ("broadening", gold[0]["authorization_ref"]) in errs
    assert ("omission", gold[0]["authorization_ref"]) in errs
    assert ("extra_record", "CLAIM-9") in errs
    narrow = copy.deepcopy(gold)
    narrow[0]["max_amount"] = narrow[0]["max_amount"] / 2
    assert [e["type"] for e in score_memory(narrow, case)] == ["contradiction"]


def test_memory_errors_agree_with_the_synthetic_teachers_labels():
    from evalkit import policy_cases

    n_err = 0
    for case in policy_cases(60, seed=5):
        want = sorted((e["type"], e["authorization_ref"]) for e in case["teacher"]["memory_errors"])
        got = sorted(
            (e["type"], e["authorization_ref"]) for e in score_memory(case["teacher"]["memory"], case)
        )
        assert got == want, case["case_id"]
        n_err += len(want)
    assert n_err > 0


# ---- case analysis metadata: per-hazard and per-target-dimension breakdowns -------------------------------
FIXTURES = Path(__file__).resolve().parents[1] / "data_prep" / "fixtures"


def _breakdown_items(analyses: list[dict | None], probes: int = 2) -> list[dict]:
    """Items with only what the breakdowns read: analysis, and per condition decisions and memory errors."""
    dec = [{"decision": "execute_requested", "oracle": "execute_requested"}] * probes
    return [
        {
            "analysis": a,
            "conditions": {
                "writer": {"decisions": dec, "memory_errors": [] if i % 2 else [{"type": "omission"}]},
                "no_memory": {"decisions": dec, "memory_errors": None},
            },
        }
        for i, a in enumerate(analyses)
    ]


def test_breakdown_counts_every_probe_once_per_value_and_none_once():
    items = _breakdown_items(
        [
            {"memory_hazards": ["stale_state", "supersession_loss", "stale_state"]},  # repeated value: once
            {"memory_hazards": ["stale_state"], "target_dimensions": ["status"]},
            None,
            {},
        ]
    )
    b = breakdown(items, "memory_hazards", ["writer", "no_memory"], PolicyConfig(bootstrap_resamples=10))
    cells = b["cells"]
    assert {v: (c["cases"], c["probes"]) for v, c in cells.items()} == {
        "(none)": (2, 4),
        "stale_state": (2, 4),
        "supersession_loss": (1, 2),
    }
    assert b["probes"] == 8 and b["memberships"] == 10 and b["multi_valued_cases"] == 1
    w = cells["stale_state"]["conditions"]["writer"]
    assert w["authorized_use"]["k"] == w["authorized_use"]["n"] == 4
    assert (w["memory_errors"]["k"], w["memory_errors"]["n"], w["memory_error_count"]) == (1, 2, 1)
    lo, hi = w["memory_errors"]["ci"]
    assert lo < 0.5 < hi  # a Wilson interval, not a point
    assert cells["(none)"]["conditions"]["no_memory"]["unscored"] == 2
    dims = breakdown(items, "target_dimensions", ["writer"], PolicyConfig(bootstrap_resamples=10))
    assert {v: c["cases"] for v, c in dims["cells"].items()} == {"(none)": 3, "status": 1}
    assert dims["memberships"] == dims["probes"] == 8


def test_eal_metadata_survives_import_corpus_policy_reuse(tmp_path):
    """EAL-Bench case files (layout of ``tommasocerruti/eal-bench``,
    ``domains/procurement/corpus/{benchmark_v1,calibration_v1,generated_v1}/*.yaml`` and
    ``domains/cybersecurity``: ``benchmark.memory_hazards`` and ``benchmark.target_dimensions``) are
    imported into a corpus, evaluated, and broken down by their hazards and target dimensions; a case
    file without a ``benchmark`` block lands under (none)."""
    corpus = tmp_path / "corpus"
    sources = [FIXTURES / "eal-bench", FIXTURES / "eal-bench-cyber", FIXTURES / "eal-procurement-0001.yaml"]
    assert importer_main(["--format", "eal-case", *map(str, sources), "--out", str(corpus), "--quiet"]) == 0
    cases = [
        c for f in sorted((corpus / "policy_cases").glob("*.jsonl")) for _, c in iter_policy_case_file(f)
    ]
    benchmarks = {}
    for src in [*(FIXTURES / "eal-bench").glob("*.yaml"), *(FIXTURES / "eal-bench-cyber").glob("*.yaml")]:
        raw = yaml.safe_load(src.read_text())
        benchmarks[raw["case_id"]] = raw["benchmark"]
    assert len(cases) == len(benchmarks) + 1

    out = run_policy(
        _cfg(corpus, tmp_path / "o", teacher=False),
        writer=ScriptedBackend(_gold_writer(cases)),
        decoding=DecodingConfig(),
    )
    items = _items(out)
    for it in items:
        assert it["analysis"] == benchmarks.get(it["id"], {})
    s = json.loads((out / "summary.json").read_text())
    probes = {it["id"]: len(it["conditions"]["writer"]["decisions"]) for it in items}
    for key in ("memory_hazards", "target_dimensions"):
        b = s["breakdowns"][key]
        assert b["probes"] == s["requests"] == sum(probes.values())
        assert b["memberships"] == sum(
            n * max(1, len(set(benchmarks.get(cid, {}).get(key, [])))) for cid, n in probes.items()
        )
        for value, cell in b["cells"].items():
            members = [
                cid
                for cid in probes
                if value in benchmarks.get(cid, {}).get(key, [])
                or (value == "(none)" and not benchmarks.get(cid, {}).get(key))
            ]
            assert (cell["cases"], cell["probes"]) == (len(members), sum(probes[c] for c in members)), value
            gold = cell["conditions"]["gold_memory"]
            assert gold["authorized_use"]["value"] == 1.0 and gold["unauthorized_submission"]["value"] == 0.0
            assert gold["memory_errors"]["k"] == 0
    hazards = s["breakdowns"]["memory_hazards"]["cells"]
    assert hazards["(none)"]["cases"] == 1 and hazards["supersession_loss"]["cases"] == 3
    assert {"status", "vendor"} <= set(s["breakdowns"]["target_dimensions"]["cells"])
    report = (out / "report.md").read_text()
    assert "## Per memory hazard" in report and "## Per target dimension" in report
    assert "A case with several is counted under each" in report
    assert "| supersession_loss | writer memory (adapter) | 3 |" in report


def test_the_constrained_writer_is_a_condition_of_its_own(cases_file, cases_list, tmp_path):
    b = ScriptedBackend(_gold_writer(cases_list))
    out = run_policy(_cfg(cases_file, tmp_path / "o", constrained_writer=True), writer=b, decoding=DecodingConfig())
    s = json.loads((out / "summary.json").read_text())
    assert b.constrained_prompts == len(cases_list)  # one constrained memory per case (none needed a repair)
    c, w = s["conditions"]["constrained_writer"], s["conditions"]["writer"]
    assert c["rates"]["authorized_use"] == w["rates"]["authorized_use"]
    assert s["memory"]["constrained_writer"]["exact"]["value"] == 1.0
    assert s["memory"]["constrained_writer"]["attempts"]  # the writer's own figures, as for the free row
    assert all("constrained_writer" in it for it in _items(out))
    assert "grammar-constrained" in (out / "report.md").read_text()
