"""Run one array task of a sweep (what ``train_array.sbatch`` and ``eval_array.sbatch`` exec).

    python slurm/task_runner.py train --index SWEEP_DIR/train_index.tsv --task 3
    python slurm/task_runner.py eval  --index SWEEP_DIR/eval_index.tsv  --task 3

It reads line ``--task`` of the index (``task_id <TAB> name <TAB> output_dir <TAB> command``) and runs
the command in its own process group, with:

- the allocation's GPUs: ``accelerate launch`` gets ``--num_processes`` = GPUs on the node
  (``$SLURM_GPUS_ON_NODE``, else ``$CUDA_VISIBLE_DEVICES``, else ``$LEDGERWRIGHT_GPUS``); with none it
  runs one CPU process (unless the command names an accelerate config file). ``OMP_NUM_THREADS`` is the
  task's CPUs divided by the processes.
- resume (train): a task whose output directory holds a complete ``checkpoint-*`` (one with
  ``trainer_state.json``, which the trainer writes last) gets ``--resume``; an incomplete one (killed
  while saving) is renamed ``incomplete-checkpoint-*`` first. A finished task (``manifest.json``) is not
  run again.
- signals: SIGUSR1 (``--signal=B:USR1@N``: the time limit is near) stops the child (SIGTERM to its
  group, SIGKILL after ``--grace`` seconds) and requeues this array task with ``scontrol requeue``
  (outside Slurm it exits 75 so the caller can rerun it); SIGTERM/SIGINT (preemption, scancel) stop the
  child and exit 143/130 - a preempted job that Slurm requeues resumes the same way.
- a status file ``<sweep_dir>/status/<kind>-<cell name>.json`` with every attempt (start, end, exit
  code, state, the checkpoint it resumed from), which ``aggregate.py`` and the tests read. It is named
  by the cell, not the array index: a later submission of part of the grid renumbers the tasks.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from data_prep.yaml_config import strict_parser

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sweeplib import IndexEntry, SweepError, chain_parts, out_of, read_index, write_json  # noqa: E402

REQUEUE_EXIT = 75  # EX_TEMPFAIL: stopped so that it can be requeued
CKPT_RE = re.compile(r"^checkpoint-(\d+)$")
PREFIX = "[lw-runner]"


def log(msg: str) -> None:
    print(f"{PREFIX} {datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')} {msg}", flush=True)


# ---- allocation ---------------------------------------------------------------------------------
def allocation_gpus(env: dict[str, str]) -> int:
    if env.get("SLURM_GPUS_ON_NODE", "").isdigit():
        return int(env["SLURM_GPUS_ON_NODE"])
    cvd = env.get("CUDA_VISIBLE_DEVICES", "")
    if cvd and cvd not in ("-1", "NoDevFiles"):
        return len([d for d in cvd.split(",") if d.strip()])
    if env.get("LEDGERWRIGHT_GPUS", "").isdigit():
        return int(env["LEDGERWRIGHT_GPUS"])
    return 0


def main_port(env: dict[str, str]) -> int:
    job = env.get("SLURM_JOB_ID", "")
    return 29500 + (int(job) % 1000 if job.isdigit() else os.getpid() % 1000)


def launch_command(cmd: list[str], *, gpus: int, python: str, port: int) -> tuple[list[str], int]:
    """(the argv to run, processes it starts). ``accelerate launch ...`` gets the allocation's flags;
    ``python ...`` gets this interpreter."""
    if cmd[:2] == ["accelerate", "launch"]:
        rest = cmd[2:]
        has_config = any(a == "--config_file" or a.startswith("--config_file=") for a in rest)
        flags: list[str] = []
        if gpus > 0:
            procs = gpus
            flags += ["--num_processes", str(gpus), "--num_machines", "1"]
            if gpus > 1:
                flags += ["--main_process_port", str(port)]
                if not has_config:
                    flags.append("--multi_gpu")
        elif has_config:
            procs = 1  # the config decides (e.g. cpu_ddp.yaml); threads are split as for one process
        else:
            procs = 1
            flags += ["--cpu", "--num_processes", "1", "--num_machines", "1"]
        if not has_config:
            flags += ["--mixed_precision", "no", "--dynamo_backend", "no"]
        return [python, "-m", "accelerate.commands.launch", *flags, *rest], procs
    if cmd and cmd[0] in ("python", "python3"):
        return [python, *cmd[1:]], 1
    return list(cmd), 1


# ---- checkpoints --------------------------------------------------------------------------------
def latest_checkpoint(out: Path, *, quarantine: bool = True) -> Path | None:
    """The newest complete ``checkpoint-<step>`` in ``out``; incomplete ones are moved aside."""
    if not out.is_dir():
        return None
    complete = []
    for d in out.iterdir():
        m = CKPT_RE.match(d.name)
        if not m or not d.is_dir():
            continue
        if (d / "trainer_state.json").is_file():
            complete.append((int(m.group(1)), d))
        elif quarantine:
            target = out / f"incomplete-{d.name}-{int(time.time())}"
            log(
                f"{d.name} is incomplete (no trainer_state.json, killed while saving): moved to {target.name}"
            )
            d.rename(target)
    return max(complete)[1] if complete else None


def find_summary(out: Path) -> Path | None:
    """``summary.json`` of an evaluation: in ``out`` or in one run directory below it."""
    if (out / "summary.json").is_file():
        return out / "summary.json"
    found = sorted(out.glob("*/summary.json"), key=lambda p: p.stat().st_mtime) if out.is_dir() else []
    return found[-1] if found else None


def is_complete(kind: str, out: Path) -> bool:
    return (out / "manifest.json").is_file() if kind == "train" else find_summary(out) is not None


# ---- status -------------------------------------------------------------------------------------
def status_path(sweep_dir: Path, kind: str, name: str) -> Path:
    return sweep_dir / "status" / f"{kind}-{name}.json"


def now() -> dict:
    t = time.time()
    return {"unix": round(t, 3), "utc": datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")}


class Status:
    def __init__(self, path: Path, kind: str, entry: IndexEntry, env: dict[str, str]):
        self.path = path
        self.data = {
            "kind": kind,
            "task_id": entry.task_id,
            "name": entry.name,
            "output_dir": entry.output_dir,
            "attempts": [],
        }
        if path.is_file():
            try:
                old = json.loads(path.read_text(encoding="utf-8"))
                self.data["attempts"] = list(old.get("attempts", []))
            except (OSError, ValueError):
                pass
        self.attempt = {
            "attempt": len(self.data["attempts"]),
            "slurm_job": _job_label(env),
            "restart_count": int(env.get("SLURM_RESTART_COUNT", "0") or 0),
            "started": now(),
            "state": "running",
        }
        self.data["attempts"].append(self.attempt)
        self.save()

    def update(self, **fields) -> None:
        self.attempt.update(fields)
        self.save()

    def save(self) -> None:
        self.data["state"] = self.attempt["state"]
        write_json(self.path, self.data)


def _job_label(env: dict[str, str]) -> str | None:
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID")


# ---- running ------------------------------------------------------------------------------------
class Runner:
    def __init__(self, grace: float):
        self.grace = grace
        self.child: subprocess.Popen | None = None
        self.stop_signal: str | None = None
        self.kill_at: float | None = None

    def on_signal(self, signum, _frame) -> None:
        name = signal.Signals(signum).name
        if self.stop_signal is None or name == "SIGUSR1":
            self.stop_signal = name
        log(
            f"{name} received: stopping the child (SIGTERM to its process group, SIGKILL after {self.grace:.0f} s)"
        )
        self._signal_child(signal.SIGTERM)
        self._signal_child(signal.SIGCONT)  # a stopped (suspended) child must run to act on SIGTERM
        if self.kill_at is None:
            self.kill_at = time.monotonic() + self.grace

    def _signal_child(self, sig) -> None:
        if self.child is not None and self.child.poll() is None:
            try:
                os.killpg(self.child.pid, sig)
            except ProcessLookupError:
                pass

    def run(self, argv: list[str], env: dict[str, str], on_start=None) -> int:
        for sig in (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.on_signal)
        self.child = subprocess.Popen(argv, env=env, start_new_session=True)
        if on_start is not None:
            on_start(self.child.pid)
        if self.stop_signal is not None:  # signalled while starting
            self._signal_child(signal.SIGTERM)
        while True:
            try:
                return self.child.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                if self.kill_at is not None and time.monotonic() > self.kill_at:
                    log(f"the child did not stop within {self.grace:.0f} s: SIGKILL")
                    self._signal_child(signal.SIGKILL)
                    self.kill_at = time.monotonic() + 3600


def requeue(env: dict[str, str]) -> bool:
    job = _job_label(env)
    if not job or shutil.which("scontrol") is None:
        return False
    res = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
    if res.returncode != 0:
        log(f"scontrol requeue {job} failed: {res.stderr.strip()}")
        return False
    log(f"requeued {job}")
    return True


def pending(kind: str, entry: IndexEntry) -> list[list[str]]:
    """The commands of a task still to run: the training unless finished; of an evaluation (one
    script or several joined by ``&&``), each whose ``--out`` has no summary yet, in order."""
    if kind == "train":
        return [] if is_complete(kind, Path(entry.output_dir)) else [list(entry.command)]
    parts = chain_parts(entry.command)
    return [p for p in parts if find_summary(Path(out_of(p, entry.output_dir))) is None]


def run_task(kind: str, index: Path, task: int, *, grace: float, env: dict[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    entry = read_index(index, task)
    out = Path(entry.output_dir)
    status = Status(status_path(index.parent, kind, entry.name), kind, entry, env)
    log(f"{kind} task {task} ({entry.name}), attempt {status.attempt['attempt']}, output {out}")
    todo = pending(kind, entry)
    if not todo:
        log(f"{out} is complete already: nothing to do")
        status.update(state="done", finished=now(), rc=0, skipped=True)
        return 0
    rc = 0
    for cmd in todo:
        rc = _run_one(kind, cmd, out, status, env, grace)
        if rc != 0:
            return rc
    if pending(kind, entry):
        log(
            f"the command exited 0 but {out} is not complete ({'manifest.json' if kind == 'train' else 'summary.json'} missing)"
        )
        rc = 1
    status.update(state="done" if rc == 0 else "failed", finished=now(), rc=rc)
    log(f"{kind} task {task} {'done' if rc == 0 else f'failed (exit {rc})'}")
    return rc


def _run_one(kind: str, cmd: list[str], out: Path, status: Status, env: dict[str, str], grace: float) -> int:
    """One command of a task, with resume (train), threads, signals and status; 0 or its failure code."""
    resumed = None
    if kind == "train":
        ckpt = latest_checkpoint(out)
        if ckpt is not None:
            resumed = ckpt.name
            if "--resume" not in cmd:
                cmd.append("--resume")
            log(f"resuming from {ckpt.name} in {out}")
        elif out.is_dir() and any(out.iterdir()):
            log(f"{out} holds no complete checkpoint: training from the start")
    gpus = allocation_gpus(env)
    python = env.get("LEDGERWRIGHT_PYTHON") or sys.executable
    argv, procs = launch_command(cmd, gpus=gpus, python=python, port=main_port(env))
    cpus = env.get("SLURM_CPUS_PER_TASK", "")
    if cpus.isdigit() and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, int(cpus) // max(1, procs)))
    env.setdefault("PYTHONUNBUFFERED", "1")
    status.update(resumed_from=resumed, gpus=gpus, command=argv)
    log(
        f"gpus {gpus}, processes {procs}, OMP_NUM_THREADS {env.get('OMP_NUM_THREADS', '-')}: {' '.join(argv)}"
    )

    runner = Runner(grace)
    rc = runner.run(argv, env, on_start=lambda pid: status.update(child_pgid=pid))
    if runner.stop_signal == "SIGUSR1":
        status.update(state="requeued", finished=now(), rc=rc, signal="SIGUSR1")
        if not requeue(env):
            log(f"not requeued by this runner (not in a Slurm job): exit {REQUEUE_EXIT}; rerun to resume")
        return REQUEUE_EXIT
    if runner.stop_signal is not None:
        status.update(state="stopped", finished=now(), rc=rc, signal=runner.stop_signal)
        return 130 if runner.stop_signal == "SIGINT" else 143
    if rc != 0:
        status.update(state="failed", finished=now(), rc=rc)
        log(f"{kind} task {status.data['task_id']} failed (exit {rc})")
    return rc


def main(argv: list[str] | None = None) -> int:
    p = strict_parser(prog="slurm/task_runner.py", description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=["train", "eval"])
    p.add_argument("--index", required=True, type=Path, help="the sweep's train_index.tsv or eval_index.tsv")
    p.add_argument("--task", required=True, type=int, help="the array task id (line of the index, from 0)")
    p.add_argument(
        "--grace",
        type=float,
        default=float(os.environ.get("LEDGERWRIGHT_STOP_GRACE", "120")),
        help="seconds between SIGTERM and SIGKILL when stopping the child (default 120)",
    )
    args = p.parse_args(argv)
    try:
        return run_task(args.kind, args.index, args.task, grace=args.grace)
    except SweepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
