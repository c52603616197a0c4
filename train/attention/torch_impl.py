"""Blockwise attention in plain PyTorch: fp32 online softmax forward, recomputing backward.

The forward walks query blocks and, inside each, the key blocks that the mask can reach (causal blocks
above the diagonal, blocks outside the sliding window and blocks of other packed sequences are skipped).
It keeps a running max ``m``, normaliser ``l`` and output accumulator per query row, all in fp32, and saves
only the output and the per-row logsumexp ``lse = m + log(l)``. The backward recomputes each score block
from q and k, rebuilds ``P = exp(S - lse)`` and accumulates dq, dk, dv blockwise, so the memory held
between forward and backward is O(L * D), and the working memory is O(block_m * block_n) per head.

GQA is handled by viewing q as (B, Hkv, G, L, D): the G query heads of one key/value head are stacked
along the row axis of each product, so K and V are never repeated.

This backend runs on any device; it is also the reference the Triton backend is held to, including the
``tf32`` / ``bf16`` operand precisions, which it emulates by rounding the operands of every product.
"""

from __future__ import annotations

import torch

from .autograd import attention_function
from .semantics import Problem

DEFAULT_BLOCK = (1024, 1024)
PACKED_BLOCK = 256
_NEG_INF = float("-inf")


def round_operand(x: torch.Tensor, precision: str) -> torch.Tensor:
    """Round fp32 values to the operand precision of a tensor-core product (exact emulation).

    ``bf16``: round to nearest even on 8 mantissa bits; ``tf32``: round half away from zero on 11 bits
    (what ``cvt.rna.tf32.f32`` does). ``ieee`` and non-fp32 tensors are returned unchanged.
    """
    if precision == "ieee" or x.dtype != torch.float32:
        return x
    i = x.contiguous().view(torch.int32)
    if precision == "bf16":
        r = (i + 0x7FFF + ((i >> 16) & 1)) & -65536
    elif precision == "tf32":
        r = (i + 0x1000) & -8192
    else:
        raise ValueError(precision)
    return r.view(torch.float32)


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _key_range(p: Problem, i0: int, i1: int) -> tuple[int, int]:
    """Keys [lo, hi) that rows [i0, i1) can reach."""
    off = p.offset
    lo, hi = 0, p.len_k
    if p.causal:
        hi = min(hi, i1 - 1 + off + 1)
    if p.window is not None:
        lo = max(lo, i0 + off - p.window + 1)
        if not p.causal:
            hi = min(hi, i1 - 1 + off + p.window)
    if p.seg_host is not None:
        lo = max(lo, p.seg_start_host[i0])
        hi = min(hi, p.seg_end_host[i1 - 1])
    return lo, hi


def _structural_mask(p: Problem, i0: int, i1: int, j0: int, j1: int, device) -> torch.Tensor | None:
    """Admissibility of the (rows, keys) tile from causality, window and packing; None if all True."""
    off = p.offset
    need = False
    if p.causal and j1 - 1 > i0 + off:
        need = True
    if p.window is not None:
        if (i1 - 1 + off) - j0 >= p.window:
            need = True
        if not p.causal and (j1 - 1) - (i0 + off) >= p.window:
            need = True
    if p.seg_host is not None:
        s = {p.seg_host[i0], p.seg_host[i1 - 1], p.seg_host[j0], p.seg_host[j1 - 1]}
        if len(s) != 1 or -1 in s:
            need = True
    if not need:
        return None
    rows = torch.arange(i0, i1, device=device)[:, None] + off
    cols = torch.arange(j0, j1, device=device)[None, :]
    ok = torch.ones(i1 - i0, j1 - j0, dtype=torch.bool, device=device)
    if p.causal:
        ok &= cols <= rows
    if p.window is not None:
        ok &= (rows - cols) < p.window
        if not p.causal:
            ok &= (cols - rows) < p.window
    if p.seg_host is not None:
        sq = p.seg[i0:i1][:, None]
        sk = p.seg[j0:j1][None, :]
        ok &= (sq == sk) & (sk >= 0)
    return ok


