"""Triton kernels for blockwise fp32 attention (forward, dK/dV, dQ) and their autograd wrapper.

Same semantics as ``torch_impl`` (see ``semantics``): scores, softmax statistics and all accumulators
are fp32; operands of the products are fp32 (``ieee``), TF32, or bf16 (``precision``). In the
interpreter loads are upcast to fp32 right away (it mishandles bf16 arithmetic).

* Forward: one program per (query block, batch * query head). Its key loop runs over [lo, hi) only:
  causal blocks above the diagonal, blocks outside the sliding window and other packed sequences are
  never visited. GQA: query head h reads key/value head h // G.
* dK/dV: one program per (key block, batch * key/value head); it loops over the G query heads of its
  group and over the query blocks that can see its keys, so GQA needs no atomics.
* dQ: one program per (query block, batch * query head), the forward's loop again.

Operand precision (``semantics.resolve_precision``; bf16 inputs default to ``bf16``): on the GPU ``tf32``
uses ``input_precision="tf32"`` and ``bf16`` keeps q, k, v, dO in bf16 and casts P and dS to bf16 for the
products (fp32 accumulation); the score scale multiplies the fp32 product. Under ``TRITON_INTERPRET=1`` (CPU CI) the
interpreter computes every dot in fp32 and cannot cast to bf16 correctly, so both modes are emulated
there by rounding the fp32 operands bit-exactly (same rounding as ``torch_impl.round_operand``).

Tiles: each kernel has a ladder of tile configurations (``_CONFIGS``); on the GPU the launcher takes
the first that compiles without register spills within the device's shared memory (or ``SHARED_CAP``),
so one ladder serves sm80 / sm86 / sm89 / sm90. ``compile_offline`` and bench/tiles.py check the ladders
with ptxas without a GPU.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .autograd import attention_function
from .semantics import Problem

_PREC_CODE = {"ieee": 0, "tf32": 1, "bf16": 2}
PRECISION_NAMES = tuple(_PREC_CODE)


def _interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


# ------------------------------------------------------------------------------------------------
# device helpers
# ------------------------------------------------------------------------------------------------


# Only builtins and our own jit functions inside the kernels: the jit helpers of triton.language.standard
# (tl.zeros, tl.max, tl.sum, ...) are compiled or interpreted according to TRITON_INTERPRET at the moment
# triton was first imported, which under pytest may be before the Triton test module sets it.


@triton.jit
def _max_combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def _add_combine(a, b):
    return a + b


@triton.jit
def _round_bf16(x):
    i = x.to(tl.int32, bitcast=True)
    i = (i + 0x7FFF + ((i >> 16) & 1)) & -65536
    return i.to(tl.float32, bitcast=True)


@triton.jit
def _round_tf32(x):
    i = x.to(tl.int32, bitcast=True)
    i = (i + 0x1000) & -8192
    return i.to(tl.float32, bitcast=True)


@triton.jit
def _mm(a, b, PREC: tl.constexpr, EMULATE: tl.constexpr):
    """fp32-accumulated a @ b with the chosen operand precision."""
    if PREC == 0:
        c = tl.dot(a, b, input_precision="ieee")
    elif PREC == 1:
        if EMULATE:
            c = tl.dot(_round_tf32(a), _round_tf32(b), input_precision="ieee")
        else:
            c = tl.dot(a, b, input_precision="tf32")
    else:
        if EMULATE:
            c = tl.dot(_round_bf16(a), _round_bf16(b), input_precision="ieee")
        else:
            c = tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), out_dtype=tl.float32)
    return c


@triton.jit
def _operand(x, PREC: tl.constexpr, EMULATE: tl.constexpr):
    """A loaded q/k/v/dO tile as a product operand: bf16 in bf16 mode on the GPU (registers and shared
    memory halve, the dot needs no conversion), fp32 otherwise (the interpreter emulates the rounding)."""
    if PREC == 2 and not EMULATE:
        y = x.to(tl.bfloat16)
    else:
        y = x.to(tl.float32)
    return y


@triton.jit
def _tanh(x):
    # Cephes tanhf: odd minimax polynomial below 0.625, 1 - 2 / (exp(2|x|) + 1) above (no libdevice in
    # the interpreter). Error about 2 ulp.
    ax = tl.abs(x)
    z = x * x
    poly = (
        (((-5.70498872745e-3 * z + 2.06390887954e-2) * z - 5.37397155531e-2) * z + 1.33314422036e-1) * z
        - 3.33332819422e-1
    ) * z * x + x
    e = tl.exp(2.0 * ax)
    big = 1.0 - 2.0 / (e + 1.0)
    big = tl.where(x < 0, -big, big)
    return tl.where(ax < 0.625, poly, big)


@triton.jit
def _key_range(
    row_first,
    row_last,
    LK,
    OFF,
    WINDOW,
    SEG_START,
    SEG_END,
    CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    VARLEN: tl.constexpr,
):
    lo = row_first * 0
    hi = lo + LK
    if CAUSAL:
        hi = tl.minimum(hi, row_last + OFF + 1)
    if HAS_WINDOW:
        lo = tl.maximum(lo, row_first + OFF - WINDOW + 1)
        if not CAUSAL:
            hi = tl.minimum(hi, row_last + OFF + WINDOW)
    if VARLEN:
        lo = tl.maximum(lo, tl.load(SEG_START + row_first))
        hi = tl.minimum(hi, tl.load(SEG_END + row_last))
    return lo, hi


@triton.jit
def _query_range(
    col_first,
    col_last,
    LQ,
    OFF,
    WINDOW,
    SEG_START,
    SEG_END,
    CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    VARLEN: tl.constexpr,
):
    lo = col_first * 0
    hi = lo + LQ
    if CAUSAL:
        lo = tl.maximum(lo, col_first - OFF)
    if HAS_WINDOW:
        hi = tl.minimum(hi, col_last - OFF + WINDOW)
        if not CAUSAL:
            lo = tl.maximum(lo, col_first - OFF - WINDOW + 1)
    if VARLEN:
        lo = tl.maximum(lo, tl.load(SEG_START + col_first))
        hi = tl.minimum(hi, tl.load(SEG_END + col_last))
    return lo, hi


@triton.jit
def _scores(
    q,
    k,
    offs_m,
    offs_n,
    b,
    h,
    LQ,
    LK,
    OFF,
    WINDOW,
    scale,
    softcap,
    SEG,
    KPM,
    s_kpm_b,
    AM,
    s_am_b,
    s_am_h,
    s_am_m,
    s_am_n,
    CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    VARLEN: tl.constexpr,
    HAS_KPM: tl.constexpr,
    MASK_KIND: tl.constexpr,
    PREC: tl.constexpr,
    EMULATE: tl.constexpr,
):
    """Masked scores and tanh(x / softcap) (for the softcap derivative); the scale multiplies the fp32
    product, never an operand before rounding."""
    s = _mm(q, tl.trans(k), PREC, EMULATE) * scale
    t = s
    if HAS_SOFTCAP:
        t = _tanh(s / softcap)
        s = softcap * t
    row = offs_m[:, None] + OFF
    col = offs_n[None, :]
    inb = (offs_m[:, None] < LQ) & (col < LK)
    valid = inb
    if CAUSAL:
        valid = valid & (col <= row)
        if HAS_WINDOW:
            valid = valid & (row - col < WINDOW)
    else:
        if HAS_WINDOW:
            valid = valid & (row - col < WINDOW) & (col - row < WINDOW)
    if VARLEN:
        sq = tl.load(SEG + offs_m, mask=offs_m < LQ, other=-1)
        sk = tl.load(SEG + offs_n, mask=offs_n < LK, other=-2)
        valid = valid & (sq[:, None] == sk[None, :]) & (sk[None, :] >= 0)
    if HAS_KPM:
        kp = tl.load(KPM + b * s_kpm_b + offs_n, mask=offs_n < LK, other=0)
        valid = valid & (kp[None, :] != 0)
    if MASK_KIND != 0:
        am_ptrs = AM + b * s_am_b + h * s_am_h + offs_m[:, None] * s_am_m + offs_n[None, :] * s_am_n
        if MASK_KIND == 1:
            am = tl.load(am_ptrs, mask=inb, other=0)
            valid = valid & (am != 0)
        else:
            bias = tl.load(am_ptrs, mask=inb, other=0.0).to(tl.float32)
            s = s + bias
    s = tl.where(valid, s, float("-inf"))
    return s, t


# ------------------------------------------------------------------------------------------------
# kernels
# ------------------------------------------------------------------------------------------------


@triton.jit
def _fwd_kernel(
    Q,
    K,
    V,
    Out,
    LSE,
    SEG,
    SEG_START,
    SEG_END,
    KPM,
    AM,
    sqb,
    sqh,
    sqm,
    sqd,
    skb,
    skh,
    skn,
    skd,
    svb,
    svh,
    svn,
    svd,
    sob,
    soh,
    som,
    sod,
    s_lse_b,
    s_lse_h,
    s_kpm_b,
    s_am_b,
    s_am_h,
    s_am_m,
    s_am_n,
    HQ,
    G,
    LQ,
    LK,
    OFF,
    WINDOW,
    scale,
    softcap,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    VARLEN: tl.constexpr,
    HAS_KPM: tl.constexpr,
    MASK_KIND: tl.constexpr,
    PREC: tl.constexpr,
    EMULATE: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // HQ
    h = pid_bh % HQ
    hk = h // G
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < D
    q = tl.load(
        Q + b * sqb + h * sqh + offs_m[:, None] * sqm + offs_d[None, :] * sqd,
        mask=(offs_m[:, None] < LQ) & d_ok,
        other=0.0,
    )
    q = _operand(q, PREC, EMULATE)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.full([BLOCK_M], 0.0, dtype=tl.float32)
    acc = tl.full([BLOCK_M, BLOCK_D], 0.0, dtype=tl.float32)
    row_first = pid_m * BLOCK_M
    row_last = tl.minimum(row_first + BLOCK_M, LQ) - 1
    lo, hi = _key_range(row_first, row_last, LK, OFF, WINDOW, SEG_START, SEG_END, CAUSAL, HAS_WINDOW, VARLEN)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_ok = (offs_n[:, None] < LK) & d_ok
        k = tl.load(
            K + b * skb + hk * skh + offs_n[:, None] * skn + offs_d[None, :] * skd, mask=kv_ok, other=0.0
        )
        k = _operand(k, PREC, EMULATE)
        s, t = _scores(
            q, k, offs_m, offs_n, b, h, LQ, LK, OFF, WINDOW, scale, softcap, SEG, KPM, s_kpm_b,
            AM, s_am_b, s_am_h, s_am_m, s_am_n,
            CAUSAL, HAS_WINDOW, HAS_SOFTCAP, VARLEN, HAS_KPM, MASK_KIND, PREC, EMULATE,
        )  # fmt: skip
        m_new = tl.maximum(m_i, tl.reduce(s, 1, _max_combine))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m_i - m_safe)
        p = tl.exp(s - m_safe[:, None])
        l_i = l_i * alpha + tl.reduce(p, 1, _add_combine)
        v = tl.load(
            V + b * svb + hk * svh + offs_n[:, None] * svn + offs_d[None, :] * svd, mask=kv_ok, other=0.0
        )
        v = _operand(v, PREC, EMULATE)
        acc = acc * alpha[:, None] + _mm(p, v, PREC, EMULATE)
        m_i = m_new
    has = l_i > 0.0
    l_div = tl.where(has, l_i, 1.0)
    m_safe = tl.where(m_i == float("-inf"), 0.0, m_i)
    out = acc / l_div[:, None]
    lse = tl.where(has, m_safe + tl.log(l_div), float("-inf"))
    tl.store(
        Out + b * sob + h * soh + offs_m[:, None] * som + offs_d[None, :] * sod,
        out,
        mask=(offs_m[:, None] < LQ) & d_ok,
    )
    tl.store(LSE + b * s_lse_b + h * s_lse_h + offs_m, lse, mask=offs_m < LQ)


@triton.jit
def _bwd_dkdv_kernel(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DK,
    DV,
    SEG,
    SEG_START,
    SEG_END,
    KPM,
    AM,
    sqb,
    sqh,
    sqm,
    sqd,
    skb,
    skh,
    skn,
    skd,
    svb,
    svh,
    svn,
    svd,
    sdob,
    sdoh,
    sdom,
    sdod,
    s_lse_b,
    s_lse_h,
    sdkb,
    sdkh,
    sdkn,
    sdkd,
    s_kpm_b,
    s_am_b,
    s_am_h,
    s_am_m,
    s_am_n,
    HKV,
    G,
    LQ,
    LK,
    OFF,
    WINDOW,
    scale,
    softcap,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    VARLEN: tl.constexpr,
    HAS_KPM: tl.constexpr,
    MASK_KIND: tl.constexpr,
    PREC: tl.constexpr,
    EMULATE: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // HKV
    hk = pid_bh % HKV
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < D
    kv_ok = (offs_n[:, None] < LK) & d_ok
    k = tl.load(K + b * skb + hk * skh + offs_n[:, None] * skn + offs_d[None, :] * skd, mask=kv_ok, other=0.0)
    k = _operand(k, PREC, EMULATE)
    v = tl.load(V + b * svb + hk * svh + offs_n[:, None] * svn + offs_d[None, :] * svd, mask=kv_ok, other=0.0)
    v = _operand(v, PREC, EMULATE)
    dk = tl.full([BLOCK_N, BLOCK_D], 0.0, dtype=tl.float32)
    dv = tl.full([BLOCK_N, BLOCK_D], 0.0, dtype=tl.float32)
    col_first = pid_n * BLOCK_N
    col_last = tl.minimum(col_first + BLOCK_N, LK) - 1
    lo, hi = _query_range(
        col_first, col_last, LQ, OFF, WINDOW, SEG_START, SEG_END, CAUSAL, HAS_WINDOW, VARLEN
    )
    for g in range(0, G):
        h = hk * G + g
        for start_m in range(lo, hi, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            row_ok = offs_m < LQ
            q = tl.load(
                Q + b * sqb + h * sqh + offs_m[:, None] * sqm + offs_d[None, :] * sqd,
                mask=row_ok[:, None] & d_ok,
                other=0.0,
            )
            q = _operand(q, PREC, EMULATE)
            do = tl.load(
                DO + b * sdob + h * sdoh + offs_m[:, None] * sdom + offs_d[None, :] * sdod,
                mask=row_ok[:, None] & d_ok,
                other=0.0,
            )
            do = _operand(do, PREC, EMULATE)
            lse = tl.load(LSE + b * s_lse_b + h * s_lse_h + offs_m, mask=row_ok, other=float("inf"))
            lse = tl.where(lse == float("-inf"), float("inf"), lse)
            delta = tl.load(DELTA + b * s_lse_b + h * s_lse_h + offs_m, mask=row_ok, other=0.0)
            s, t = _scores(
                q, k, offs_m, offs_n, b, h, LQ, LK, OFF, WINDOW, scale, softcap, SEG, KPM, s_kpm_b,
                AM, s_am_b, s_am_h, s_am_m, s_am_n,
                CAUSAL, HAS_WINDOW, HAS_SOFTCAP, VARLEN, HAS_KPM, MASK_KIND, PREC, EMULATE,
            )  # fmt: skip
            p = tl.exp(s - lse[:, None])
            dv += _mm(tl.trans(p), do, PREC, EMULATE)
            dp = _mm(do, tl.trans(v), PREC, EMULATE)
            ds = p * (dp - delta[:, None])
            if HAS_SOFTCAP:
                ds = ds * (1.0 - t * t)
            dk += _mm(tl.trans(ds), q, PREC, EMULATE)
    dk = dk * scale
    tl.store(DK + b * sdkb + hk * sdkh + offs_n[:, None] * sdkn + offs_d[None, :] * sdkd, dk, mask=kv_ok)
    tl.store(DV + b * sdkb + hk * sdkh + offs_n[:, None] * sdkn + offs_d[None, :] * sdkd, dv, mask=kv_ok)


@triton.jit
def _bwd_dq_kernel(
    Q,
    K,
    V,
    DO,
    LSE,
    DELTA,
    DQ,
    SEG,
    SEG_START,
    SEG_END,
    KPM,
    AM,
    sqb,
    sqh,
    sqm,
    sqd,
    skb,
    skh,
    skn,
    skd,
    svb,
    svh,
    svn,
    svd,
    sdob,
    sdoh,
    sdom,
    sdod,
    s_lse_b,
    s_lse_h,
    sdqb,
    sdqh,
    sdqm,
    sdqd,
    s_kpm_b,
    s_am_b,
    s_am_h,
    s_am_m,
    s_am_n,
    HQ,
    G,
    LQ,
    LK,
    OFF,
    WINDOW,
    scale,
    softcap,
    D: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    VARLEN: tl.constexpr,
    HAS_KPM: tl.constexpr,
    MASK_KIND: tl.constexpr,
    PREC: tl.constexpr,
    EMULATE: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // HQ
    h = pid_bh % HQ
    hk = h // G
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < D
    row_ok = offs_m < LQ
    q = tl.load(
        Q + b * sqb + h * sqh + offs_m[:, None] * sqm + offs_d[None, :] * sqd,
        mask=row_ok[:, None] & d_ok,
        other=0.0,
    )
    q = _operand(q, PREC, EMULATE)
    do = tl.load(
        DO + b * sdob + h * sdoh + offs_m[:, None] * sdom + offs_d[None, :] * sdod,
        mask=row_ok[:, None] & d_ok,
        other=0.0,
    )
    do = _operand(do, PREC, EMULATE)
    lse = tl.load(LSE + b * s_lse_b + h * s_lse_h + offs_m, mask=row_ok, other=float("inf"))
    lse = tl.where(lse == float("-inf"), float("inf"), lse)
    delta = tl.load(DELTA + b * s_lse_b + h * s_lse_h + offs_m, mask=row_ok, other=0.0)
    dq = tl.full([BLOCK_M, BLOCK_D], 0.0, dtype=tl.float32)
    row_first = pid_m * BLOCK_M
    row_last = tl.minimum(row_first + BLOCK_M, LQ) - 1
    lo, hi = _key_range(row_first, row_last, LK, OFF, WINDOW, SEG_START, SEG_END, CAUSAL, HAS_WINDOW, VARLEN)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_ok = (offs_n[:, None] < LK) & d_ok
        k = tl.load(
            K + b * skb + hk * skh + offs_n[:, None] * skn + offs_d[None, :] * skd, mask=kv_ok, other=0.0
        )
        k = _operand(k, PREC, EMULATE)
        v = tl.load(
            V + b * svb + hk * svh + offs_n[:, None] * svn + offs_d[None, :] * svd, mask=kv_ok, other=0.0
        )
        v = _operand(v, PREC, EMULATE)
        s, t = _scores(
            q, k, offs_m, offs_n, b, h, LQ, LK, OFF, WINDOW, scale, softcap, SEG, KPM, s_kpm_b,
            AM, s_am_b, s_am_h, s_am_m, s_am_n,
            CAUSAL, HAS_WINDOW, HAS_SOFTCAP, VARLEN, HAS_KPM, MASK_KIND, PREC, EMULATE,
        )  # fmt: skip
        p = tl.exp(s - lse[:, None])
        dp = _mm(do, tl.trans(v), PREC, EMULATE)
        ds = p * (dp - delta[:, None])
        if HAS_SOFTCAP:
            ds = ds * (1.0 - t * t)
        dq += _mm(ds, k, PREC, EMULATE)
    dq = dq * scale
    tl.store(
        DQ + b * sdqb + h * sdqh + offs_m[:, None] * sdqm + offs_d[None, :] * sdqd,
        dq,
        mask=row_ok[:, None] & d_ok,
    )


# ------------------------------------------------------------------------------------------------
# host side
# ------------------------------------------------------------------------------------------------

# (block_m, block_n, num_warps, num_stages) per (kernel, head-dim class, precision), in order of
# preference. The launcher takes the first that compiles without register spills within the device's
# shared memory, so an sm90 (227 KiB) keeps the large tiles at the top while sm86 / sm89 (99 KiB) fall
# through to the smaller ones. Ladders were checked offline with ptxas for sm86 / sm89 / sm90 and both
# input dtypes (bench/tiles.py; table in bench/results/attention-tiles-*.md). The fp32 accumulator of a
# 64 x 256 tile is 64 registers per thread at 8 warps and 128 at 4, hence 8 warps for the wide tiles;
# ieee products (FMA, fp32 operand layouts) spill at anything larger than 16-32 rows.
_FWD = {
    (64, "ieee"): [(64, 32, 4, 2), (32, 32, 4, 1), (16, 16, 4, 1)],
    (128, "ieee"): [(16, 32, 4, 2), (16, 32, 4, 1), (16, 16, 4, 1)],
    (256, "ieee"): [(32, 16, 8, 2), (32, 16, 8, 1), (16, 32, 8, 1), (16, 16, 4, 1)],
    (64, "tf32"): [(64, 64, 4, 2), (64, 32, 4, 1), (16, 16, 4, 1)],
    (128, "tf32"): [(64, 32, 8, 2), (32, 32, 4, 2), (32, 32, 4, 1), (16, 32, 4, 1), (16, 16, 4, 1)],
    (256, "tf32"): [(64, 32, 8, 2), (32, 32, 8, 2), (32, 32, 8, 1), (32, 16, 4, 1), (16, 16, 4, 1)],
    (64, "bf16"): [(128, 64, 4, 3), (128, 64, 4, 2), (64, 64, 4, 2), (16, 16, 4, 1)],
    (128, "bf16"): [(128, 64, 8, 2), (64, 64, 4, 2), (64, 32, 4, 2), (32, 32, 4, 1), (16, 16, 4, 1)],
    (256, "bf16"): [(128, 64, 8, 2), (64, 64, 8, 2), (64, 32, 8, 2), (32, 32, 4, 1), (16, 16, 4, 1)],
}
_DKDV = {
    (64, "ieee"): [(32, 32, 8, 2), (32, 32, 4, 1), (16, 16, 4, 1)],
    (128, "ieee"): [(16, 32, 8, 2), (16, 32, 8, 1), (16, 16, 8, 1), (16, 16, 4, 1)],
    (256, "ieee"): [(16, 32, 8, 2), (16, 32, 8, 1), (16, 16, 8, 1), (16, 16, 4, 1)],
    (64, "tf32"): [(64, 32, 4, 2), (32, 32, 4, 1), (16, 16, 4, 1)],
    (128, "tf32"): [(32, 32, 8, 2), (32, 32, 4, 1), (16, 32, 4, 1), (16, 16, 4, 1)],
    (256, "tf32"): [(32, 32, 8, 2), (32, 32, 8, 1), (16, 32, 4, 1), (16, 16, 4, 1)],
    (64, "bf16"): [(64, 64, 4, 2), (64, 32, 4, 2), (32, 32, 4, 1), (16, 16, 4, 1)],
    (128, "bf16"): [(64, 64, 8, 2), (64, 32, 4, 2), (32, 32, 4, 2), (32, 32, 4, 1), (16, 16, 4, 1)],
    (256, "bf16"): [(64, 64, 8, 2), (64, 32, 8, 2), (32, 32, 8, 2), (32, 32, 4, 1), (16, 16, 4, 1)],
}
_DQ = {
    **{(d, p): _DKDV[(d, "tf32")] for d in (64, 128, 256) for p in ("ieee", "tf32")},
    **{(d, "bf16"): _DKDV[(d, "bf16")] for d in (64, 128, 256)},
}
_CONFIGS = {
    **{("fwd", *key): val for key, val in _FWD.items()},
    **{("dkdv", *key): val for key, val in _DKDV.items()},
    **{("dq", *key): val for key, val in _DQ.items()},
}
_INTERPRET_BLOCK = (32, 32)
_chosen: dict[tuple, int] = {}
# Shared-memory cap in bytes (None: the device's own limit). Setting it to SM86_SHARED_LIMIT on a larger
# GPU forces the tile choices of sm86 / sm89; configurations over it are skipped before launch.
SHARED_CAP: int | None = None
# What the last launch of each (kernel, head-dim class, precision) ran: tiles, warps, stages, shared
# memory, registers and spills (GPU only; bench/gpu_check.py reports it).
LAUNCHED: dict[tuple, dict] = {}


def _config_key(kind: str, block_d: int, precision: str) -> tuple:
    d = 64 if block_d <= 64 else (128 if block_d <= 128 else 256)
    return (kind, d, precision)


def _ladder(kind: str, block_d: int, precision: str, block) -> list[tuple[int, int, int, int]]:
    """Tile configurations to try: an explicit ``block``, the per-GPU ladder (``None`` on the GPU,
    ``"default"`` anywhere, so the interpreter can run the GPU tiles), or the interpreter's one tile."""
    if block == "default" or (block is None and not _interpret()):
        return list(_CONFIGS[_config_key(kind, block_d, precision)])
    if block is None:
        return [(*_INTERPRET_BLOCK, 4, 1)]
    if isinstance(block, str):
        raise ValueError(f"block_size must be an int, a pair, None or 'default', got {block!r}")
    bm, bn = (block, block) if isinstance(block, int) else block
    return [(bm, bn, 4, 1)]


