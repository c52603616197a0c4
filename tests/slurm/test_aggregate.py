"""aggregate.py on a hand-made sweep directory: every task is a row, problems are listed, a plot."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import aggregate
import submit
from sweeplib import load_sweep

REPO = Path(__file__).resolve().parents[2]


def rate(v, lo=None, hi=None):
    return {
        "value": v,
        "ci": [lo if lo is not None else v - 0.1, hi if hi is not None else v + 0.1],
        "k": 1,
        "n": 4,
    }


def policy_summary(v: float) -> dict:
    return {
        "eval": "policy_reuse",
        "cases": 2,
        "requests": 8,
        "conditions": {
            "writer": {
                "rates": {
                    "authorized_use": rate(v),
                    "unauthorized_submission": rate(1 - v),
                    "invalid": rate(0.0, 0.0, 0.0),
                    "n": 8,
                },
                "oracle_agreement": rate(v / 2),
            },
            "gold_memory": {"rates": {"authorized_use": rate(1.0, 1.0, 1.0)}},
        },
        "memory": {"writer": {"exact": rate(v / 4), "records": {"value": 1.5, "ci": [1, 2], "n": 2}}},
    }


def make_sweep(tmp_path: Path) -> Path:
    """tiny-cpu's 4 tasks: two complete, one whose evaluation failed, one never trained."""
    sweep = load_sweep(REPO / "configs" / "sweeps" / "tiny-cpu.yaml", out=tmp_path / "sw")
    submit.Plan(sweep).write(REPO / "configs" / "sweeps" / "tiny-cpu.yaml")
    d = sweep.sweep_dir

    names = {t.index: t.name for t in sweep.tasks}

    def status(kind, tid, state, rc, job):
        path = d / "status" / f"{kind}-{names[tid]}.json"
        path.write_text(
            json.dumps(
                {"state": state, "attempts": [{"attempt": 0, "state": state, "rc": rc, "slurm_job": job}]}
            )
        )

    for t in sweep.tasks:
        if t.index == 3:
            continue  # never ran
        ck = Path(t.train_dir)
        ck.mkdir(parents=True)
        (ck / "manifest.json").write_text(
            json.dumps(
                {
                    "examples": t.params["examples"],
                    "train_seconds": 3.0,
                    "tokens_seen": 100,
                    "resumed_from": None,
                    "world_size": 1,
                    "results": {
                        "global_step": 2,
                        "train_loss_final": 4.0 - t.index / 10,
                        "eval_loss_initial": 5.0,
                        "eval_loss_final": 4.5 - t.params["examples"] / 100,
                    },
                }
            )
        )
        status("train", t.index, "done", 0, f"10_{t.index}")
        if t.index == 2:
            status("eval", t.index, "failed", 1, f"11_{t.index}")
            continue
        ev = Path(t.eval_dir)
        ev.mkdir(parents=True)
        (ev / "summary.json").write_text(json.dumps(policy_summary(0.5 + t.index / 10)))
        status("eval", t.index, "done", 0, f"11_{t.index}")
    return d