class _Tiles:
    """Per-tile masks in the (B, Hkv, G, rows, keys) layout of the score blocks."""

    def __init__(self, p: Problem, kpm: torch.Tensor | None, amask: torch.Tensor | None, device):
        self.p = p
        self.device = device
        self.kpm = kpm
        self.kpm_full_blocks: dict[tuple[int, int], bool] = {}
        self.amask = amask
        if amask is not None:
            if amask.shape[1] == 1:
                self.amask5 = amask.unsqueeze(2)  # (Bm, 1, 1, Lq, Lk)
            else:
                self.amask5 = amask.unflatten(1, (p.heads_kv, p.groups))  # (Bm, Hkv, G, Lq, Lk)

    def keep(self, i0: int, i1: int, j0: int, j1: int) -> bool:
        """False when a bool attn_mask rules out the whole tile."""
        if self.amask is None or self.amask.dtype != torch.bool:
            return True
        return bool(self.amask5[..., i0:i1, j0:j1].any())

    def apply(self, s5: torch.Tensor, i0: int, i1: int, j0: int, j1: int) -> None:
        """Mask (and bias) the score tile ``s5`` of shape (B, Hkv, G, rows, keys) in place."""
        ok = _structural_mask(self.p, i0, i1, j0, j1, self.device)
        if ok is not None:
            s5.masked_fill_(~ok, _NEG_INF)
        if self.kpm is not None:
            key = (j0, j1)
            full = self.kpm_full_blocks.get(key)
            if full is None:
                full = bool(self.kpm[:, j0:j1].all())
                self.kpm_full_blocks[key] = full
            if not full:
                s5.masked_fill_(~self.kpm[:, None, None, None, j0:j1], _NEG_INF)
        if self.amask is not None:
            tile = self.amask5[..., i0:i1, j0:j1]
            if tile.dtype == torch.bool:
                s5.masked_fill_(~tile, _NEG_INF)
            else:
                s5.add_(tile.to(s5.dtype))


