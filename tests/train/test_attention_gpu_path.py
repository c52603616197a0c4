"""The GPU training path on the CPU: precision selection, the flash-attention sliding layers, and the
dtype that reaches the kernel under QLoRA."""

from __future__ import annotations

import sys
import types

import pytest
import torch
from tiny_settings import tiny_gemma3_config
from transformers import Gemma3ForCausalLM

import train.attention as attention
from train.attention import hf as attention_hf
from train.attention import reference_attention, resolve_precision

pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(impl: str) -> Gemma3ForCausalLM:
    torch.manual_seed(0)
    cfg = tiny_gemma3_config(2, window=6, max_positions=256, attn_implementation=impl)
    return Gemma3ForCausalLM(cfg).float().eval()


def test_precision_default_is_fast_only_where_it_can_be():
    assert resolve_precision(None, torch.bfloat16, "triton") == "bf16"
    assert resolve_precision("auto", torch.bfloat16, "triton") == "bf16"
    assert resolve_precision(None, torch.float32, "triton") == "ieee"
    assert resolve_precision(None, torch.bfloat16, "torch") == "ieee"  # the torch backend stays exact
    assert resolve_precision("ieee", torch.bfloat16, "triton") == "ieee"  # selectable
    with pytest.raises(ValueError):
        resolve_precision("fp8", torch.float32, "torch")


def test_precision_reaches_the_kernel_through_hf(monkeypatch):
    seen = []
    original = attention_hf.blockwise_attention

    def spy(q, k, v, **kw):
        seen.append(kw["precision"])
        return original(q, k, v, **kw)

    monkeypatch.setattr(attention_hf, "blockwise_attention", spy)
    m = tiny("blockwise_fp32")
    ids = torch.randint(0, 300, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        m(input_ids=ids)
        assert seen == [None, None]  # auto
        attention.set_precision(m, "tf32")
        m(input_ids=ids)
    assert seen[2:] == ["tf32", "tf32"]
    with pytest.raises(ValueError):
        attention.set_precision(m, "fp8")


# ---------------------------------------------------------------------------------------------
# sliding layers through FlashAttention-2 (a CPU stand-in for the flash_attn package)
# ---------------------------------------------------------------------------------------------


def _fake_flash_attn(calls: list) -> tuple[types.ModuleType, types.ModuleType]:
    """A ``flash_attn`` module whose functions compute with the fp64 reference (layout (B, L, H, D))."""
    from transformers.modeling_flash_attention_utils import _pad_input, _unpad_input

    def flash_attn_func(
        q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
        deterministic=False,
    ):  # fmt: skip
        calls.append(("dense", window_size))
        window = None if window_size[0] < 0 else window_size[0] + 1  # FA: i - j <= left
        out = reference_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=causal, scale=softmax_scale,
            sliding_window=window, softcap=softcap or None,
        )  # fmt: skip
        return out.to(q.dtype).transpose(1, 2)

    def flash_attn_varlen_func(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None,
        causal=False, window_size=(-1, -1), softcap=0.0, deterministic=False,
    ):  # fmt: skip
        calls.append(("varlen", window_size))
        out = torch.zeros_like(q)
        bq, bk = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        for (a, b), (c, d) in zip(zip(bq, bq[1:]), zip(bk, bk[1:])):
            out[a:b] = flash_attn_func(
                q[None, a:b], k[None, c:d], v[None, c:d], 0.0, softmax_scale, causal, window_size, softcap
            )[0]
        return out

    def flash_attn_with_kvcache(*args, **kwargs):
        raise NotImplementedError

    fa = types.ModuleType("flash_attn")
    fa.flash_attn_func = flash_attn_func
    fa.flash_attn_varlen_func = flash_attn_varlen_func
    fa.flash_attn_with_kvcache = flash_attn_with_kvcache
    padding = types.ModuleType("flash_attn.bert_padding")
    padding.pad_input, padding.unpad_input = _pad_input, _unpad_input
    fa.bert_padding = padding
    return fa, padding


def test_sliding_layers_with_flash_attention_do_not_raise(monkeypatch):
    """Gemma's sliding layers under blockwise_fp32_global with flash-attn installed: transformers'
    ``flash_attention_forward`` would pass the registered name on and fail to find it as a hub kernel."""
    import transformers.modeling_flash_attention_utils as mfu

    calls: list = []
    fa, padding = _fake_flash_attn(calls)
    monkeypatch.setitem(sys.modules, "flash_attn", fa)
    monkeypatch.setitem(sys.modules, "flash_attn.bert_padding", padding)
    monkeypatch.setattr(mfu, "is_flash_attn_2_available", lambda *a, **k: True)
    monkeypatch.setattr(mfu, "_loaded_implementation", None)
    monkeypatch.setattr(attention_hf, "flash_eligible", lambda query: True)

    ids = torch.randint(0, 300, (2, 14), generator=torch.Generator().manual_seed(3))
    mask = torch.ones(2, 14, dtype=torch.long)
    mask[0, :4] = 0  # left padding: a 2-D (flash-style) padding mask reaches the sliding layer
    with torch.no_grad():
        out = tiny("blockwise_fp32_global")(input_ids=ids, attention_mask=mask).logits
        ref = tiny("eager")(input_ids=ids, attention_mask=mask).logits
    assert mfu._loaded_implementation == "flash_attention_2"
    assert ("varlen", (5, 5)) in calls  # the sliding layer ran FA2 with its window (6 keys)
    real = mask.bool()
    err = (out - ref)[real].abs().max() / ref[real].abs().max()
    assert float(err) < 1e-5
    calls.clear()
    with torch.no_grad():  # no padding: the dense flash function
        tiny("blockwise_fp32_global")(input_ids=ids[1:])
    assert calls == [("dense", (5, 5))]


# ---------------------------------------------------------------------------------------------
# QLoRA (prepare_model_for_kbit_training): the kernel receives the compute dtype
# ---------------------------------------------------------------------------------------------


def test_qlora_attention_receives_the_compute_dtype(tmp_path, monkeypatch):
    pytest.importorskip("bitsandbytes")
    from train.config import TrainConfig
    from train.modeling import load_base_model

    tiny("eager").save_pretrained(tmp_path / "tiny")
    seen = []
    original = attention_hf.blockwise_attention

    def spy(q, k, v, **kw):
        seen.append((q.dtype, k.dtype, v.dtype, kw["precision"]))
        return original(q, k, v, **kw)

    monkeypatch.setattr(attention_hf, "blockwise_attention", spy)
    cfg = TrainConfig(
        attn_implementation="blockwise_fp32",
        compute_dtype="bfloat16",
        load_in_4bit=True,
        gradient_checkpointing=True,
    )
    model, attn = load_base_model(str(tmp_path / "tiny"), cfg)
    assert attn == "blockwise_fp32"
    assert model.get_input_embeddings().weight.dtype == torch.bfloat16
    ids = torch.randint(0, 300, (1, 10), generator=torch.Generator().manual_seed(1))
    out = model(input_ids=ids, labels=ids, use_cache=False)
    assert torch.isfinite(out.loss)
    assert seen and all(s[:3] == (torch.bfloat16,) * 3 for s in seen), seen
