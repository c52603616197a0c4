"""The public entry point: ``blockwise_attention`` and backend selection."""

from __future__ import annotations

import importlib.util
import os

import torch

import train.attention.cpu_fused as cpu_fused  # a module import: the package's __init__ imports this file

from .semantics import check_problem, resolve_precision
from .torch_impl import blockwise_attention_torch

BACKENDS = ("auto", "torch", "triton")


def triton_available() -> bool:
    """True when the ``triton`` package can be imported (it may still lack a GPU driver)."""
    return importlib.util.find_spec("triton") is not None


def triton_interpret() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def resolve_backend(backend: str, device: torch.device) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        return (
            "triton" if device.type == "cuda" and triton_available() and not triton_interpret() else "torch"
        )
    if backend == "triton":
        if not triton_available():
            raise RuntimeError("backend='triton' needs the triton package")
        if device.type != "cuda" and not triton_interpret():
            raise RuntimeError(
                "backend='triton' needs CUDA tensors, or TRITON_INTERPRET=1 (set before importing triton) "
                "to run the kernels in the CPU interpreter"
            )
    return backend


def blockwise_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = True,
    scale: float | None = None,
    cu_seqlens: torch.Tensor | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    backend: str = "auto",
    key_padding_mask: torch.Tensor | None = None,
    attn_mask: torch.Tensor | None = None,
    precision: str | None = None,
    block_size: int | tuple[int, int] | str | None = None,
) -> torch.Tensor:
    """Exact, memory-linear attention with fp32 softmax and accumulation.

    Args:
        q: (B, Hq, Lq, D); k, v: (B, Hkv, Lk, D), ``Hq % Hkv == 0`` (GQA by index mapping), D <= 256.
        causal: causal mask, bottom-right aligned when ``Lq != Lk`` (decoding against a cache).
        scale: score scale, default ``D ** -0.5``.
        cu_seqlens: int32 (N+1,) boundaries of packed sequences (B == 1, Lq == Lk); no attention across
            sequences; positions at or past ``cu_seqlens[-1]`` attend nothing.
        sliding_window: key ``j`` is visible from query position ``i`` iff ``i - j < sliding_window``
            (transformers' Gemma 3 convention).
        softcap: ``softcap * tanh(scores / softcap)`` before masking.
        backend: ``"torch"`` (any device), ``"triton"`` (CUDA, or the interpreter) or ``"auto"``
            (triton on CUDA, torch elsewhere; on the CPU, fp32 causal global problems go to PyTorch's
            fused kernel, see ``cpu_fused``).
        key_padding_mask: optional (B, Lk) bool, True for real keys.
        attn_mask: optional 4-D mask broadcastable to (B, Hq, Lq, Lk): bool (True = attend) or an
            additive float bias; combined with everything above.
        precision: operand precision of the products: ``"ieee"`` (true fp32), ``"tf32"``, ``"bf16"``
            (bf16 operands on tensor cores), or ``"auto"`` / None (default: ``bf16`` for bf16 inputs on
            the triton backend, ``ieee`` otherwise). Scores, softmax statistics, the logsumexp and every
            accumulator are fp32 in every mode. The torch backend emulates the non-ieee roundings.
        block_size: tile sizes ``(block_m, block_n)`` or one int; None picks per backend; ``"default"``
            runs the Triton GPU tile ladder even in the interpreter (tests of the real tiles).

    Returns:
        (B, Hq, Lq, D) in q's dtype; differentiable with respect to q, k and v.
    """
    chosen = resolve_backend(backend, q.device)
    problem = check_problem(
        q,
        k,
        v,
        causal=causal,
        scale=scale,
        cu_seqlens=cu_seqlens,
        sliding_window=sliding_window,
        softcap=softcap,
        key_padding_mask=key_padding_mask,
        attn_mask=attn_mask,
        precision=resolve_precision(precision, q.dtype, chosen),
    )
    if attn_mask is not None and attn_mask.requires_grad:
        raise ValueError("attn_mask is treated as a constant; detach it first")
    if chosen == "triton":
        from .triton_impl import blockwise_attention_triton

        return blockwise_attention_triton(q, k, v, problem, key_padding_mask, attn_mask, block_size)
    if backend == "auto" and block_size is None and cpu_fused.eligible(q, problem, key_padding_mask, attn_mask):
        return cpu_fused.fused_attention(q, k, v, problem, cu_seqlens)
    return blockwise_attention_torch(q, k, v, problem, key_padding_mask, attn_mask, block_size)
