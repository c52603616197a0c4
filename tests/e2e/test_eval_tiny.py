"""End to end: tiny checkpoints made by the Train recipe, then both evaluation scripts on a few held-out
items, including unparseable outputs (a barely trained tiny model writes mostly garbage) and a run that
is killed part-way and resumed with the same arguments.

Everything is built in a temporary cache: a small synthetic corpus, its SFT build (whose manifest names
the held-out families), a 2-layer tiny base, and a writer and a reader trained for one step each.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from interrupt import kill_after_lines
from tiny_settings import TEST_TINY as TINY

REPO = Path(__file__).resolve().parents[2]
ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "WANDB_MODE": "offline",
}

pytestmark = pytest.mark.slow


def _run(args: list[str], timeout: int = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, *args], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, (
        f"{args[0]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    )
    return proc


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    if not (REPO / "train" / "recipe.py").is_file():
        pytest.skip("train/recipe.py is absent: no tiny checkpoints can be trained")
    from data_prep.sft.config import DEFAULT_CONFIG, load_build_config
    from data_prep.sft.pipeline import build
    from data_prep.synthetic import SynthConfig, generate_corpus

    root = tmp_path_factory.mktemp("evalworld")
    cache = root / "cache"
    generate_corpus(SynthConfig(runs=60, policy_cases=20, seed=3), cache / "corpus", progress=False)
    # a larger validation share keeps every split of this small build non-empty
    build(
        cache / "corpus",
        cache / "sft",
        load_build_config(DEFAULT_CONFIG, {"validation_fraction": 0.25}),
        progress=False,
    )
    tiny = [a for k, v in TINY.items() for a in (f"--tiny-{k.replace('_', '-')}", str(v))]
    common = ["--data-dir", str(cache / "sft"), "--cache-dir", str(cache), "--task", "both", "--max-steps", "1",
              "--examples", "8", "--eval-examples", "2", "--parse-check-examples", "0", "--attn-implementation", "sdpa",
              "--num-threads", "2", "--max-length", "512", *tiny]  # fmt: skip
    _run(["train/writer.py", "--output-dir", str(root / "ckpt"), *common])
    _run(["train/reader.py", "--output-dir", str(root / "ckpt-reader"), *common])
    decoding = root / "decoding.yaml"
    decoding.write_text(
        "batch_size: 4\nthreads: 1\n"
        "max_new_tokens: {writer_action: 20, reader_verdict: 24, writer_memory: 32, reader_policy: 8}\n"
    )
    return {
        "root": root,
        "cache": cache,
        "writer": root / "ckpt",
        "reader": root / "ckpt-reader",
        "decoding": decoding,
    }


def _sabotage_args(w, out: Path) -> list[str]:
    return ["eval/sabotage.py", "--writer", str(w["writer"]), "--reader", str(w["reader"]), "--cache-dir", str(w["cache"]),
            "--limit", "4", "--chunk-size", "1", "--decoding", str(w["decoding"]), "--bootstrap-resamples", "100",
            "--out", str(out)]  # fmt: skip


def test_sabotage_eval_on_tiny_checkpoints_with_resume(world):
    root = world["root"]
    ref = root / "sab-ref"
    proc = _run([*_sabotage_args(world, ref), "--workers", "2"])
    assert "4 chunks on 2 worker processes" in proc.stderr
    assert "AUROC" in proc.stdout and "sabotage eval: wrote" in proc.stdout
    assert "sabotage eval" in proc.stderr  # the progress bar (items/s) goes to stderr
    s = json.loads((ref / "summary.json").read_text())
    assert s["items"] == 4
    held = {
        f
        for f, split in json.loads((world["cache"] / "sft" / "manifest.json").read_text())[
            "split_assignment"
        ]["workflow_families"].items()
        if split == "heldout"
    }
    assert set(s["families"]) <= held
    items = [json.loads(x) for x in (ref / "items.jsonl").read_text().splitlines()]
    turns = [t for it in items for t in it["writer"]["turns"]]
    bad_turns = [t for t in turns if t["status"] != "ok"]
    bad_verdicts = [it["monitors"]["reader"] for it in items if it["monitors"]["reader"]["status"] != "ok"]
    assert bad_turns or bad_verdicts, "expected the tiny model to produce at least one unparseable answer"
    for t in bad_turns:
        assert t["status"] in ("unparseable", "provider_error") and t["parsed"] is None
        assert t["raw"] is not None or t["status"] == "provider_error"
    w = s["writer"]["adapter"]
    assert w["parse_rate"]["n"] == len(turns) and w["parse_rate"]["k"] == len(turns) - len(bad_turns)
    m = s["monitors"]["reader"]
    assert m["n"] == 4 and m["failures"]["unparseable"]["n"] == 4
    assert m["failures"]["unparseable"]["k"] + m["failures"]["provider_error"]["k"] == len(bad_verdicts)
    for name in ("reader", "base_reader", "reconciler", "teacher"):
        assert s["monitors"][name] is not None, name
    man = json.loads((ref / "manifest.json").read_text())
    assert man["checkpoints"]["writer"]["checkpoint"]["digest"].startswith("sha256:")
    assert man["checkpoints"]["writer"]["adapter_merged"] is True
    assert man["decoding"]["max_new_tokens"]["writer_action"] == 20

    # the same command, killed after its first item, then run again to the end
    res = root / "sab-res"
    p = subprocess.Popen([sys.executable, *_sabotage_args(world, res)], cwd=REPO, env=ENV,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    items_path = res / "items.jsonl"
    kill_after_lines(p, items_path, 1, timeout=600, poll=0.05)
    p.wait(timeout=60)
    assert p.returncode == -signal.SIGKILL, "the run finished before it could be interrupted"
    assert not (res / "summary.json").exists()
    _run([*_sabotage_args(world, res)])
    man = json.loads((res / "manifest.json").read_text())
    assert man["counts"]["reused"] >= 1 and man["counts"]["computed"] >= 1
    assert (res / "summary.json").read_bytes() == (ref / "summary.json").read_bytes()
    assert (res / "items.jsonl").read_bytes() == (ref / "items.jsonl").read_bytes()

    # the chunks in worker processes (above: one per core) or all in the evaluation's own process
    one = root / "sab-one"
    _run([*_sabotage_args(world, one), "--workers", "1"])
    assert (one / "items.jsonl").read_bytes() == (ref / "items.jsonl").read_bytes()


def test_policy_reuse_on_tiny_checkpoints(world):
    root = world["root"]
    out = root / "pol"
    base = ["eval/policy_reuse.py", "--writer", str(world["writer"]), "--cache-dir", str(world["cache"]),
            "--decoding", str(world["decoding"]), "--bootstrap-resamples", "100"]  # fmt: skip
    proc = _run([*base, "--limit", "3", "--out", str(out)])
    assert "policy-reuse eval: wrote" in proc.stdout
    s = json.loads((out / "summary.json").read_text())
    assert s["executor"] == "rules" and s["cases"] >= 1
    assert s["conditions"]["gold_memory"]["rates"]["calibrated"] is True
    assert s["conditions"]["no_memory"]["rates"]["authorized_use"]["value"] == 0.0
    mem = s["memory"]["writer"]
    assert sum(mem["status"].values()) == s["cases"] and mem["unscored"] == mem["status"].get("invalid", 0)
    items = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    for it in items:
        first = it["writer"]["attempts"][0]
        assert first["raw"] is not None or first["status"] == "provider_error"
        if first["status"] != "ok":
            assert len(it["writer"]["attempts"]) == 2  # one repair attempt, no more
    assert (out / "policy_confusion.png").stat().st_size > 0

    # a model executor (the reader checkpoint) and the base model, each on 2 cases
    out2 = root / "pol-model"
    _run([*base, "--limit", "2", "--executor", str(world["reader"]), "--out", str(out2)])
    s2 = json.loads((out2 / "summary.json").read_text())
    r = s2["conditions"]["gold_memory"]["rates"]
    assert r["authorized_use"]["n"] == s2["in_scope"] and r["invalid"]["n"] == s2["requests"]
    out3 = root / "pol-base"
    _run([*base, "--limit", "2", "--executor", "base", "--out", str(out3)])
    assert json.loads((out3 / "summary.json").read_text())["executor"] == "base"
