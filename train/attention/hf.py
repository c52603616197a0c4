"""transformers integration: ``attn_implementation="blockwise_fp32_global"`` and ``"blockwise_fp32"``.

* ``blockwise_fp32_global``: global layers (``sliding_window is None``) run the blockwise fp32 kernel;
  sliding-window layers run transformers' sdpa (or flash_attention_2 for fp16/bf16 on CUDA when
  ``flash_attn`` is installed and the mask is plain padding).
* ``blockwise_fp32``: every layer runs the kernel (sliding layers with their window).

Both names are registered with ``AttentionInterface`` and with ``AttentionMaskInterface`` (using the
sdpa mask builder), so the model hands each layer either ``None`` (plain causal, no padding) or a 4-D
boolean mask. The function turns that mask back into the kernel's structured, memory-linear form when it
can prove the mask equals it exactly (causal bottom-right + window, plus a per-key padding vector, or
block-diagonal packed sequences); otherwise it passes the 4-D mask itself to the kernel, which still runs
blockwise and applies it tile by tile. Padding-free batches (``cu_seq_lens_q/k`` kwargs or restarting
``position_ids``) become ``cu_seqlens``.
"""

from __future__ import annotations

import importlib.util
import weakref
from dataclasses import dataclass

import torch

from .api import blockwise_attention

GLOBAL_NAME = "blockwise_fp32_global"
ALL_LAYERS_NAME = "blockwise_fp32"

# backend used by the registered functions ("auto": triton on CUDA, torch elsewhere)
BACKEND = "auto"
# the model config attribute that carries the kernel's operand precision (``set_precision``)
PRECISION_ATTR = "blockwise_attention_precision"


@dataclass
class MaskPlan:
    """How to call the kernel for one attention mask."""

    causal: bool
    window: int | None
    cu_seqlens: torch.Tensor | None = None
    key_padding_mask: torch.Tensor | None = None
    attn_mask: torch.Tensor | None = None
    kind: str = "structured"  # "structured" | "padding" | "packed" | "dense"


_PLAN_CACHE_SIZE = 4
_plan_cache: list = []  # [(weakref to mask, key, plan)], most recent last


def _base_allowed(len_q: int, len_k: int, causal: bool, window: int | None, device) -> torch.Tensor:
    qi = torch.arange(len_q, device=device)[:, None] + (len_k - len_q)
    kj = torch.arange(len_k, device=device)[None, :]
    ok = torch.ones(len_q, len_k, dtype=torch.bool, device=device)
    if causal:
        ok &= kj <= qi
    if window is not None:
        ok &= (qi - kj) < window
        if not causal:
            ok &= (kj - qi) < window
    return ok


def _segments_allowed(cu: torch.Tensor, length: int, device) -> torch.Tensor:
    seg = torch.full((length,), -1, dtype=torch.long, device=device)
    bounds = [int(x) for x in cu.tolist()]
    for s, (a, b) in enumerate(zip(bounds, bounds[1:])):
        seg[a:b] = s
    return (seg[:, None] == seg[None, :]) & (seg[None, :] >= 0)


def _cu_from_position_ids(position_ids: torch.Tensor, length: int) -> torch.Tensor | None:
    pos = position_ids.reshape(-1)
    if pos.numel() != length:
        return None
    starts = torch.nonzero(torch.diff(pos) != 1).flatten().add(1).tolist()
    return torch.tensor([0, *starts, length], dtype=torch.int32, device=position_ids.device)


def _cu_from_mask_rows(mask2d: torch.Tensor) -> torch.Tensor | None:
    """Packed causal masks: each row's first admitted key is the start of its sequence."""
    length = mask2d.shape[0]
    has = mask2d.any(-1)
    if not bool(has.all()):
        return None
    first = mask2d.to(torch.uint8).argmax(-1)
    starts = torch.unique(first).tolist()
    if not starts or starts[0] != 0:
        return None
    return torch.tensor([*starts, length], dtype=torch.int32, device=mask2d.device)


def _as_bool_mask(mask: torch.Tensor) -> torch.Tensor | None:
    """A float mask of 0 / very negative entries as bool; None if it carries a real bias."""
    if mask.dtype == torch.bool:
        return mask
    very_neg = mask <= torch.finfo(mask.dtype).min / 2
    if bool(((mask == 0) | very_neg).all()):
        return ~very_neg
    return None