def _launch(
    kernel, kind: str, grid_fn, args: list, consts: dict, block_d: int, precision: str, block, device
):
    """Run ``kernel`` with the first configuration of its ladder that compiles within the device's (or
    ``SHARED_CAP``'s) shared memory and, unless it is the last resort, without register spills."""
    configs = _ladder(kind, block_d, precision, block)
    ckey = _config_key(kind, block_d, precision)
    key = (kind, ckey, args[0].dtype, str(device), block, SHARED_CAP, tuple(sorted(consts.items())))
    start = _chosen.get(key, 0)
    last_err = None
    for idx in range(start, len(configs)):
        bm, bn, warps, stages = configs[idx]
        opts = dict(BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages)
        grid = grid_fn(bm, bn)
        try:
            if not _interpret() and key not in _chosen:  # first call: vet the configuration
                compiled = kernel.warmup(*args, **consts, **opts, grid=grid)
                compiled._init_handles()  # loads it: raises OutOfResources over the device's limit
                if SHARED_CAP is not None and compiled.metadata.shared > SHARED_CAP:
                    last_err = f"{compiled.metadata.shared} B of shared memory > cap {SHARED_CAP} B"
                    continue
                if getattr(compiled, "n_spills", 0) and idx < len(configs) - 1:
                    last_err = f"{compiled.n_spills} spilled registers"
                    continue
            compiled = kernel[grid](*args, **consts, **opts)
        except triton.runtime.errors.OutOfResources as err:  # shared memory or registers
            last_err = err
            continue
        _chosen[key] = idx
        if not _interpret():
            LAUNCHED[(*ckey, str(args[0].dtype).replace("torch.", ""))] = {
                "block_m": bm,
                "block_n": bn,
                "num_warps": warps,
                "num_stages": stages,
                "ladder_index": idx,
                "shared": int(compiled.metadata.shared),
                "n_regs": getattr(compiled, "n_regs", None),
                "n_spills": getattr(compiled, "n_spills", None),
            }
        return bm, bn
    raise RuntimeError(f"no tile configuration of {kind} fits this GPU: {last_err}")


