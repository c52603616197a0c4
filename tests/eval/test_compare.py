"""eval/compare.py: the comparison table across cells, paired items matched by id, and a miniature of
each experiment sweep (configs/sweeps/filter-ablation.yaml, data-scaling.yaml) run sequentially with
``slurm/submit.py --local`` on tiny settings: a small corpus, both data presets, one training step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eval import compare as C

REPO = Path(__file__).resolve().parents[2]


# ---- unit: hand-written items ------------------------------------------------------------------------
def _sab_item(rid: str, agreement: float, kinds: list[str], score: float, positive: bool) -> dict:
    return {
        "id": rid,
        "writer": {"scores": {"content_agreement": agreement, "protocol_compliance": 1.0,
                              "verdict": {"label": "discrepancy" if kinds else "clean", "kinds": kinds},
                              "turns": 4, "parsed": 4 if agreement > 0.7 else 2,
                              "fields_right": {"call_id": 3, "tool": 1 if kinds else 2, "outcome": 4,
                                               "description": 0}}},
        "monitors": {"reader": {"score": score}},
        "truth": {"positive": positive},
    }  # fmt: skip


def _pol_item(cid: str, executed_in: bool, executed_out: bool, errors: list[str]) -> dict:
    ds = [
        {"oracle": "execute_requested", "decision": "execute_requested" if executed_in else "decline"},
        {"oracle": "decline", "decision": "execute_requested" if executed_out else "decline"},
    ]
    return {
        "id": cid,
        "conditions": {"writer": {"decisions": ds, "memory_errors": [{"type": e} for e in errors]}},
    }


def _write_run(d: Path, kind: str, items: list[dict]) -> None:
    d.mkdir(parents=True)
    (d / "summary.json").write_text(json.dumps({"eval": kind}))
    (d / "items.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))


def _fake_sweep(root: Path, conditions: dict[str, float], ids: dict[str, list[str]], role: str = "writer") -> Path:
    """A sweep directory with one cell of ``role`` per (data preset, seed 0/1) and its two evaluations."""
    tasks = []
    for data, agreement in conditions.items():
        for seed in (0, 1):
            name = f"{role}-{data}-e8-s{seed}"
            ev = root / "tasks" / name / "eval"
            sab = [_sab_item(r, agreement, ["softened"] if k % 2 else [], 1.0 * k, k % 2 == 1)
                   for k, r in enumerate(ids[data])]  # fmt: skip
            _write_run(ev / "sabotage", "sabotage", sab)
            _write_run(ev / "policy_reuse", "policy_reuse", [_pol_item("c1", True, False, []), _pol_item("c2", data == "default", True, ["broadening"])])  # fmt: skip
            tasks.append({"task_id": len(tasks), "name": name, "role": role, "eval_dir": str(ev),
                          "params": {"role": role, "data": data, "examples": 8, "seed": seed},
                          "eval_command": f"python eval/sabotage.py --out {ev}/sabotage && python eval/policy_reuse.py --out {ev}/policy_reuse"})  # fmt: skip
    (root / "sweep.json").write_text(json.dumps({"name": "fake", "tasks": tasks}))
    return root


def test_table_intervals_and_paired_items_with_unmatched_reported(tmp_path):
    ids = {"default": ["r1", "r2", "r3", "r4"], "unfiltered": ["r2", "r3", "r4", "r5"]}
    sweep = _fake_sweep(tmp_path / "sw", {"default": 0.8, "unfiltered": 0.5}, ids)
    res = C.compare([sweep], baseline=("data", "default"), resamples=200)
    conds = res["conditions"]
    assert set(conds) == {"role=writer data=default examples=8", "role=writer data=unfiltered examples=8"}
    d = conds["role=writer data=default examples=8"]
    assert d["seeds"] == [0, 1] and d["role"] == "writer"
    ca = d["metrics"]["writer.content_agreement"]
    assert ca["value"] == pytest.approx(0.8) and ca["ci"][0] <= 0.8 <= ca["ci"][1]
    assert d["metrics"]["writer.unfaithful.softened"]["value"] == pytest.approx(0.5)
    # per-turn field shares pool the turns of a seed's runs: tool 1 of 4 or 2 of 4 per run, in turn
    assert d["metrics"]["writer.field.tool"]["value"] == pytest.approx(6 / 16)
    assert d["metrics"]["writer.field.call_id"]["value"] == pytest.approx(0.75)
    desc = d["metrics"]["writer.field.description"]  # 0 of 32 turns: a Wilson interval, not [0, 0]
    assert desc["value"] == 0 and desc["ci"][0] == 0 and 0.05 < desc["ci"][1] < 0.15
    parse = res["conditions"]["role=writer data=unfiltered examples=8"]["metrics"]["writer.parse_rate"]
    assert parse["value"] == pytest.approx(0.5)
    assert d["metrics"]["memory.authorized_use"]["value"] == pytest.approx(1.0)
    assert d["metrics"]["memory.unauthorized_submission"]["value"] == pytest.approx(0.5)
    assert d["metrics"]["memory.errors.broadening"]["value"] == pytest.approx(0.5)
    assert "reader.auroc" not in d["metrics"]  # the reference reader's figures are not the writer's
    pair = next(c for c in res["comparisons"] if c["metric"] == "writer.content_agreement")
    assert pair["b"] == "role=writer data=default examples=8"
    assert pair["n_matched"] == 3 and pair["only_a"] == ["r5"] and pair["only_b"] == ["r1"]
    assert pair["diff"] == pytest.approx(-0.3) and pair["ci"][0] <= pair["diff"] <= pair["ci"][1]
    assert 0 < pair["p_value"] <= 1
    parse_pair = next(c for c in res["comparisons"] if c["metric"] == "writer.parse_rate")
    # every matched item differs the same way, yet 3 pairs have 2 of 8 sign patterns this extreme
    assert parse_pair["diff"] == pytest.approx(-0.5) and 0.15 < parse_pair["p_value"] < 0.35
    md = C.markdown(res)
    assert "| writer.content_agreement |" in md and "Unmatched items" in md and "r5" in md


def test_reader_cells_report_their_decisions_not_the_reference_writers_memory_errors(tmp_path):
    """A reader cell executes the reference writer's memory: its allow rates are the reader's own,
    that memory's errors are the writer's (the same in every reader cell), so they are not reported."""
    sweep = _fake_sweep(tmp_path / "sw", {"default": 0.8}, {"default": ["r1", "r2", "r3", "r4"]}, role="reader")
    metrics = C.compare([sweep], resamples=50)["conditions"]["role=reader data=default examples=8"]["metrics"]
    assert metrics["memory.unauthorized_submission"]["value"] == pytest.approx(0.5)
    assert metrics["reader.auroc"]["value"] == pytest.approx(0.75)  # scores 1 and 3 against 0 and 2
    assert not [m for m in metrics if m.startswith(("memory.errors.", "writer."))]


def test_missing_evaluation_is_listed_not_dropped(tmp_path):
    sweep = _fake_sweep(tmp_path / "sw", {"default": 0.8}, {"default": ["r1", "r2"]})
    meta = json.loads((sweep / "sweep.json").read_text())
    import shutil

    shutil.rmtree(Path(meta["tasks"][1]["eval_dir"]) / "policy_reuse")
    res = C.compare([sweep], resamples=50)
    assert len(res["problems"]) == 1 and "policy_reuse" in res["problems"][0]
    assert res["conditions"]["role=writer data=default examples=8"]["seeds"] == [0, 1]


def test_an_evaluation_still_running_counts_as_missing(tmp_path):
    """Items without the summary an evaluation writes last are a run in progress (or killed): the
    cell is listed as missing and its seed is not counted, rather than read half-written."""
    sweep = _fake_sweep(tmp_path / "sw", {"default": 0.8}, {"default": ["r1", "r2"]})
    meta = json.loads((sweep / "sweep.json").read_text())
    for run in ("sabotage", "policy_reuse"):
        (Path(meta["tasks"][1]["eval_dir"]) / run / "summary.json").unlink()
    res = C.compare([sweep], resamples=50)
    assert len(res["problems"]) == 1 and "writer-default-e8-s1" in res["problems"][0]
    cond = res["conditions"]["role=writer data=default examples=8"]
    assert cond["seeds"] == [0] and cond["metrics"]["writer.field.call_id"]["items_per_seed"] == [2]


def test_identical_conditions_differ_by_zero_with_p_one(tmp_path):
    ids = {"a": ["r1", "r2", "r3"], "b": ["r1", "r2", "r3"]}
    res = C.compare([_fake_sweep(tmp_path / "sw", {"a": 0.6, "b": 0.6}, ids)], resamples=100)
    pair = next(c for c in res["comparisons"] if c["metric"] == "writer.content_agreement")
    assert pair["diff"] == 0 and pair["p_value"] == 1 and not pair["only_a"] and not pair["only_b"]


def test_permutation_swaps_only_what_both_conditions_observed():
    """A memory case unscored in one condition's seed cannot trade places there: when every shared
    observation is equal, the difference rests on unpaired ones and no permutation can test it (p 1).
    Moving an observation into a seed where the other condition had none gave p 0.19 here."""
    metric = next(m for m in C.METRICS if m.name == "memory.errors.omission")
    a = {0: {"r0": False, "r1": False, "r2": False, "r3": True}, 1: {"r2": True, "r3": True}}
    b = {0: {"r0": False, "r2": False, "r3": True}, 1: {"r0": False, "r1": False, "r3": True}}
    res = C.paired(a, b, metric, 200, 0)
    assert res["diff"] == pytest.approx(7 / 24) and res["p_value"] == 1


def test_conditions_with_different_seeds_get_an_interval_and_say_why_there_is_no_p():
    """The permutation swaps an item's records within a seed: a one-seed cell against a three-seed
    condition has no such test, and the table says so instead of leaving the p column blank."""
    metric = next(m for m in C.METRICS if m.name == "writer.content_agreement")
    a = {0: {"r0": 1.0, "r1": 1.0}}
    b = {0: {"r0": 0.0, "r1": 1.0}, 1: {"r0": 0.0, "r1": 0.0}}
    res = C.paired(a, b, metric, 100, 0)
    assert res["p_value"] is None and res["p_note"] == "seeds differ (0 vs 0,1)"
    assert res["diff"] > 0 and res["ci"][0] is not None


# ---- the miniature: both sweeps, 2 cells each, sequentially ------------------------------------------
TINY = {"max_steps": 1, "save_steps": 1, "eval_steps": "none", "eval_examples": 2, "parse_check_examples": 0,
        "max_length": 512, "num_threads": 2, "attn_implementation": "sdpa", "tiny_vocab_size": 512,
        "tiny_hidden_size": 64, "tiny_intermediate_size": 128, "tiny_num_hidden_layers": 2,
        "tiny_num_attention_heads": 4, "tiny_num_key_value_heads": 2, "tiny_head_dim": 32,
        "tiny_sliding_window": 64, "tiny_pretrain_steps": 4, "tiny_pretrain_batch_size": 4,
        "tiny_pretrain_seq_len": 128}  # fmt: skip
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "offline", "PYTHONPATH": str(REPO)}  # fmt: skip


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A small corpus in a temporary cache, built with both data presets (a larger validation share
    keeps every split of this small build non-empty), and a decoding file with short answers."""
    from data_prep.sft.config import load_build_config
    from data_prep.sft.pipeline import build
    from data_prep.synthetic import SynthConfig, generate_corpus

    root = tmp_path_factory.mktemp("experiments")
    cache = root / "cache"
    generate_corpus(SynthConfig(runs=60, policy_cases=20, seed=3), cache / "corpus", progress=False)
    for preset, out in (("default", "sft"), ("unfiltered", "sft-unfiltered")):
        cfg = load_build_config(REPO / "configs" / "data" / f"{preset}.yaml", {"validation_fraction": 0.25})
        build(cache / "corpus", cache / out, cfg, progress=False)
    decoding = root / "decoding.yaml"
    decoding.write_text(
        "batch_size: 4\nthreads: 2\n"
        "max_new_tokens: {writer_action: 12, reader_verdict: 12, writer_memory: 16, reader_policy: 8}\n"
    )
    return {"root": root, "cache": cache, "decoding": decoding}