def plan_mask(
    attention_mask: torch.Tensor | None,
    *,
    batch: int,
    len_q: int,
    len_k: int,
    causal: bool,
    window: int | None,
    cu_seq_lens: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
) -> MaskPlan:
    """Structured kernel arguments equivalent to ``attention_mask`` (verified), or a dense fallback."""
    square = len_q == len_k
    if attention_mask is None:
        if cu_seq_lens is not None and batch == 1 and square:
            return MaskPlan(causal, window, cu_seqlens=cu_seq_lens.to(torch.int32), kind="packed")
        if position_ids is not None and batch == 1 and square:
            # padding-free batches under the mask-free registration: restarting positions are sequences
            cu = _cu_from_position_ids(position_ids, len_q)
            if cu is not None and cu.numel() > 2:
                return MaskPlan(causal, window, cu_seqlens=cu, kind="packed")
        return MaskPlan(causal, window)
    if attention_mask.dim() == 2:  # (B, Lk) padding mask, 1 = real token
        kpm = attention_mask[:, -len_k:].to(torch.bool)
        return MaskPlan(causal, window, key_padding_mask=None if bool(kpm.all()) else kpm, kind="padding")
    if attention_mask.dim() != 4:
        raise ValueError(f"unsupported attention_mask of shape {tuple(attention_mask.shape)}")
    if attention_mask.shape[-2] != len_q or attention_mask.shape[-1] < len_k:
        raise ValueError(f"attention_mask {tuple(attention_mask.shape)} does not cover ({len_q}, {len_k})")
    attention_mask = attention_mask[..., :len_k]  # as sdpa does when the mask is longer than the keys
    mask = _as_bool_mask(attention_mask)
    if mask is None:  # a genuine additive bias: pass it through as is
        return MaskPlan(False, None, attn_mask=attention_mask, kind="dense")
    if mask.shape[1] != 1:
        return MaskPlan(False, None, attn_mask=mask, kind="dense")
    m2 = mask[:, 0].expand(batch, len_q, len_k)
    dev = mask.device
    base = _base_allowed(len_q, len_k, causal, window, dev)
    # 1. causal (+ window) with per-key padding (left or right padding, decoding against a cache)
    key_valid = m2.any(dim=1)  # (B, Lk): keys somebody attends
    if torch.equal(base[None] & key_valid[:, None, :], m2):
        kpm = None if bool(key_valid.all()) else key_valid
        return MaskPlan(causal, window, key_padding_mask=kpm, kind="padding")
    # 2. packed sequences in one row (padding-free batches built from position_ids)
    if batch == 1 and square:
        candidates = []
        if cu_seq_lens is not None:
            candidates.append(cu_seq_lens.to(device=dev, dtype=torch.int32))
        if position_ids is not None:
            candidates.append(_cu_from_position_ids(position_ids.to(dev), len_q))
        candidates.append(_cu_from_mask_rows(m2[0]))
        for cu in candidates:
            if cu is None:
                continue
            if torch.equal(base & _segments_allowed(cu, len_q, dev), m2[0]):
                return MaskPlan(causal, window, cu_seqlens=cu, kind="packed")
    # 3. anything else: the kernel applies the mask tile by tile (causality is in the mask already)
    return MaskPlan(False, None, attn_mask=mask, kind="dense")


def _cached_plan(attention_mask, **kw) -> MaskPlan:
    """Every global layer of a forward gets the same mask object: plan it once."""
    if attention_mask is None:
        return plan_mask(None, **kw)
    aux = tuple(
        (id(t), getattr(t, "_version", None)) if isinstance(t, torch.Tensor) else t
        for t in (kw.get("cu_seq_lens"), kw.get("position_ids"))
    )
    key = (attention_mask._version, kw["batch"], kw["len_q"], kw["len_k"], kw["causal"], kw["window"], aux)
    for ref, k, plan in _plan_cache:
        if ref() is attention_mask and k == key:
            return plan
    plan = plan_mask(attention_mask, **kw)
    _plan_cache[:] = [e for e in _plan_cache if e[0]() is not None][-(_PLAN_CACHE_SIZE - 1) :]
    _plan_cache.append((weakref.ref(attention_mask), key, plan))
    return plan


def blockwise_fp32_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """AttentionInterface function: q (B, Hq, Lq, D), k/v (B, Hkv, Lk, D) -> ((B, Lq, Hq, D), None)."""
    if dropout:
        raise NotImplementedError("blockwise_fp32 attention does not implement attention dropout")
    if kwargs.get("output_attentions", False):
        raise NotImplementedError("blockwise_fp32 attention never materialises attention weights")
    if kwargs.get("s_aux") is not None:
        raise NotImplementedError("attention sinks (s_aux) are not supported")
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    B, _, Lq, _ = query.shape
    Lk = key.shape[2]
    cu = kwargs.get("cu_seq_lens_q")
    cu_k = kwargs.get("cu_seq_lens_k")
    if cu is not None and cu_k is not None and not torch.equal(cu, cu_k):
        cu = None  # different query/key packing: rely on the mask
    plan = _cached_plan(
        attention_mask,
        batch=B,
        len_q=Lq,
        len_k=Lk,
        causal=bool(causal),
        window=sliding_window,
        cu_seq_lens=cu,
        position_ids=kwargs.get("position_ids"),
    )
    out = blockwise_attention(
        query,
        key,
        value,
        causal=plan.causal,
        scale=scaling,
        cu_seqlens=plan.cu_seqlens,
        sliding_window=plan.window,
        softcap=softcap,
        key_padding_mask=plan.key_padding_mask,
        attn_mask=plan.attn_mask,
        backend=BACKEND,
        precision=module_precision(module),
    )
    return out.transpose(1, 2).contiguous(), None