def _prep_masks(q, kpm, amask, p: Problem):
    dev = q.device
    dummy_i = torch.zeros(1, dtype=torch.int32, device=dev)
    if p.seg is not None:
        seg, seg_start, seg_end = p.seg, p.seg_start, p.seg_end
    else:
        seg = seg_start = seg_end = dummy_i
    if kpm is not None:
        kpm_t = kpm.to(torch.uint8).contiguous()
        s_kpm_b = kpm_t.stride(0)
    else:
        kpm_t, s_kpm_b = torch.zeros(1, dtype=torch.uint8, device=dev), 0
    if amask is None:
        am, kind, am_strides = torch.zeros(1, dtype=torch.uint8, device=dev), 0, (0, 0, 0, 0)
    else:
        if amask.dtype == torch.bool:
            am, kind = amask.to(torch.uint8), 1
        else:
            am, kind = amask.to(torch.float32), 2
        am = am.expand(p.batch, p.heads_q, p.len_q, p.len_k)
        am_strides = tuple(am.stride())
        am_strides = tuple(0 if am.shape[i] == 1 else am_strides[i] for i in range(4))
    return seg, seg_start, seg_end, kpm_t, s_kpm_b, am, kind, am_strides


def _consts(p: Problem, block_d: int, mask_kind: int, has_kpm: bool) -> dict:
    return dict(
        D=p.head_dim,
        BLOCK_D=block_d,
        CAUSAL=p.causal,
        HAS_WINDOW=p.window is not None,
        HAS_SOFTCAP=p.softcap is not None,
        VARLEN=p.seg is not None,
        HAS_KPM=has_kpm,
        MASK_KIND=mask_kind,
        PREC=_PREC_CODE[p.precision],
        EMULATE=_interpret(),
    )