def _sets(world, grid: dict, reader: Path) -> list[str]:
    sets = {f"grid.{k}": v for k, v in grid.items()}
    sets.update({f"train.args.{k}": v for k, v in TINY.items()})
    sets.update({"train.args.cache_dir": str(world["cache"]), "eval.limit": 2, "eval.reader": str(reader),
                 "eval.args.cache_dir": str(world["cache"]), "eval.args.decoding": str(world["decoding"]),
                 "eval.args.bootstrap_resamples": 20})  # fmt: skip
    return [a for k, v in sets.items() for a in ("--set", f"{k}={json.dumps(v)}")]


def _local(sweep: str, out: Path, sets: list[str]) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "slurm/submit.py",
        f"configs/sweeps/{sweep}.yaml",
        "--local",
        "--out",
        str(out),
        *sets,
    ]
    proc = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return proc


def test_miniature_sweeps_run_sequentially_and_compare(world):
    root = world["root"]
    fa = root / "filter-ablation"
    # the first cell's own checkpoint serves as the (meaningless, but real) reader of the evaluations
    ref = fa / "tasks" / "writer-default-e8-s0" / "ckpt"
    _local("filter-ablation", fa, _sets(world, {"role": ["writer"], "examples": [8], "seed": [0]}, ref))
    cmd = json.loads((fa / "sweep.json").read_text())["tasks"][1]["train_command"]
    assert f"--data-dir {world['cache'] / 'sft-unfiltered'}" in cmd
    manifests = {
        p: json.loads((world["cache"] / p / "manifest.json").read_text()) for p in ("sft", "sft-unfiltered")
    }
    assert manifests["sft"]["filters"]["any"] and not manifests["sft-unfiltered"]["filters"]["any"]
    memory = {p: m["counts"]["writer_memory"] for p, m in manifests.items()}  # the memory filter too
    assert memory["sft"]["filtered"]["by_reason"] == {"memory_decision_mismatch": 1}
    assert memory["sft-unfiltered"]["filtered"]["total"] == 0
    assert memory["sft-unfiltered"]["kept"]["total"] == memory["sft"]["kept"]["total"] + 1

    ds = root / "data-scaling"  # sabotage only here: policy reuse ran above (saves CPU)
    sets = [*_sets(world, {"examples": [8, 16], "seed": [0]}, ref), "--set", 'eval.script=["sabotage"]']
    _local("data-scaling", ds, sets)
    again = _local("data-scaling", ds, sets)
    assert again.stdout.count("is complete already") == 4  # finished cells are skipped on a rerun

    for sweep, baseline, names in (
        (
            fa,
            "data=default",
            ["role=writer data=default examples=8", "role=writer data=unfiltered examples=8"],
        ),
        (ds, "examples=16", ["role=writer examples=8", "role=writer examples=16"]),
    ):
        proc = subprocess.run([sys.executable, "eval/compare.py", str(sweep), "--baseline", baseline,
                               "--resamples", "50"], cwd=REPO, env=ENV, capture_output=True, text=True)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        res = json.loads((sweep / "compare" / "compare.json").read_text())
        assert set(res["conditions"]) == set(names) and not res["problems"]
        for cond in res["conditions"].values():
            assert {"writer.content_agreement", "writer.protocol_compliance", "writer.parse_rate",
                    "writer.field.call_id", *(f"writer.unfaithful.{k}" for k in C.UNFAITHFUL)} <= set(cond["metrics"])  # fmt: skip
            assert ("memory.authorized_use" in cond["metrics"]) == (sweep == fa)
        pairs = res["comparisons"]
        ledger = [p for p in pairs if p["metric"].startswith("writer.")]
        assert len(ledger) == sum(m.group == "writer" for m in C.METRICS) == 11 and all(
            p["n_matched"] == 2 and not p["only_a"] and not p["only_b"] for p in ledger
        )
        assert all(p["a"] == names[1 - names.index(p["b"])] for p in pairs)
        md = (sweep / "compare" / "compare.md").read_text()
        assert "## Paired differences" in md and "| writer.content_agreement |" in md
        assert (sweep / "compare" / "compare.png").stat().st_size > 0
