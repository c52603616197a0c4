"""Score only the labelled positions in TRL's fused LM head on the CPU too.

TRL's SFTTrainer replaces the model's forward with a fused LM head that projects hidden states
through the vocabulary in tiles. On CUDA/XPU it first keeps only the positions whose next-token
label is not -100; elsewhere it scores every position, because on Neuron the number of labelled
positions would change the tile shapes and trigger a recompilation (TRL 1.16,
``trl/trainer/utils.py``: ``compact = _use_triton(device)``). The CPU runs eagerly and recompiles
nothing, yet pays for the whole packed row: with assistant-only loss a reader example has ~60
labelled tokens in ~2,000, and the head's forward and backward were about half of a CPU training step
(py-spy of ``train/reader.py``). Compacting is the same function: each position's log-probability is
computed from its own row, and the masked ones are zero either way.

The switch is TRL's own module-level predicate, widened to the CPU for that one call site
(``trl.trainer.utils`` imports it by name; the kernels keep their own copy, so the CPU still takes
the PyTorch tiles, not Triton).
"""

from __future__ import annotations

import logging

logger = logging.getLogger("ledgerwright")

_PATCHED = "_ledgerwright_compact_cpu"


def compact_fused_head_on_cpu() -> bool:
    """Make TRL's fused LM head score only labelled positions on the CPU; idempotent.

    Returns whether the compaction is in place (False, with a warning, when the installed TRL has no
    such predicate: training then runs as TRL ships it, only slower)."""
    import trl.trainer.utils as trl_utils

    original = getattr(trl_utils, "_use_triton", None)
    if original is None:
        logger.warning(
            "TRL has no trainer.utils._use_triton: the fused LM head scores every position on the CPU"
        )
        return False
    if getattr(original, _PATCHED, False):
        return True

    def use_compact(device) -> bool:
        return device.type == "cpu" or original(device)

    setattr(use_compact, _PATCHED, True)
    use_compact.__wrapped__ = original
    trl_utils._use_triton = use_compact
    return True
