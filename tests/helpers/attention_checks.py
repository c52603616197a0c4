"""What the attention tests share: the one error measure their tolerances bound."""

import torch


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """max |x - ref| / max |ref| in float64 on the CPU; absolute when the reference is identically zero
    (e.g. dq at window 1)."""
    x, ref = x.detach().double().cpu(), ref.detach().double().cpu()
    scale = float(ref.abs().max())
    return float((x - ref).abs().max()) / (scale if scale > 0 else 1.0)