def set_precision(model: torch.nn.Module, precision: str | None) -> None:
    """Set the kernel's operand precision (``"auto"``, ``"ieee"``, ``"tf32"``, ``"bf16"``) for every
    attention layer of ``model``: stored on each (sub)config, so nested text configs carry it too."""
    from .semantics import resolve_precision

    resolve_precision(precision, torch.float32, "torch")  # validates the name
    seen = set()
    for m in model.modules():
        cfg = getattr(m, "config", None)
        if cfg is not None and id(cfg) not in seen and hasattr(cfg, "to_dict"):
            seen.add(id(cfg))
            setattr(cfg, PRECISION_ATTR, precision)


def module_precision(module: torch.nn.Module) -> str | None:
    """The precision ``set_precision`` stored on the attention module's config (None: ``auto``)."""
    return getattr(getattr(module, "config", None), PRECISION_ATTR, None)


def _flash_attn_installed() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def flash_eligible(query: torch.Tensor) -> bool:
    """True when the sliding layers may run FlashAttention-2: fp16/bf16 CUDA inputs and flash-attn."""
    return query.is_cuda and query.dtype in (torch.float16, torch.bfloat16) and _flash_attn_installed()


def _flash_attention_2(module, query, key, value, mask2d, *, scaling=None, sliding_window=None,
                       softcap=None, is_causal=None, dropout=0.0, **kwargs):  # fmt: skip
    """transformers' flash-attention forward with ``flash_attention_2`` named explicitly.

    ``transformers.integrations.flash_attention.flash_attention_forward`` passes the model's
    ``_attn_implementation`` on, which here is this module's registered name: transformers then looks it
    up as a hub kernel and raises. q, k, v arrive (B, H, L, D) and leave (B, L, H, D).
    """
    from transformers.integrations import flash_attention as fa
    from transformers.modeling_flash_attention_utils import _flash_attention_forward

    kwargs.pop("output_attentions", None)
    out = _flash_attention_forward(
        query.transpose(1, 2),
        key.transpose(1, 2),
        value.transpose(1, 2),
        mask2d,
        query_length=query.shape[2],
        is_causal=is_causal if is_causal is not None else module.is_causal,
        dropout=dropout,
        softmax_scale=scaling,
        sliding_window=sliding_window,
        softcap=softcap,
        use_top_left_mask=fa._use_top_left_mask,
        target_dtype=fa.get_target_dtype(query, module),
        attn_implementation="flash_attention_2",
        layer_idx=getattr(module, "layer_idx", None),
        **kwargs,
    )
    return out, None


def _sliding_layer_forward(module, query, key, value, attention_mask, **kwargs):
    """Sliding-window layers of the global-only mode: sdpa, or flash_attention_2 where it applies."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if flash_eligible(query):
        B, _, Lq, _ = query.shape
        Lk = key.shape[2]
        plan = _cached_plan(
            attention_mask,
            batch=B,
            len_q=Lq,
            len_k=Lk,
            causal=bool(getattr(module, "is_causal", True)),
            window=kwargs.get("sliding_window"),
            cu_seq_lens=kwargs.get("cu_seq_lens_q"),
            position_ids=kwargs.get("position_ids"),
        )
        if plan.kind in ("structured", "padding") and plan.causal:
            mask2d = None if plan.key_padding_mask is None else plan.key_padding_mask.to(torch.int32)
            return _flash_attention_2(module, query, key, value, mask2d, **kwargs)
        if plan.kind == "packed" and kwargs.get("cu_seq_lens_q") is not None:
            return _flash_attention_2(module, query, key, value, None, **kwargs)
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def blockwise_fp32_global_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    sliding_window: int | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Global layers to the blockwise fp32 kernel, sliding-window layers to sdpa / flash-attention."""
    if sliding_window is None:
        return blockwise_fp32_attention_forward(module, query, key, value, attention_mask, **kwargs)
    return _sliding_layer_forward(
        module, query, key, value, attention_mask, sliding_window=sliding_window, **kwargs
    )


def register() -> None:
    """Register both names with AttentionInterface and AttentionMaskInterface (idempotent).

    ``blockwise_fp32_global`` gets sdpa's 4-D masks, which its sdpa sliding layers need. Every layer of
    ``blockwise_fp32`` runs the kernel, which takes causality, the window and packing structurally, so it
    gets flash-attention's mask builder: ``None`` or the 2-D padding mask, with packed sequences read from
    ``position_ids``. That spares building and verifying an (L, L) mask per layer type and step, ~12% of
    a packed tiny-model training step on the CPU.
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask, sdpa_mask

    for name, fn, mask_fn in (
        (GLOBAL_NAME, blockwise_fp32_global_attention_forward, sdpa_mask),
        (ALL_LAYERS_NAME, blockwise_fp32_attention_forward, flash_attention_mask),
    ):
        AttentionInterface.register(name, fn)
        AttentionMaskInterface.register(name, mask_fn)


def is_registered() -> bool:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    return all(
        name in AttentionInterface._global_mapping and name in AttentionMaskInterface._global_mapping
        for name in (GLOBAL_NAME, ALL_LAYERS_NAME)
    )
