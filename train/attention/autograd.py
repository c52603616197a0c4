"""The autograd wrapper both backends share: what the forward saves and how the backward uses it."""

from __future__ import annotations

from collections.abc import Callable

import torch


def attention_function(forward: Callable, backward: Callable, name: str) -> type[torch.autograd.Function]:
    """An autograd Function over ``forward(q, k, v, kpm, amask, problem, block) -> (out, lse)`` and
    ``backward(dout, q, k, v, out, lse, kpm, amask, problem, block) -> (dq, dk, dv)``. It saves q, k, v,
    the output and the fp32 logsumexp: nothing of size L^2."""

    class _Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, kpm, amask, problem, block):
            out, lse = forward(q, k, v, kpm, amask, problem, block)
            ctx.save_for_backward(q, k, v, out, lse, kpm, amask)
            ctx.problem = problem
            ctx.block = block
            return out

        @staticmethod
        def backward(ctx, dout):
            q, k, v, out, lse, kpm, amask = ctx.saved_tensors
            dq, dk, dv = backward(dout, q, k, v, out, lse, kpm, amask, ctx.problem, ctx.block)
            return dq, dk, dv, None, None, None, None

    _Function.__name__ = _Function.__qualname__ = name
    return _Function
