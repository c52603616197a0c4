"""How the tests start slurm/task_runner.py: the command line of one array task, as the sbatch
templates write it."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def task_argv(kind: str, index: Path, *extra: str) -> list[str]:
    """``python slurm/task_runner.py KIND --index INDEX --task 0 [extra...]``."""
    script = str(REPO / "slurm" / "task_runner.py")
    return [sys.executable, script, kind, "--index", str(index), "--task", "0", *extra]
