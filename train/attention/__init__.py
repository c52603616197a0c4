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

Operand precision (``precision=``, or ``hf.set_precision(model, ...)`` for a transformers model):
``"auto"`` (default) is ``bf16`` for bf16 inputs on the Triton backend and ``ieee`` otherwise, so the torch
backend and fp32 inputs stay exact. ``bf16``: bf16 operands on tensor cores, with scores, softmax
statistics, logsumexp and every accumulator fp32 and the scale applied to the fp32 scores (FA2's design,
the only mode that can come near its speed). ``ieee``: true fp32 products (about 1e-6 from fp64; no
tensor cores). ``tf32``: 10-bit operands. Measured against fp64 at L=8192 (max relative error over out,
dq, dk, dv, fp32 inputs, the torch backend emulating the roundings): ieee 7.8e-7, tf32 6.1e-4, bf16
operands 4.8e-3, bf16 sdpa 1.9e-2. Figures: bench/results/attention-2026-11-29-cpu.md; tiles:
bench/results/attention-tiles-*.md.
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
    set_precision,
)
from .semantics import (
    DEFAULT_PRECISION,
    PRECISIONS,
    reference_attention,
    reference_forward_backward,
    resolve_precision,
)

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
    "resolve_precision",
    "set_precision",
    "triton_available",
    "triton_interpret",
]

register()
