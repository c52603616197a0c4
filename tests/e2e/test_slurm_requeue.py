"""A train task stopped by the requeue signal after its first checkpoint resumes instead of restarting.

This runs the array task exactly as train_array.sbatch does (``slurm/task_runner.py train``) on the
real recipe (tiny base, embedded default data, CPU), without a cluster: the runner is sent SIGUSR1 (what
``#SBATCH --signal=B:USR1@N`` delivers before the time limit) once the first checkpoint is complete,
stops the training and exits 75 (outside Slurm it cannot ``scontrol requeue`` itself); the rerun - what
Slurm's requeue starts - must pass ``--resume``, continue from that checkpoint and end at the same final
step. tests/e2e/test_slurm_cluster.py does the same through a real Slurm requeue.
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from task_runner_cli import task_argv

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "slurm"))

import submit  # noqa: E402
from sweeplib import load_sweep  # noqa: E402

pytestmark = pytest.mark.slow
MAX_STEPS = 6


def cache_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}  # not a Slurm job here
    env.setdefault("LEDGERWRIGHT_CACHE", str(REPO / ".cache" / "ledgerwright"))
    env.update(
        HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false"
    )
    return env


def run_task(index: Path, env: dict, log: Path) -> subprocess.Popen:
    fh = open(log, "w")  # noqa: SIM115 - closed when the test ends
    return subprocess.Popen(
        task_argv("train", index, "--grace", "60"),
        cwd=REPO,
        env=env,
        stdout=fh,
        stderr=subprocess.STDOUT,
    )


def test_requeued_train_task_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    env = cache_env()
    monkeypatch.setenv("LEDGERWRIGHT_CACHE", env["LEDGERWRIGHT_CACHE"])
    sweep = load_sweep(
        REPO / "configs" / "sweeps" / "tiny-cpu.yaml",
        out=tmp_path / "sweep",
        sets=[
            ("grid.examples", [16]),
            ("grid.seed", [0]),
            ("train.args.max_steps", MAX_STEPS),
            ("train.args.save_steps", 1),
        ],
    )
    plan = submit.Plan(sweep)
    plan.write(REPO / "configs" / "sweeps" / "tiny-cpu.yaml")
    submit.prepare_cache(sweep)  # the data and the tiny base, so the timing below is the training's
    index = plan.paths["train_index"]
    out = Path(sweep.tasks[0].train_dir)
    status_file = sweep.sweep_dir / "status" / f"train-{sweep.tasks[0].name}.json"

    # first attempt: SIGUSR1 once a checkpoint is complete
    log1 = tmp_path / "attempt0.log"
    p = run_task(index, env, log1)
    t0 = time.time()
    while not glob.glob(str(out / "checkpoint-*" / "trainer_state.json")):
        assert p.poll() is None, log1.read_text()[-3000:]
        assert time.time() - t0 < 300, "no checkpoint after 300 s"
        time.sleep(0.05)
    # Hold the training where it is (as a slow step would) so that it cannot finish all its steps before
    # the signal is handled; the runner sends SIGTERM and SIGCONT to the child's group.
    pgid = json.loads(status_file.read_text())["attempts"][-1]["child_pgid"]
    os.killpg(pgid, signal.SIGSTOP)
    p.send_signal(signal.SIGUSR1)
    assert p.wait(timeout=120) == 75, log1.read_text()[-3000:]
    text1 = log1.read_text()
    assert "SIGUSR1 received: stopping the child" in text1
    assert not (out / "manifest.json").exists()
    steps = sorted(int(d.parent.name.split("-")[1]) for d in out.glob("checkpoint-*/trainer_state.json"))
    k = steps[-1]
    assert 1 <= k < MAX_STEPS, steps
    first = json.loads(status_file.read_text())["attempts"][0]
    assert first["state"] == "requeued" and first["signal"] == "SIGUSR1"

    # second attempt (what the requeue starts): resumes from checkpoint-k and finishes
    log2 = tmp_path / "attempt1.log"
    p = run_task(index, env, log2)
    assert p.wait(timeout=600) == 0, log2.read_text()[-3000:]
    text2 = log2.read_text()
    assert f"resuming from checkpoint-{k} in {out}" in text2  # the runner
    assert f"resuming from {out}/checkpoint-{k}" in text2  # the recipe
    assert re.search(rf"\b{k}/{MAX_STEPS}\b", text2), "the progress bar should start at the checkpoint's step"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["resumed_from"] == f"checkpoint-{k}"
    assert manifest["results"]["global_step"] == MAX_STEPS
    assert "--resume" in manifest["command"]
    attempts = json.loads(status_file.read_text())["attempts"]
    assert [a["state"] for a in attempts] == ["requeued", "done"]
    assert attempts[1]["resumed_from"] == f"checkpoint-{k}"
