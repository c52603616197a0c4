"""Train a ledger reader (sabotage verdict, policy execution, or both) with QLoRA.

    accelerate launch train/reader.py --examples 561 --seed 0

Same recipe and flags as train/writer.py; the default task is ``verdict`` and the default output
directory ``ckpt-reader/``.
"""

import sys

from train.recipe import main

if __name__ == "__main__":
    sys.exit(main("reader"))
