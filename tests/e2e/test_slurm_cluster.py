"""A real single-node Slurm cluster on this machine (slurm/dev_cluster.sh) runs the CI sweep.

The module starts the cluster (installing Debian's slurm-wlm and munge when absent), submits
configs/sweeps/tiny-cpu.yaml (2 example counts x 2 seeds, two training steps each, CPU) with
slurm/submit.py, requeues one training task through Slurm on the way (SIGUSR1 to its batch shell, as
``--signal=B:USR1@N`` does), waits for both arrays and checks every checkpoint, every evaluation summary,
the order (evaluations only after all training) and the aggregate table. It stops the cluster at the end
if it started it (only the daemons whose pids dev_cluster.sh recorded).

Skipped, with the reason, only where the machine is not root or apt cannot install Slurm.
"""

from __future__ import annotations

import csv
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "slurm"))

import sweeplib  # noqa: E402

pytestmark = pytest.mark.slow
DEV_CLUSTER = REPO / "slurm" / "dev_cluster.sh"
SWEEP = REPO / "configs" / "sweeps" / "tiny-cpu.yaml"
WAIT_S = 480


def sh(*args, timeout=60, check=True, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, **kw)
    if check and res.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, args))} exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
        )
    return res


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.skip("needs root: dev_cluster.sh installs slurm-wlm/munge with apt and starts their daemons")
    res = sh(str(DEV_CLUSTER), "start", timeout=600, check=False)
    if res.returncode != 0:
        if shutil.which("slurmctld") is None or shutil.which("sbatch") is None:
            pytest.skip(f"apt could not install Slurm (unreachable mirror?): {res.stderr.strip()[-500:]}")
        raise AssertionError(f"dev_cluster.sh start failed:\n{res.stderr}")
    started = re.findall(r"started (\w+) \(pid (\d+)\)", res.stderr)
    status = sh(str(DEV_CLUSTER), "status")
    assert "debug" in status.stdout and "up" in status.stdout
    yield {"started": started}
    if started:  # stop only what this test started
        stop = sh(str(DEV_CLUSTER), "stop", timeout=120, check=False)
        assert stop.returncode == 0, stop.stderr
        for _name, pid in started:
            assert (
                not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
            )


def job_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.setdefault("LEDGERWRIGHT_CACHE", str(REPO / ".cache" / "ledgerwright"))
    env.update(
        HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false"
    )
    return env


def squeue_ids(*jobs: str) -> list[str]:
    res = sh("squeue", "-h", "-r", "-j", ",".join(jobs), "-o", "%i", check=False)
    return [line for line in res.stdout.split() if line]


def job_times(job: str) -> dict[str, tuple[float, float, str]]:
    """{array task id: (start, end, state)} from scontrol (finished jobs are kept MinJobAge seconds)."""
    out = {}
    text = sh("scontrol", "show", "job", "-o", job).stdout
    for line in text.splitlines():
        f = dict(kv.split("=", 1) for kv in re.findall(r"(\w+=\S*)", line))
        if "ArrayTaskId" not in f:
            continue

        def ts(s):
            return datetime.fromisoformat(s).timestamp()

        out[f["ArrayTaskId"]] = (ts(f["StartTime"]), ts(f["EndTime"]), f["JobState"])
    return out


def dump_logs(sweep_dir: Path) -> str:
    parts = []
    for p in sorted((sweep_dir / "logs").glob("*.out")):
        parts.append(f"---- {p.name}\n{p.read_text()[-2500:]}")
    return "\n".join(parts)


