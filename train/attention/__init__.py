"""Blockwise fp32 attention: exact, memory-linear, fp32 softmax and accumulation.

Public API:

* ``blockwise_attention(q, k, v, *, causal=True, scale=None, cu_seqlens=None, sliding_window=None,
  softcap=None, backend="auto", key_padding_mask=None, attn_mask=None, precision=None,
  block_size=None)``: see ``api.blockwise_attention``. Backends: ``torch`` (any device, the reference),
  ``triton`` (CUDA, or the CPU interpreter with ``TRITON_INTERPRET=1``), ``auto`` (triton on CUDA).
* ``register()``: registers ``attn_implementation="blockwise_fp32_global"`` (global layers to the
  kernel, sliding layers to sdpa / flash-attention) and ``"blockwise_fp32"`` (every layer to the kernel)
  with transformers' AttentionInterface and AttentionMaskInterface. Importing this package calls it.
* ``reference_attention`` / ``reference_forward_backward``: the independent fp64 reference.

Operand precision (Triton): the default is ``"ieee"`` (true fp32 products; softmax and accumulation are
fp32 in every mode). Measured against fp64 at L=8192 (max relative error over out, dq, dk, dv; the torch
backend emulating the operand rounding bit-exactly): ieee 7.8e-7, tf32 6.1e-4, bf16 operands 4.8e-3,
bf16 sdpa 1.9e-2. TF32 keeps 10 mantissa bits and bf16 7, so their errors are 800x and 6000x that of
ieee: the drift this kernel exists to remove. ieee costs speed (no tensor cores), not memory; tf32 / bf16
remain selectable (``precision=``) where speed matters more than exactness. Figures:
bench/results/attention-2026-11-29-cpu.md; tile sizes: attention-2026-11-29-cpu-sm86-sm89-tiles.md.
"""

from .api import BACKENDS, blockwise_attention, resolve_backend, triton_available, triton_interpret
from .hf import (
    ALL_LAYERS_NAME,
    GLOBAL_NAME,
    blockwise_fp32_attention_forward,
    blockwise_fp32_global_attention_forward,
    is_registered,
    plan_mask,
    register,
)
from .semantics import DEFAULT_PRECISION, PRECISIONS, reference_attention, reference_forward_backward

__all__ = [
    "ALL_LAYERS_NAME",
    "BACKENDS",
    "DEFAULT_PRECISION",
    "GLOBAL_NAME",
    "PRECISIONS",
    "blockwise_attention",
    "blockwise_fp32_attention_forward",
    "blockwise_fp32_global_attention_forward",
    "is_registered",
    "plan_mask",
    "reference_attention",
    "reference_forward_backward",
    "register",
    "resolve_backend",
    "triton_available",
    "triton_interpret",
]

register()