def triton_forward(q, k, v, kpm, amask, p: Problem, block=None):
    B, Hq, Lq, D = q.shape
    Lk = k.shape[2]
    block_d = max(16, triton.next_power_of_2(D))
    # fp32 output buffer, cast on the host: the interpreter does not round fp32 -> bf16 correctly
    out = torch.empty(B, Hq, Lq, D, dtype=torch.float32, device=q.device)
    lse = torch.empty(B, Hq, Lq, dtype=torch.float32, device=q.device)
    seg, seg_start, seg_end, kpm_t, s_kpm_b, am, mask_kind, ams = _prep_masks(q, kpm, amask, p)
    args = [
        q, k, v, out, lse, seg, seg_start, seg_end, kpm_t, am,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        lse.stride(0), lse.stride(1), s_kpm_b, *ams,
        Hq, p.groups, Lq, Lk, p.offset, p.window or 0, p.scale, p.softcap or 1.0,
    ]  # fmt: skip
    consts = _consts(p, block_d, mask_kind, kpm is not None)
    grid_fn = lambda bm, bn: (triton.cdiv(Lq, bm), B * Hq)  # noqa: E731
    _launch(_fwd_kernel, "fwd", grid_fn, args, consts, block_d, p.precision, block, q.device)
    return out.to(q.dtype), lse


