"""The slurm/ scripts are run by path, not installed: put slurm/ on sys.path for the tests."""

import sys
from pathlib import Path

SLURM_DIR = Path(__file__).resolve().parents[2] / "slurm"
if str(SLURM_DIR) not in sys.path:
    sys.path.insert(0, str(SLURM_DIR))
