"""The array-task runner: launch flags from the allocation, resume, signals, status files.

The signal tests run the runner on a stand-in command (a few lines of Python that "train" by writing
checkpoint folders) so they take a second; tests/e2e/test_slurm_requeue.py does the same with the real
training recipe.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
import task_runner as tr
from task_runner_cli import task_argv

REPO = Path(__file__).resolve().parents[2]
PY = "/usr/bin/python3"


# ---- launch flags -------------------------------------------------------------------------------
def test_gpus_of_the_allocation():
    assert tr.allocation_gpus({"SLURM_GPUS_ON_NODE": "4", "CUDA_VISIBLE_DEVICES": "0,1"}) == 4
    assert tr.allocation_gpus({"CUDA_VISIBLE_DEVICES": "0,1,2"}) == 3
    assert tr.allocation_gpus({"CUDA_VISIBLE_DEVICES": "-1"}) == 0
    assert tr.allocation_gpus({"LEDGERWRIGHT_GPUS": "2"}) == 2
    assert tr.allocation_gpus({}) == 0


def test_accelerate_gets_the_allocation():
    cmd = [
        "accelerate",
        "launch",
        "--config_file",
        "configs/accelerate/ddp_4gpu.yaml",
        "train/writer.py",
        "--seed",
        "0",
    ]
    argv, procs = tr.launch_command(cmd, gpus=4, python=PY, port=29611)
    assert argv == [
        PY,
        "-m",
        "accelerate.commands.launch",
        "--num_processes",
        "4",
        "--num_machines",
        "1",
        "--main_process_port",
        "29611",
        "--config_file",
        "configs/accelerate/ddp_4gpu.yaml",
        "train/writer.py",
        "--seed",
        "0",
    ]
    assert procs == 4
    # an allocation of 2 GPUs overrides the config's 4
    argv, procs = tr.launch_command(cmd, gpus=2, python=PY, port=1)
    assert argv[3:5] == ["--num_processes", "2"] and procs == 2
    # no config file: multi-GPU is said explicitly
    argv, _ = tr.launch_command(["accelerate", "launch", "train/writer.py"], gpus=8, python=PY, port=5)
    assert "--multi_gpu" in argv and argv[argv.index("--num_processes") + 1] == "8"
    # no GPU: one CPU process
    argv, procs = tr.launch_command(["accelerate", "launch", "train/writer.py"], gpus=0, python=PY, port=5)
    assert argv[3:8] == ["--cpu", "--num_processes", "1", "--num_machines", "1"] and procs == 1
    # python commands get the environment's interpreter
    argv, _ = tr.launch_command(["python", "eval/policy_reuse.py", "--limit", "2"], gpus=1, python=PY, port=5)
    assert argv == [PY, "eval/policy_reuse.py", "--limit", "2"]


def test_latest_checkpoint_moves_incomplete_ones_aside(tmp_path):
    for step, complete in ((2, True), (4, True), (6, False)):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        if complete:
            (d / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-x").mkdir()
    assert tr.latest_checkpoint(tmp_path).name == "checkpoint-4"
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "checkpoint-6" not in names and any(n.startswith("incomplete-checkpoint-6-") for n in names)
    assert tr.latest_checkpoint(tmp_path / "none") is None


# ---- the runner on a stand-in training command --------------------------------------------------
FAKE_TRAIN = textwrap.dedent(
    """
    import json, os, sys, time
    out = sys.argv[sys.argv.index("--output-dir") + 1]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "argv.jsonl"), "a") as fh:
        fh.write(json.dumps(sys.argv[1:]) + "\\n")
    start = 0
    if "--resume" in sys.argv:
        start = max(int(d.split("-")[1]) for d in os.listdir(out) if d.startswith("checkpoint-"))
        print(f"resuming from checkpoint-{start}", flush=True)
    steps = int(os.environ.get("FAKE_STEPS", "4"))
    for step in range(start + 1, steps + 1):
        time.sleep(float(os.environ.get("FAKE_STEP_SECONDS", "0.05")))
        d = os.path.join(out, f"checkpoint-{step}")
        os.makedirs(d)
        open(os.path.join(d, "trainer_state.json"), "w").write(json.dumps({"global_step": step}))
    json.dump({"results": {"global_step": steps}, "resumed_from": f"checkpoint-{start}" if start else None},
              open(os.path.join(out, "manifest.json"), "w"))
    """
)


def make_index(tmp_path: Path) -> tuple[Path, Path]:
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAIN)
    out = tmp_path / "tasks" / "t0" / "ckpt"
    index = tmp_path / "train_index.tsv"
    index.write_text(f"0\tt0\t{out}\tpython {script} --seed 0 --output-dir {out}\n")
    return index, out


def run_eval(index: Path, env: dict) -> subprocess.CompletedProcess:
    """One eval array task, to the end."""
    return subprocess.run(task_argv("eval", index), capture_output=True, text=True, env=env)


def runner(index: Path, env: dict, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        task_argv("train", index, "--grace", "5"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(extra)
    return env


def wait_for(pred, timeout=30.0):
    t0 = time.time()
    while not pred():
        if time.time() - t0 > timeout:
            raise AssertionError("timed out")
        time.sleep(0.02)


def test_requeue_signal_stops_and_the_rerun_resumes(tmp_path):
    index, out = make_index(tmp_path)
    env = clean_env(FAKE_STEPS="50", FAKE_STEP_SECONDS="0.2")
    p = runner(index, env)
    wait_for(lambda: (out / "checkpoint-1" / "trainer_state.json").is_file())
    p.send_signal(signal.SIGUSR1)
    log, _ = p.communicate(timeout=30)
    assert p.returncode == tr.REQUEUE_EXIT, log
    assert "SIGUSR1 received" in log and "not requeued by this runner (not in a Slurm job)" in log
    assert not (out / "manifest.json").exists()
    reached = max(int(d.name.split("-")[1]) for d in out.glob("checkpoint-*"))
    assert reached < 50

    status_file = tmp_path / "status" / "train-t0.json"
    status = json.loads(status_file.read_text())
    assert status["state"] == "requeued" and status["attempts"][0]["signal"] == "SIGUSR1"

    env["FAKE_STEP_SECONDS"] = "0.001"
    p = runner(index, env)
    log, _ = p.communicate(timeout=60)
    assert p.returncode == 0, log
    assert f"resuming from checkpoint-{reached} in {out}" in log
    argvs = [json.loads(line) for line in (out / "argv.jsonl").read_text().splitlines()]
    assert "--resume" not in argvs[0] and "--resume" in argvs[1]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["resumed_from"] == f"checkpoint-{reached}" and manifest["results"]["global_step"] == 50
    status = json.loads(status_file.read_text())
    assert [a["state"] for a in status["attempts"]] == ["requeued", "done"]
    assert status["attempts"][1]["resumed_from"] == f"checkpoint-{reached}"

    # a finished task is not run again (a requeue after completion changes nothing)
    p = runner(index, env)
    log, _ = p.communicate(timeout=30)
    assert p.returncode == 0 and "complete already" in log
    assert len((out / "argv.jsonl").read_text().splitlines()) == 2


def test_sigterm_stops_a_suspended_child_and_records_it(tmp_path):
    index, out = make_index(tmp_path)
    p = runner(index, clean_env(FAKE_STEPS="500", FAKE_STEP_SECONDS="0.1"))
    status_file = tmp_path / "status" / "train-t0.json"
    wait_for(lambda: (out / "checkpoint-1").is_dir())
    pgid = json.loads(status_file.read_text())["attempts"][0]["child_pgid"]
    os.killpg(pgid, signal.SIGSTOP)  # as Slurm suspends a job; SIGTERM alone would not be acted on
    p.send_signal(signal.SIGTERM)
    log, _ = p.communicate(timeout=30)
    assert p.returncode == 143, log
    assert json.loads(status_file.read_text())["state"] == "stopped"
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


def test_a_failing_command_is_recorded(tmp_path):
    out = tmp_path / "o"
    index = tmp_path / "eval_index.tsv"
    index.write_text(f"0\tt0\t{out}\tpython -c 'import sys; sys.exit(3)'\n")
    res = run_eval(index, clean_env())
    assert res.returncode == 3
    st = json.loads((tmp_path / "status" / "eval-t0.json").read_text())
    assert st["state"] == "failed" and st["attempts"][-1]["rc"] == 3
    # exit 0 without the expected output is a failure too
    index.write_text(f"0\tt0\t{out}\tpython -c 'pass'\n")
    res = run_eval(index, clean_env())
    assert res.returncode == 1 and "summary.json missing" in res.stdout


def test_threads_follow_the_allocation(tmp_path):
    out = tmp_path / "o"
    index = tmp_path / "eval_index.tsv"
    code = f"import os, pathlib; p = pathlib.Path({str(out)!r}); p.mkdir(); (p / 'summary.json').write_text(os.environ['OMP_NUM_THREADS'])"
    index.write_text(f"0\tt0\t{out}\tpython -c {json.dumps(code)}\n")
    env = clean_env(SLURM_CPUS_PER_TASK="6")
    env.pop("OMP_NUM_THREADS", None)
    res = run_eval(index, env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (out / "summary.json").read_text() == "6"


def test_a_chained_evaluation_runs_each_script_once(tmp_path):
    """Two commands joined by && each write their --out; a rerun after the first finished runs only the
    second (a killed evaluation resumes where it stopped), and a third run does nothing."""
    out = tmp_path / "eval"
    log = tmp_path / "ran.txt"

    def part(name: str, fail_flag: Path) -> str:
        code = (
            f"import pathlib, sys; a = sys.argv; p = pathlib.Path(a[a.index('--out') + 1]); "
            f"open({str(log)!r}, 'a').write({name!r} + '\\n'); "
            f"sys.exit(3) if pathlib.Path({str(fail_flag)!r}).exists() else None; "
            "p.mkdir(parents=True); (p / 'summary.json').write_text('{}')"
        )
        return shlex.join(["python", "-c", code, "--out", str(out / name)])

    stop = tmp_path / "stop"
    stop_a = tmp_path / "never"
    index = tmp_path / "eval_index.tsv"
    index.write_text(f"0\tt0\t{out}\t{part('a', stop_a)} '&&' {part('b', stop)}\n")
    stop.touch()  # the second script fails the first time
    assert tr.run_task("eval", index, 0, grace=5, env=clean_env()) == 3
    stop.unlink()
    assert tr.run_task("eval", index, 0, grace=5, env=clean_env()) == 0
    assert tr.run_task("eval", index, 0, grace=5, env=clean_env()) == 0
    assert log.read_text().split() == ["a", "b", "b"]
    status = json.loads((tmp_path / "status" / "eval-t0.json").read_text())
    assert [a["state"] for a in status["attempts"]] == ["failed", "done", "done"]