def test_every_task_is_a_row_and_problems_are_listed(tmp_path):
    d = make_sweep(tmp_path)
    res = aggregate.aggregate(d)
    rows = res["rows"]
    assert [r["task_id"] for r in rows] == [0, 1, 2, 3]
    assert [r["state"] for r in rows] == [
        "ok",
        "ok",
        "train done, eval failed",
        "train missing, eval missing",
    ]
    problems = {p["task_id"]: p["problem"] for p in res["problems"]}
    assert set(problems) == {2, 3}
    assert "eval: failed with exit 1" in problems[2] and f"{d}/logs/eval_11_2.out" in problems[2]
    assert "train: never started" in problems[3] and "eval: not run (no checkpoint)" in problems[3]
    assert res["headline"] == [
        "eval.conditions.writer.rates.authorized_use",
        "eval.conditions.writer.rates.unauthorized_submission",
        "eval.conditions.writer.oracle_agreement",
        "eval.memory.writer.exact",
        "eval.conditions.writer.rates.invalid",
    ]

    with open(d / "aggregate" / "results.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 4
    assert table[0]["examples"] == "16" and table[0]["seed"] == "0" and table[0]["global_step"] == "2"
    assert float(table[1]["eval.conditions.writer.rates.authorized_use"]) == 0.6
    assert float(table[1]["eval.conditions.writer.rates.authorized_use.ci_lo"]) == 0.5
    assert table[3]["eval.conditions.writer.rates.authorized_use"] == ""

    md = (d / "aggregate" / "results.md").read_text()
    assert md.startswith("# Sweep tiny-cpu: 4 tasks, 2 complete")
    assert md.count("\n| ") == 5  # header + 4 rows
    assert "## Missing or failed (2)" in md and "`writer-e32-s1`" in md
    assert (d / "aggregate" / "scaling.png").stat().st_size > 1000
    assert json.loads((d / "aggregate" / "aggregate.json").read_text())["sweep"] == "tiny-cpu"


def test_cli_strict_and_output(tmp_path):
    d = make_sweep(tmp_path)
    res = subprocess.run(
        [sys.executable, "slurm/aggregate.py", str(d), "--strict"], cwd=REPO, capture_output=True, text=True
    )
    assert res.returncode == 1, res.stderr
    assert "tiny-cpu: 2/4 tasks complete" in res.stdout
    assert "task 3 writer-e32-s1: train missing, eval missing" in res.stdout
    ok = subprocess.run(
        [sys.executable, "slurm/aggregate.py", str(d), "--out", str(tmp_path / "agg")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and (tmp_path / "agg" / "results.md").is_file()


def test_not_a_sweep_dir(tmp_path):
    res = subprocess.run(
        [sys.executable, "slurm/aggregate.py", str(tmp_path)], cwd=REPO, capture_output=True, text=True
    )
    assert res.returncode != 0 and "sweep.json not found" in res.stderr


def test_flatten_metrics():
    flat, head = aggregate.flatten_metrics(
        {"a": {"value": 0.5, "ci": [0.4, 0.6]}, "n": 3, "b": {"c": 1.5}, "ok": True, "roc": [[0, 0]]}
    )
    assert flat == {"a": 0.5, "a.ci_lo": 0.4, "a.ci_hi": 0.6, "n": 3.0, "b.c": 1.5}
    assert head == ["a", "b.c"]


def test_a_later_submission_of_part_of_the_grid_keeps_every_cell(tmp_path):
    """Seed 1 alone submitted after the whole grid (``--set grid.seed=[1]``): the tasks are renumbered,
    yet the aggregate still reads all four cells, each with its own status (named by the cell)."""
    d = make_sweep(tmp_path)
    tiny = REPO / "configs" / "sweeps" / "tiny-cpu.yaml"
    part = load_sweep(tiny, out=d, sets=[("grid.seed", [1])])
    submit.Plan(part).write(tiny)
    meta = json.loads((d / "sweep.json").read_text())
    assert [t["name"] for t in meta["tasks"]] == ["writer-e16-s1", "writer-e32-s1"]
    assert [t["name"] for t in meta["earlier_tasks"]] == ["writer-e16-s0", "writer-e32-s0"]
    rows = {r["name"]: r for r in aggregate.aggregate(d)["rows"]}
    assert set(rows) == {"writer-e16-s0", "writer-e16-s1", "writer-e32-s0", "writer-e32-s1"}
    # writer-e32-s1 is task 1 now, the index writer-e16-s1 had: its missing training is its own
    assert rows["writer-e16-s1"]["state"] == "ok" and rows["writer-e32-s0"]["state"] == "train done, eval failed"
    assert rows["writer-e32-s1"]["state"] == "train missing, eval missing"
    # submitting the whole grid again keeps nothing as earlier: every cell is planned
    submit.Plan(load_sweep(tiny, out=d)).write(tiny)
    assert "earlier_tasks" not in json.loads((d / "sweep.json").read_text())