def test_multinode_script_launches_one_process_per_node(cluster, tmp_path):
    """multinode.sbatch on a 1-node CPU allocation, with a stand-in launcher that prints its arguments."""
    stub = tmp_path / "launcher.sh"
    stub.write_text('#!/bin/bash\necho "LAUNCH node=$SLURM_NODEID args=$*"\n')
    stub.chmod(0o755)
    out = tmp_path / "ckpt"
    (out / "checkpoint-3").mkdir(parents=True)
    (out / "checkpoint-3" / "trainer_state.json").write_text("{}")
    (out / "checkpoint-5").mkdir()  # incomplete: moved aside, not resumed from
    directives = [
        "--job-name=lw-multinode-test",
        "--partition=debug",
        "--nodes=1",
        "--ntasks-per-node=1",
        "--cpus-per-task=1",
        "--mem=500M",
        "--time=00:05:00",
        f"--output={tmp_path}/mn_%j.out",
    ]
    script = tmp_path / "multinode.sbatch"
    script.write_text(sweeplib.render(sweeplib.TEMPLATES["multinode"], directives, sweeplib.job_env()))
    env = {**job_env(), "LEDGERWRIGHT_ACCELERATE": str(stub)}
    res = sh(
        "sbatch",
        "--parsable",
        "--wait",
        str(script),
        "train/writer.py",
        "--examples",
        "8",
        "--output-dir",
        str(out),
        timeout=180,
        env=env,
    )
    job = res.stdout.strip().split(";")[0]
    log = (tmp_path / f"mn_{job}.out").read_text()
    host = sh("hostname", "-s").stdout.strip()
    port = 29500 + int(job) % 1000
    assert "node rank 0 on" in log
    launch = next(line for line in log.splitlines() if line.startswith("LAUNCH"))
    assert launch == (
        f"LAUNCH node=0 args=--config_file configs/accelerate/multinode_slurm.yaml --num_machines 1 "
        f"--num_processes 1 --machine_rank 0 --main_process_ip {host} --main_process_port {port} --cpu "
        f"train/writer.py --examples 8 --output-dir {out} --resume"
    ), log
    assert any(p.name.startswith("incomplete-checkpoint-5") for p in out.iterdir())


def test_tiny_sweep_on_the_local_cluster(cluster, tmp_path):
    t0 = time.time()
    sweep_dir = tmp_path / "sweep"
    env = job_env()
    res = sh(
        sys.executable,
        "slurm/submit.py",
        str(SWEEP),
        "--out",
        str(sweep_dir),
        "--prepare-cache",
        timeout=900,
        cwd=REPO,
        env=env,
    )
    submitted = json.loads((sweep_dir / "submitted.json").read_text())
    train_job, eval_job = submitted["train_job"], submitted["eval_job"]
    try:
        check_sweep(sweep_dir, res.stdout, train_job, eval_job, t0)
    finally:
        sh("scancel", train_job, eval_job, check=False)  # our own jobs: none are left when the test passes


def check_sweep(sweep_dir: Path, submit_out: str, train_job: str, eval_job: str, t0: float) -> None:
    assert f"train array: job {train_job}" in submit_out and f"eval array:  job {eval_job}" in submit_out
    t_submit = time.time()
    tasks = json.loads((sweep_dir / "sweep.json").read_text())["tasks"]
    assert len(tasks) == 4
    out0, status0 = _requeue_first_task(sweep_dir, tasks, train_job, t_submit)
    while squeue_ids(train_job, eval_job):
        assert time.time() - t_submit < WAIT_S, (
            f"arrays still queued after {WAIT_S} s:\n{dump_logs(sweep_dir)}"
        )
        time.sleep(1)
    t_done = time.time()

    _check_outputs(sweep_dir, tasks)
    _check_requeued(sweep_dir, train_job, out0, status0)
    _check_order(sweep_dir, train_job, eval_job)
    _check_aggregate(sweep_dir)
    print(
        f"\nsubmit+prepare {t_submit - t0:.0f} s, arrays {t_done - t_submit:.0f} s, total {time.time() - t0:.0f} s"
    )


def _requeue_first_task(sweep_dir: Path, tasks: list, train_job: str, t_submit: float) -> tuple[Path, Path]:
    """Requeue task 0 through Slurm once its first checkpoint is complete: hold the training
    (SIGSTOP, as a slow step would) so it cannot finish first, then deliver SIGUSR1 to the batch
    shell only. Returns task 0's output directory and status file."""
    out0 = Path(tasks[0]["train_dir"])
    status0 = sweep_dir / "status" / f"train-{tasks[0]['name']}.json"
    while not glob.glob(str(out0 / "checkpoint-*" / "trainer_state.json")):
        assert time.time() - t_submit < WAIT_S, dump_logs(sweep_dir)
        assert squeue_ids(f"{train_job}_0"), "task 0 ended before its first checkpoint:\n" + dump_logs(
            sweep_dir
        )
        time.sleep(0.05)
    pgid = json.loads(status0.read_text())["attempts"][-1]["child_pgid"]
    os.killpg(pgid, signal.SIGSTOP)
    # scancel delivers the signal at once but, while other tasks of the array are pending, slurmctld also
    # answers "try again later" and scancel keeps retrying: stop it (our own process) once it has worked
    scancel = subprocess.Popen(["scancel", "--signal=USR1", "--batch", f"{train_job}_0"])
    t_req = time.time()
    try:
        while True:  # the runner stops the child and calls `scontrol requeue`; the task waits for BeginTime
            state = sh("squeue", "-h", "-j", f"{train_job}_0", "-o", "%T %r", check=False).stdout.strip()
            if state.startswith("PENDING") and json.loads(status0.read_text())["state"] == "requeued":
                break
            assert time.time() - t_req < 150, (
                f"task 0 not requeued (state {state!r}):\n{dump_logs(sweep_dir)}"
            )
            time.sleep(0.2)
    finally:
        if scancel.poll() is None:
            scancel.terminate()
        scancel.wait(timeout=30)
    # a requeued job may start again only after a delay Slurm sets (~2 minutes); lift it
    sh("scontrol", "update", f"JobId={train_job}_0", "StartTime=now")

    return out0, status0