def triton_backward(dout, q, k, v, out, lse, kpm, amask, p: Problem, block=None):
    B, Hq, Lq, D = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    block_d = max(16, triton.next_power_of_2(D))
    dout = dout.contiguous()
    delta = (dout.float() * out.float()).sum(-1).contiguous()  # (B, Hq, Lq), same strides as lse
    dq = torch.empty(B, Hq, Lq, D, dtype=torch.float32, device=q.device)
    dk = torch.empty(B, Hkv, Lk, D, dtype=torch.float32, device=q.device)
    dv = torch.empty_like(dk)
    seg, seg_start, seg_end, kpm_t, s_kpm_b, am, mask_kind, ams = _prep_masks(q, kpm, amask, p)
    consts = _consts(p, block_d, mask_kind, kpm is not None)
    common_tail = [p.groups, Lq, Lk, p.offset, p.window or 0, p.scale, p.softcap or 1.0]
    args_kv = [
        q, k, v, dout, lse, delta, dk, dv, seg, seg_start, seg_end, kpm_t, am,
        *q.stride(), *k.stride(), *v.stride(), *dout.stride(), lse.stride(0), lse.stride(1),
        *dk.stride(), s_kpm_b, *ams, Hkv, *common_tail,
    ]  # fmt: skip
    grid_kv = lambda bm, bn: (triton.cdiv(Lk, bn), B * Hkv)  # noqa: E731
    _launch(_bwd_dkdv_kernel, "dkdv", grid_kv, args_kv, consts, block_d, p.precision, block, q.device)
    args_q = [
        q, k, v, dout, lse, delta, dq, seg, seg_start, seg_end, kpm_t, am,
        *q.stride(), *k.stride(), *v.stride(), *dout.stride(), lse.stride(0), lse.stride(1),
        *dq.stride(), s_kpm_b, *ams, Hq, *common_tail,
    ]  # fmt: skip
    grid_q = lambda bm, bn: (triton.cdiv(Lq, bm), B * Hq)  # noqa: E731
    _launch(_bwd_dq_kernel, "dq", grid_q, args_q, consts, block_d, p.precision, block, q.device)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