def _blocks(p: Problem, block) -> tuple[int, int]:
    if block == "default":  # the Triton backend's per-GPU tiles; here the same as None
        block = None
    if block is None and p.window is not None:
        # a window-wide tile: each query block then reaches two key blocks, so little outside the band
        # is computed (1024-wide tiles under a 128 window computed ~9x the band; measured 1.6x slower
        # end to end in a tiny Gemma 3 training step)
        b = max(64, min(DEFAULT_BLOCK[1], p.window))
        return b, b
    if block is None and p.seg_host is not None:
        # packed rows: tiles small enough to skip other sequences' blocks and the causal upper half
        return PACKED_BLOCK, PACKED_BLOCK
    if block is None:
        # about 2048 score rows (G query heads x block_m) by 1024 keys per tile: few, large operations,
        # which keeps the per-operation overhead (and OpenMP barrier stalls on busy CPUs) small
        return max(64, min(DEFAULT_BLOCK[0], 2048 // p.groups)), DEFAULT_BLOCK[1]
    if isinstance(block, int):
        return block, block
    return int(block[0]), int(block[1])


def _pass_setup(q, kpm, amask, p: Problem, block):
    """What the forward and backward pass both start from: the compute dtype, the tile sizes, the
    per-tile masks and q viewed as (B, Hkv, G, Lq, D)."""
    tiles = _Tiles(p, kpm, amask, q.device)
    return _compute_dtype(q), _blocks(p, block), tiles, q.unflatten(1, (p.heads_kv, p.groups))


def attention_forward(q, k, v, kpm, amask, p: Problem, block=None):
    """Returns (out in q.dtype, lse (B, Hq, Lq) in the compute dtype)."""
    B, Hq, Lq, D = q.shape
    Hkv, G = p.heads_kv, p.groups
    BH = B * Hkv
    cd, (bm, bn), tiles, q5 = _pass_setup(q, kpm, amask, p, block)
    prec = p.precision
    out = torch.empty(B, Hq, Lq, D, dtype=q.dtype, device=q.device)
    out5 = out.unflatten(1, (Hkv, G))
    lse = torch.empty(B, Hq, Lq, dtype=cd, device=q.device)
    lse4 = lse.unflatten(1, (Hkv, G))
    for i0 in range(0, Lq, bm):
        i1 = min(i0 + bm, Lq)
        mb = i1 - i0
        qb = round_operand(q5[:, :, :, i0:i1].to(cd).reshape(BH, G * mb, D), prec)
        m = torch.full((BH, G * mb, 1), _NEG_INF, dtype=cd, device=q.device)
        l_sum = torch.zeros((BH, G * mb, 1), dtype=cd, device=q.device)
        acc = torch.zeros((BH, G * mb, D), dtype=cd, device=q.device)
        lo, hi = _key_range(p, i0, i1)
        first = True
        for j0 in range(lo, hi, bn):
            j1 = min(j0 + bn, hi)
            if not tiles.keep(i0, i1, j0, j1):
                continue
            kb = round_operand(k[:, :, j0:j1].to(cd).reshape(BH, j1 - j0, D), prec)
            vb = round_operand(v[:, :, j0:j1].to(cd).reshape(BH, j1 - j0, D), prec)
            s = torch.bmm(qb, kb.transpose(1, 2)).mul_(p.scale)  # (BH, G*mb, nb), scaled in fp32
            if p.softcap is not None:
                s.div_(p.softcap).tanh_().mul_(p.softcap)
            tiles.apply(s.view(B, Hkv, G, mb, j1 - j0), i0, i1, j0, j1)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            m_safe = m_new.masked_fill(m_new == _NEG_INF, 0.0)
            s.sub_(m_safe).exp_()  # s is now P (unnormalised); masked entries are exactly 0
            if first:
                l_sum = s.sum(-1, keepdim=True)
                acc = torch.bmm(round_operand(s, prec), vb)
                first = False
            else:
                alpha = (m - m_safe).exp_()
                l_sum.mul_(alpha).add_(s.sum(-1, keepdim=True))
                acc.mul_(alpha).baddbmm_(round_operand(s, prec), vb)
            m = m_new
        has = l_sum > 0
        l_div = torch.where(has, l_sum, torch.ones_like(l_sum))
        m_safe = m.masked_fill(m == _NEG_INF, 0.0)
        ob = torch.where(has, acc / l_div, torch.zeros_like(acc))
        lb = torch.where(has, m_safe + torch.log(l_div), torch.full_like(l_div, _NEG_INF))
        out5[:, :, :, i0:i1] = ob.view(B, Hkv, G, mb, D).to(q.dtype)
        lse4[:, :, :, i0:i1] = lb.view(B, Hkv, G, mb)
    return out, lse


def attention_backward(dout, q, k, v, out, lse, kpm, amask, p: Problem, block=None):
    """Returns (dq, dk, dv) in the dtypes of q, k, v."""
    B, Hq, Lq, D = q.shape
    Hkv, G, Lk = p.heads_kv, p.groups, p.len_k
    BH = B * Hkv
    cd, (bm, bn), tiles, q5 = _pass_setup(q, kpm, amask, p, block)
    prec = p.precision
    do5 = dout.unflatten(1, (Hkv, G))
    delta5 = (dout.to(cd) * out.to(cd)).sum(-1).unflatten(1, (Hkv, G))  # (B, Hkv, G, Lq)
    lse5 = lse.unflatten(1, (Hkv, G))
    dq = torch.empty(B, Hq, Lq, D, dtype=q.dtype, device=q.device)
    dq5 = dq.unflatten(1, (Hkv, G))
    dk = torch.zeros(BH, Lk, D, dtype=cd, device=q.device)
    dv = torch.zeros(BH, Lk, D, dtype=cd, device=q.device)
    for i0 in range(0, Lq, bm):
        i1 = min(i0 + bm, Lq)
        mb = i1 - i0
        qb = round_operand(q5[:, :, :, i0:i1].to(cd).reshape(BH, G * mb, D), prec)
        dob = round_operand(do5[:, :, :, i0:i1].to(cd).reshape(BH, G * mb, D), prec)
        lb = lse5[:, :, :, i0:i1].reshape(BH, G * mb, 1)
        lb = lb.masked_fill(lb == _NEG_INF, float("inf"))  # empty rows: P = exp(S - inf) = 0
        db = delta5[:, :, :, i0:i1].reshape(BH, G * mb, 1)
        neg_lb = -lb
        neg_db = -db
        dqb = torch.zeros(BH, G * mb, D, dtype=cd, device=q.device)
        lo, hi = _key_range(p, i0, i1)
        for j0 in range(lo, hi, bn):
            j1 = min(j0 + bn, hi)
            if not tiles.keep(i0, i1, j0, j1):
                continue
            nb = j1 - j0
            kb = round_operand(k[:, :, j0:j1].to(cd).reshape(BH, nb, D), prec)
            vb = round_operand(v[:, :, j0:j1].to(cd).reshape(BH, nb, D), prec)
            t = None
            if p.softcap is None:
                s = torch.baddbmm(neg_lb, qb, kb.transpose(1, 2), alpha=p.scale)  # S - lse in one pass
                tiles.apply(s.view(B, Hkv, G, mb, nb), i0, i1, j0, j1)
            else:
                s = torch.bmm(qb, kb.transpose(1, 2)).mul_(p.scale)
                t = s.div_(p.softcap).tanh_()  # in place: s holds tanh(x / c)
                s = t * p.softcap
                tiles.apply(s.view(B, Hkv, G, mb, nb), i0, i1, j0, j1)
                s.sub_(lb)
            pt = s.exp_()  # P, recomputed
            pr = round_operand(pt, prec)
            dv[:, j0:j1].baddbmm_(pr.transpose(1, 2), dob)
            ds = torch.baddbmm(neg_db, dob, vb.transpose(1, 2))  # dP - delta in one pass
            ds.mul_(pt)  # dS = P * (dP - delta)
            if t is not None:
                ds.mul_(1.0 - t * t)
            ds = round_operand(ds, prec)
            dqb.baddbmm_(ds, kb)
            dk[:, j0:j1].baddbmm_(ds.transpose(1, 2), qb)
        dq5[:, :, :, i0:i1] = (dqb * p.scale).view(B, Hkv, G, mb, D).to(q.dtype)
    dk = (dk * p.scale).view(B, Hkv, Lk, D).to(k.dtype)  # dk accumulated dS^T q of the unscaled q
    dv = dv.view(B, Hkv, Lk, D).to(v.dtype)
    return dq, dk, dv


BlockwiseAttentionFunction = attention_function(
    attention_forward, attention_backward, "BlockwiseAttentionFunction"
)


def blockwise_attention_torch(q, k, v, p: Problem, kpm=None, amask=None, block=None):
    return BlockwiseAttentionFunction.apply(q, k, v, kpm, amask, p, block)