def _check_outputs(sweep_dir: Path, tasks: list) -> None:
    """Every task wrote its checkpoint and its evaluation summary."""
    for t in tasks:
        ck, ev = Path(t["train_dir"]), Path(t["eval_dir"])
        assert (ck / "manifest.json").is_file(), (
            f"{t['name']}: no checkpoint manifest\n{dump_logs(sweep_dir)}"
        )
        assert (ck / "adapter_model.safetensors").is_file()
        assert glob.glob(str(ck / "checkpoint-*" / "trainer_state.json")), t["name"]
        manifest = json.loads((ck / "manifest.json").read_text())
        assert manifest["results"]["global_step"] == 2
        assert manifest["examples"] == t["params"]["examples"] and manifest["seed"] == t["params"]["seed"]
        assert (ev / "summary.json").is_file(), f"{t['name']}: no eval summary\n{dump_logs(sweep_dir)}"
        assert json.loads((ev / "summary.json").read_text())["eval"] == "policy_reuse"


def _check_requeued(sweep_dir: Path, train_job: str, out0: Path, status0: Path) -> None:
    """Task 0 was requeued by Slurm and resumed from its checkpoint."""
    attempts = json.loads(status0.read_text())["attempts"]
    assert [a["state"] for a in attempts] == ["requeued", "done"], attempts
    assert attempts[1]["restart_count"] == 1
    assert re.fullmatch(r"checkpoint-[12]", attempts[1]["resumed_from"] or ""), attempts[1]
    assert json.loads((out0 / "manifest.json").read_text())["resumed_from"] == attempts[1]["resumed_from"]
    log0 = (sweep_dir / "logs" / f"train_{train_job}_0.out").read_text()
    assert "requeued" in log0 and f"resuming from {attempts[1]['resumed_from']}" in log0


def _check_order(sweep_dir: Path, train_job: str, eval_job: str) -> None:
    """The evaluations started only after all training had finished: Slurm's own times and the runner's."""
    tasks = json.loads((sweep_dir / "sweep.json").read_text())["tasks"]
    train_t, eval_t = job_times(train_job), job_times(eval_job)
    assert sorted(train_t) == sorted(eval_t) == ["0", "1", "2", "3"], (train_t, eval_t)
    assert all(s == "COMPLETED" for *_, s in train_t.values()) and all(
        s == "COMPLETED" for *_, s in eval_t.values()
    )
    assert min(s for s, _, _ in eval_t.values()) >= max(e for _, e, _ in train_t.values())
    train_end = max(
        json.loads((sweep_dir / "status" / f"train-{t['name']}.json").read_text())["attempts"][-1]["finished"][
            "unix"
        ]
        for t in tasks
    )
    eval_start = min(
        json.loads((sweep_dir / "status" / f"eval-{t['name']}.json").read_text())["attempts"][0]["started"][
            "unix"
        ]
        for t in tasks
    )
    assert eval_start >= train_end


def _check_aggregate(sweep_dir: Path) -> None:
    """The aggregate table: 4 rows, all complete."""
    agg = sh(sys.executable, "slurm/aggregate.py", str(sweep_dir), "--strict", cwd=REPO, timeout=300)
    assert "tiny-cpu: 4/4 tasks complete" in agg.stdout
    with open(sweep_dir / "aggregate" / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 4 and {r["state"] for r in rows} == {"ok"}
    assert sorted((int(r["examples"]), int(r["seed"])) for r in rows) == [(16, 0), (16, 1), (32, 0), (32, 1)]
    md = (sweep_dir / "aggregate" / "results.md").read_text()
    assert md.count("\n| ") == 5 and "Every task trained and was evaluated." in md
    assert (sweep_dir / "aggregate" / "scaling.png").is_file()
