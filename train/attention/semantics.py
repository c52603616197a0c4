"""Argument checking, the shared semantics of every backend, and an independent fp64 reference.

Semantics (all backends, all precisions)
---------------------------------------
Shapes: ``q`` is (B, Hq, Lq, D); ``k`` and ``v`` are (B, Hkv, Lk, D) with ``Hq % Hkv == 0``. Query head
``h`` reads key/value head ``h // (Hq // Hkv)`` (the ``repeat_kv`` convention of transformers), without
ever materialising repeated K/V.

Query ``i`` sits at absolute position ``i + (Lk - Lq)`` (bottom-right alignment: the last query is the last
key, as in decoding against a KV cache). With ``Lq == Lk`` this is the ordinary square case. Query ``i``
may attend key ``j`` iff all of the following hold:

* ``causal``: ``j <= i_abs``;
* ``sliding_window=w``: ``i_abs - j < w`` (and, when not causal, also ``j - i_abs < w``). This is the
  off-by-one of transformers' ``sliding_window_overlay`` (``kv_idx > q_idx - sliding_window``): a window
  of ``w`` keys including the query's own position;
* ``cu_seqlens`` (B == 1, Lq == Lk): ``i`` and ``j`` lie in the same packed sequence
  ``[cu[s], cu[s+1])``. Positions at or past ``cu[-1]`` belong to no sequence: they attend nothing and
  nobody attends them;
* ``key_padding_mask`` (B, Lk) bool: key ``j`` of batch row ``b`` is valid (True);
* ``attn_mask`` bool, broadcastable to (B, Hq, Lq, Lk): True at (b, h, i, j);
  a floating ``attn_mask`` is an additive bias instead (``-inf`` entries mask).

Scores are ``x = scale * q.k`` (``scale`` defaults to ``D ** -0.5``; it multiplies the fp32 product, so
no operand is rounded after scaling), then ``softcap * tanh(x / softcap)``
when ``softcap`` is set, then the float bias. A query row with no admissible key returns zeros (its
logsumexp is ``-inf`` and its gradients are zero), never NaN. Softmax, its statistics and every
accumulation are in fp32 (fp64 when the inputs are fp64, torch backend only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

PRECISIONS = ("ieee", "tf32", "bf16")
# ``"auto"`` (or None) resolves per call with ``resolve_precision``: bf16 operands for bf16 inputs on the
# Triton backend (tensor cores; the only mode that can come near FlashAttention-2's speed), true fp32
# (``ieee``) everywhere else, so the torch backend and fp32 inputs stay exact.
DEFAULT_PRECISION = "auto"
MAX_HEAD_DIM = 256


@dataclass(frozen=True)
class Problem:
    """Validated attention problem shared by the backends (host-side integers only)."""

    batch: int
    heads_q: int
    heads_kv: int
    len_q: int
    len_k: int
    head_dim: int
    causal: bool
    scale: float
    window: int | None
    softcap: float | None
    precision: str
    # packed sequences (B == 1, Lq == Lk): per position segment id (-1 outside every sequence) and the
    # [start, end) of its segment; host copies for loop bounds
    seg: torch.Tensor | None
    seg_start: torch.Tensor | None
    seg_end: torch.Tensor | None
    seg_host: tuple[int, ...] | None
    seg_start_host: tuple[int, ...] | None
    seg_end_host: tuple[int, ...] | None

    @property
    def groups(self) -> int:
        return self.heads_q // self.heads_kv

    @property
    def offset(self) -> int:
        """Absolute position of query 0 (bottom-right alignment)."""
        return self.len_k - self.len_q


def resolve_precision(precision: str | None, dtype: torch.dtype, backend: str) -> str:
    """The operand precision of one call: ``precision`` itself, or for ``"auto"`` / None ``"bf16"`` when
    the inputs are bf16 and ``backend`` is ``"triton"``, else ``"ieee"``."""
    if precision is None or precision == "auto":
        return "bf16" if backend == "triton" and dtype == torch.bfloat16 else "ieee"
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be 'auto' or one of {PRECISIONS}, got {precision!r}")
    return precision


def segments_from_cu_seqlens(cu_seqlens: torch.Tensor, length: int, device) -> tuple[torch.Tensor, ...]:
    """Per-position segment id, segment start and segment end for packed sequences."""
    cu = [int(x) for x in cu_seqlens.detach().to("cpu", torch.int64).tolist()]
    if len(cu) < 2 or cu[0] != 0:
        raise ValueError(f"cu_seqlens must start at 0 and hold at least 2 entries, got {cu[:8]}")
    if any(b < a for a, b in zip(cu, cu[1:])):
        raise ValueError("cu_seqlens must be non-decreasing")
    if cu[-1] > length:
        raise ValueError(f"cu_seqlens[-1]={cu[-1]} exceeds the sequence length {length}")
    cu_t = torch.tensor(cu, dtype=torch.int64)
    pos = torch.arange(length, dtype=torch.int64)
    seg = torch.searchsorted(cu_t[1:], pos, right=True)  # index of the sequence holding pos
    inside = pos < cu[-1]
    seg = torch.where(inside, seg, torch.full_like(seg, -1))
    safe = seg.clamp_min(0)
    start = torch.where(inside, cu_t[safe], torch.full_like(seg, cu[-1]))
    end = torch.where(inside, cu_t[safe + 1], torch.full_like(seg, cu[-1]))
    host = (tuple(seg.tolist()), tuple(start.tolist()), tuple(end.tolist()))
    dev = [t.to(device=device, dtype=torch.int32) for t in (seg, start, end)]
    return (*dev, *host)


def check_problem(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    scale: float | None,
    cu_seqlens: torch.Tensor | None,
    sliding_window: int | None,
    softcap: float | None,
    key_padding_mask: torch.Tensor | None,
    attn_mask: torch.Tensor | None,
    precision: str | None,
) -> Problem:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"q, k, v must be 4-D (B, H, L, D); got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    B, Hq, Lq, D = q.shape
    Bk, Hkv, Lk, Dk = k.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if Bk != B or Dk != D:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} disagree on batch or head_dim")
    if Hkv < 1 or Hq % Hkv != 0:
        raise ValueError(f"query heads ({Hq}) must be a multiple of key/value heads ({Hkv})")
    if not 1 <= D <= MAX_HEAD_DIM:
        raise ValueError(f"head_dim must be in [1, {MAX_HEAD_DIM}], got {D}")
    if not (q.is_floating_point() and k.is_floating_point() and v.is_floating_point()):
        raise TypeError("q, k, v must be floating point")
    if not (q.device == k.device == v.device):
        raise ValueError("q, k, v must be on the same device")
    if scale is None:
        scale = D**-0.5
    scale = float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    if sliding_window is not None:
        sliding_window = int(sliding_window)
        if sliding_window < 1:
            raise ValueError(f"sliding_window must be >= 1 or None, got {sliding_window}")
    if softcap is not None:
        softcap = float(softcap)
        if not softcap > 0:
            raise ValueError(f"softcap must be > 0 or None, got {softcap}")
    precision = resolve_precision(precision, q.dtype, "torch")
    seg = seg_start = seg_end = None
    seg_host = seg_start_host = seg_end_host = None
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f"cu_seqlens needs batch size 1 (packed sequences), got {B}")
        if Lq != Lk:
            raise ValueError(f"cu_seqlens needs Lq == Lk, got {Lq} and {Lk}")
        if cu_seqlens.dim() != 1 or cu_seqlens.is_floating_point():
            raise ValueError("cu_seqlens must be a 1-D integer tensor")
        seg, seg_start, seg_end, seg_host, seg_start_host, seg_end_host = segments_from_cu_seqlens(
            cu_seqlens, Lq, q.device
        )
    if key_padding_mask is not None:
        if key_padding_mask.shape != (B, Lk) or key_padding_mask.dtype != torch.bool:
            raise ValueError(f"key_padding_mask must be a bool tensor of shape {(B, Lk)}")
    if attn_mask is not None:
        if attn_mask.dim() != 4:
            raise ValueError("attn_mask must be 4-D, broadcastable to (B, Hq, Lq, Lk)")
        mb, mh, mq, mk = attn_mask.shape
        if mb not in (1, B) or mh not in (1, Hq) or mq != Lq or mk != Lk:
            raise ValueError(
                f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to {(B, Hq, Lq, Lk)}"
            )
        if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
            raise TypeError("attn_mask must be bool (True = attend) or floating (additive bias)")
    return Problem(
        batch=B,
        heads_q=Hq,
        heads_kv=Hkv,
        len_q=Lq,
        len_k=Lk,
        head_dim=D,
        causal=bool(causal),
        scale=scale,
        window=sliding_window,
        softcap=softcap,
        precision=precision,
        seg=seg,
        seg_start=seg_start,
        seg_end=seg_end,
        seg_host=seg_host,
        seg_start_host=seg_start_host,
        seg_end_host=seg_end_host,
    )


# ----------------------------------------------------------------------------------------------------
# Independent reference: dense masks built position by position, plain softmax, autograd for gradients.
# ----------------------------------------------------------------------------------------------------


def reference_allowed(
    batch: int,
    len_q: int,
    len_k: int,
    *,
    causal: bool = True,
    sliding_window: int | None = None,
    cu_seqlens: torch.Tensor | None = None,
    key_padding_mask: torch.Tensor | None = None,
    rows: range | None = None,
    device="cpu",
) -> torch.Tensor:
    """Boolean (B, 1, rows, Lk) admissibility mask, built without any of the backends' helpers."""
    rows = range(len_q) if rows is None else rows
    qi = torch.tensor(list(rows), device=device)[:, None] + (len_k - len_q)
    kj = torch.arange(len_k, device=device)[None, :]
    allowed = torch.ones(len(rows), len_k, dtype=torch.bool, device=device)
    if causal:
        allowed &= kj <= qi
    if sliding_window is not None:
        allowed &= (qi - kj) < sliding_window
        if not causal:
            allowed &= (kj - qi) < sliding_window
    if cu_seqlens is not None:
        same = torch.zeros_like(allowed)
        cu = [int(x) for x in cu_seqlens.tolist()]
        q_pos = qi[:, 0]
        for a, b in zip(cu, cu[1:]):
            in_q = (q_pos >= a) & (q_pos < b)
            in_k = (kj[0] >= a) & (kj[0] < b)
            same |= in_q[:, None] & in_k[None, :]
        allowed &= same
    allowed = allowed[None, None].expand(batch, 1, -1, -1)
    if key_padding_mask is not None:
        allowed = allowed & key_padding_mask.to(device)[:, None, None, :]
    return allowed


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = True,
    scale: float | None = None,
    cu_seqlens: torch.Tensor | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    key_padding_mask: torch.Tensor | None = None,
    attn_mask: torch.Tensor | None = None,
    rows: range | None = None,
    len_q: int | None = None,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """Naive materialised attention in ``dtype`` (fp64 by default); differentiable by autograd.

    For memory-bounded panels, ``q`` may hold only the query rows ``rows`` of a problem with ``len_q``
    queries in all (``attn_mask`` still covers all ``len_q`` rows).
    """
    B, Hq, _, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    G = Hq // Hkv
    Lq = q.shape[2] if len_q is None else len_q
    rows = range(Lq) if rows is None else rows
    if q.shape[2] != len(rows):
        raise ValueError(f"q holds {q.shape[2]} rows but rows={rows}")
    scale = D**-0.5 if scale is None else scale
    qd = q.to(dtype)
    kd = k.to(dtype).repeat_interleave(G, dim=1)
    vd = v.to(dtype).repeat_interleave(G, dim=1)
    x = torch.matmul(qd, kd.transpose(-1, -2)) * scale
    if softcap is not None:
        x = softcap * torch.tanh(x / softcap)
    allowed = reference_allowed(
        B,
        Lq,
        Lk,
        causal=causal,
        sliding_window=sliding_window,
        cu_seqlens=cu_seqlens,
        key_padding_mask=key_padding_mask,
        rows=rows,
        device=q.device,
    )
    if attn_mask is not None:
        am = attn_mask[:, :, rows.start : rows.stop]
        if am.dtype == torch.bool:
            allowed = allowed & am
        else:
            x = x + am.to(dtype)
    x = x.masked_fill(~allowed, float("-inf"))
    m = x.detach().amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(x - m)
    denom = e.sum(-1, keepdim=True)
    p = e / torch.where(denom > 0, denom, torch.ones_like(denom))
    return torch.matmul(p, vd)