TritonAttentionFunction = attention_function(triton_forward, triton_backward, "TritonAttentionFunction")


def blockwise_attention_triton(q, k, v, p: Problem, kpm=None, amask=None, block=None):
    if q.dtype == torch.float64:
        raise TypeError("the triton backend computes in fp32; use backend='torch' for fp64")
    return TritonAttentionFunction.apply(q, k, v, kpm, amask, p, block)


# ------------------------------------------------------------------------------------------------
# offline check of the tile configurations (no GPU needed: Triton ships ptxas)
# ------------------------------------------------------------------------------------------------

SM86_SHARED_LIMIT = 101376  # bytes of shared memory one block may opt into on sm86 / sm89 (99 KiB)
SM90_SHARED_LIMIT = 232448  # the same on sm90 (H100 / H200: 227 KiB)
_KERNELS = {"fwd": "_fwd_kernel", "dkdv": "_bwd_dkdv_kernel", "dq": "_bwd_dq_kernel"}
_INT_ARGS_FLOAT = {"scale", "softcap"}
_PTR_TYPES = {"SEG": "*i32", "SEG_START": "*i32", "SEG_END": "*i32", "KPM": "*u8", "AM": "*u8"}


def compile_offline(
    kind: str,
    head_dim: int,
    precision: str,
    block_m: int,
    block_n: int,
    num_warps: int = 4,
    num_stages: int = 1,
    arch: int = 86,
    input_dtype: str = "fp32",
    causal: bool = True,
    all_features: bool = False,
) -> dict:
    """Compile one kernel for ``sm{arch}`` without a GPU; returns its shared memory and register use.

    ``kind`` is ``fwd``, ``dkdv`` or ``dq``; ``all_features`` turns on window, softcap, packing, key
    padding and a float bias at once (the largest variant). Needs the kernels to be real JIT functions,
    i.e. this module imported with ``TRITON_INTERPRET`` off.
    """
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = globals()[_KERNELS[kind]]
    if not hasattr(fn, "params"):
        raise RuntimeError("kernels were built for the interpreter; import with TRITON_INTERPRET=0")
    block_d = max(16, triton.next_power_of_2(head_dim))
    consts = {
        "D": head_dim,
        "BLOCK_D": block_d,
        "BLOCK_M": block_m,
        "BLOCK_N": block_n,
        "CAUSAL": causal,
        "HAS_WINDOW": all_features,
        "HAS_SOFTCAP": all_features,
        "VARLEN": all_features,
        "HAS_KPM": all_features,
        "MASK_KIND": 2 if all_features else 0,
        "PREC": _PREC_CODE[precision],
        "EMULATE": False,
    }
    signature = {}
    for param in fn.params:
        name = param.name
        if param.is_constexpr:
            signature[name] = "constexpr"
        elif name == "AM" and all_features:
            signature[name] = "*fp32"
        elif name in _PTR_TYPES:
            signature[name] = _PTR_TYPES[name]
        elif name in ("LSE", "DELTA", "DK", "DV", "DQ", "Out"):
            signature[name] = "*fp32"
        elif name in ("Q", "K", "V", "DO"):
            signature[name] = f"*{input_dtype}"
        elif name in _INT_ARGS_FLOAT:
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
    src = ASTSource(fn=fn, signature=signature, constexprs=consts)
    compiled = triton.compile(
        src, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps, "num_stages": num_stages}
    )
    md = compiled.metadata
    usage = ptxas_usage(compiled.asm["ptx"], arch)
    limit = SM90_SHARED_LIMIT if arch >= 90 else SM86_SHARED_LIMIT
    return {
        "kind": kind,
        "arch": arch,
        "head_dim": head_dim,
        "precision": precision,
        "block_m": block_m,
        "block_n": block_n,
        "num_warps": num_warps,
        "num_stages": num_stages,
        "all_features": all_features,
        "input_dtype": input_dtype,
        "shared": int(md.shared),
        "fits": int(md.shared) <= limit,
        **usage,
    }


