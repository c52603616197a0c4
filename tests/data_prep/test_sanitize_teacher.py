"""The teacher collector's own diagnostics are sanitized as the build's are: a record it quarantines
names the file, line and field, never the secret or the personal data in it."""

from __future__ import annotations

import json
from pathlib import Path

from data_prep.synthetic import SynthConfig, generate_corpus
from data_prep.teacher_client.collect import CollectConfig, collect

KEY = "AKIAZ7Q2MV4XK3PLW9RD"
EMAIL = "jane.roe@acme-corp.io"


def test_collector_rejects_and_manifest_hold_no_secret(tmp_path):
    src = tmp_path / "synth"
    generate_corpus(SynthConfig(runs=2, policy_cases=0, seed=3), src, progress=False)
    first = (sorted((src / "runs").glob("*.jsonl"))[0]).read_text().splitlines()[0]
    bad_value = json.loads(first)
    bad_value["trajectory"][0]["status"] = f"done {KEY} {EMAIL}"
    bad_key = json.loads(first)
    bad_key["run_id"] = "other"
    bad_key["trajectory"][0][f"{KEY}_{EMAIL}"] = 1
    corpus = tmp_path / "corpus"
    (corpus / "runs").mkdir(parents=True)
    (corpus / "runs" / "runs-00000.jsonl").write_text(
        json.dumps(bad_value) + "\n" + json.dumps(bad_key) + "\n" + f'{{"{KEY}": "{EMAIL}"\n'
    )
    out = tmp_path / "out"
    # every record is quarantined, so the (unreachable) endpoint is never asked
    cfg = CollectConfig(
        endpoint=f"http://user:{KEY}@127.0.0.1:9/v1", model="teacher-x", allow_unsealed=True, concurrency=1
    )
    manifest, _session = collect(corpus, out, cfg, progress=False, environ={})
    assert manifest["counts"]["runs"]["quarantined"] == 3
    rejects = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(r["source"], r["line"]) for r in rejects] == [("runs/runs-00000.jsonl", n) for n in (1, 2, 3)]
    assert rejects[0]["field"].startswith("$.trajectory[0]")
    for path in Path(out).rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            assert KEY not in text and EMAIL not in text, path.name