def reference_forward_backward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dout: torch.Tensor,
    *,
    panel: int = 512,
    dtype: torch.dtype = torch.float64,
    **semantics,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Output and (dq, dk, dv) for ``sum(out * dout)`` in ``dtype``, one panel of query rows at a time.

    Each panel is exact (no online softmax); memory is O(panel * Lk) per head. Used by the benchmark at
    long L where a fully materialised fp64 reference would not fit.
    """
    B, Hq, Lq, D = q.shape
    kd = k.detach().to(dtype).requires_grad_(True)
    vd = v.detach().to(dtype).requires_grad_(True)
    qd = q.detach().to(dtype)
    out = torch.empty(B, Hq, Lq, D, dtype=dtype, device=q.device)
    dq = torch.empty_like(out)
    dk = torch.zeros_like(kd)
    dv = torch.zeros_like(vd)
    for r0 in range(0, Lq, panel):
        r1 = min(r0 + panel, Lq)
        qp = qd[:, :, r0:r1].clone().requires_grad_(True)
        o = reference_attention(qp, kd, vd, rows=range(r0, r1), len_q=Lq, dtype=dtype, **semantics)
        gq, gk, gv = torch.autograd.grad(o, (qp, kd, vd), dout[:, :, r0:r1].to(dtype))
        out[:, :, r0:r1] = o.detach()
        dq[:, :, r0:r1] = gq
        dk += gk
        dv += gv
    return out, dq, dk, dv
