"""Train a ledger writer (action ledger, authorization memory, or both) with QLoRA.

    accelerate launch train/writer.py --examples 561 --seed 0

Without --config and --data-dir this builds the embedded default (synthetic corpus, SFT datasets and a
tiny Gemma 3 base, cached) and trains on it offline. See configs/train/ for the 12B presets and
``--help`` for every field.
"""

import sys

from train.recipe import main

if __name__ == "__main__":
    sys.exit(main("writer"))