def ptxas_usage(ptx: str, arch: int) -> dict:
    """Registers and spill bytes of one kernel, from Triton's bundled ptxas (``-v``), no GPU needed."""
    import re
    import subprocess
    import tempfile
    from pathlib import Path

    bin_dir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    gpu = f"sm_{arch}a" if arch >= 90 else f"sm_{arch}"
    log = ""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        for name in ("ptxas", "ptxas-blackwell"):  # the second reads newer PTX versions
            cmd = [str(bin_dir / name), "-v", f"--gpu-name={gpu}", str(src), "-o", str(Path(tmp) / "k.cubin")]
            res = subprocess.run(cmd, capture_output=True, text=True)
            log = res.stdout + res.stderr
            if res.returncode == 0:
                break
        else:
            raise RuntimeError(f"ptxas could not assemble the kernel for {gpu}: {log[-300:]}")
    regs = re.search(r"Used (\d+) registers", log)
    stores = re.search(r"(\d+) bytes spill stores", log)
    loads = re.search(r"(\d+) bytes spill loads", log)
    return {
        "n_regs": int(regs.group(1)) if regs else None,
        "spill_stores": int(stores.group(1)) if stores else None,
        "spill_loads": int(loads.group(1)) if loads else None,
    }


def default_configs(kind: str, head_dim: int, precision: str) -> list[tuple[int, int, int, int]]:
    """The configuration ladder the launcher tries for a kernel (``kind`` fwd, dkdv or dq)."""
    block_d = max(16, triton.next_power_of_2(head_dim))
    return list(_CONFIGS[_config_key(kind, block_d, precision)])
