"""transformers integration: a tiny Gemma 3 with attn_implementation="blockwise_fp32_global"."""

from __future__ import annotations

import os

import pytest
import torch
from tiny_settings import tiny_gemma3_config

import train.attention as attention
from train.attention import hf as attention_hf

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import AttentionInterface, Gemma3ForCausalLM, Gemma3TextConfig  # noqa: E402
from transformers.masking_utils import (  # noqa: E402
    AttentionMaskInterface,
    flash_attention_mask,
    sdpa_mask,
    sliding_window_causal_mask_function,
)

LOGIT_TOL = 2e-5  # max |diff| / max |logits|
GRAD_TOL = 1e-4  # max |diff| / max |grad|, per LoRA tensor
IMPLS = ["blockwise_fp32_global", "blockwise_fp32"]


pytestmark = pytest.mark.usefixtures("one_thread")


def config(impl: str) -> Gemma3TextConfig:
    return tiny_gemma3_config(4, window=8, max_positions=512, attn_implementation=impl)


def model(impl: str, lora: bool = False):
    torch.manual_seed(0)
    m = Gemma3ForCausalLM(config(impl)).float()
    if lora:
        torch.manual_seed(1)
        cfg = LoraConfig(
            r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0, init_lora_weights=False
        )
        m = get_peft_model(m, cfg)
    return m


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = float(b.detach().abs().max())
    return float((a.detach() - b.detach()).abs().max()) / (scale if scale > 0 else 1.0)


def lora_grads(m) -> dict[str, torch.Tensor]:
    return {
        n: p.grad.detach().clone() for n, p in m.named_parameters() if "lora_" in n and p.grad is not None
    }


def loss_and_grads(impl, input_ids, labels, checkpointing=False, **kw):
    m = model(impl, lora=True)
    if checkpointing:
        m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        m.enable_input_require_grads()
        m.train()
    out = m(input_ids=input_ids, labels=labels, use_cache=False, **kw)
    out.loss.backward()
    return out.logits.detach(), out.loss.detach(), lora_grads(m)


def assert_grads_match(g, g_ref):
    assert g.keys() == g_ref.keys() and len(g) > 0
    worst = max(rel(g[n], g_ref[n]) for n in g)
    assert worst < GRAD_TOL, worst


@pytest.fixture
def kernel_calls(monkeypatch):
    """Records (sliding_window, plan kind) of every call that reaches the blockwise kernel."""
    calls = []
    original = attention_hf.blockwise_attention
    original_plan = attention_hf.plan_mask

    def spy(q, k, v, **kw):
        calls.append({"window": kw.get("sliding_window"), "q_len": q.shape[2], "k_len": k.shape[2]})
        return original(q, k, v, **kw)

    def plan_spy(*a, **kw):
        plan = original_plan(*a, **kw)
        calls.append({"plan": plan.kind})
        return plan

    monkeypatch.setattr(attention_hf, "blockwise_attention", spy)
    monkeypatch.setattr(attention_hf, "plan_mask", plan_spy)
    return calls


# ---------------------------------------------------------------------------------------------


def test_register_is_idempotent_and_covers_both_interfaces():
    attention.register()
    attention.register()
    for name in (attention.GLOBAL_NAME, attention.ALL_LAYERS_NAME):
        assert name in AttentionInterface._global_mapping
    # the global-only mode's sdpa sliding layers need 4-D masks; the all-kernel mode needs none
    assert AttentionMaskInterface._global_mapping[attention.GLOBAL_NAME] is sdpa_mask
    assert AttentionMaskInterface._global_mapping[attention.ALL_LAYERS_NAME] is flash_attention_mask
    assert AttentionInterface._global_mapping["blockwise_fp32_global"] is (
        attention.blockwise_fp32_global_attention_forward
    )
    assert attention.is_registered()


def test_sliding_window_convention_matches_transformers():
    """transformers' Gemma 3 window: query i sees key j iff i - j < window (and j <= i)."""
    from train.attention import semantics

    for window in (1, 3, 8):
        hf = sdpa_mask(
            batch_size=1,
            q_length=20,
            kv_length=20,
            mask_function=sliding_window_causal_mask_function(window),
            allow_is_causal_skip=False,
        )
        ours = semantics.reference_allowed(1, 20, 20, causal=True, sliding_window=window)
        assert torch.equal(hf, ours)
        plan = attention.plan_mask(hf, batch=1, len_q=20, len_k=20, causal=True, window=window)
        assert plan.kind == "padding" and plan.key_padding_mask is None


def test_global_layers_go_to_the_kernel_sliding_layers_do_not(kernel_calls):
    ids = torch.randint(0, 300, (1, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model("blockwise_fp32_global")(input_ids=ids)
    windows = [c["window"] for c in kernel_calls if "window" in c]
    assert windows == [None, None]  # layers 1 and 3 only
    kernel_calls.clear()
    with torch.no_grad():
        model("blockwise_fp32")(input_ids=ids)
    windows = [c["window"] for c in kernel_calls if "window" in c]
    assert windows == [8, None, 8, None]


@pytest.mark.parametrize("impl", IMPLS)
def test_logits_and_lora_grads_match_eager(impl):
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 300, (2, 40), generator=g)
    logits_ref, loss_ref, grads_ref = loss_and_grads("eager", ids, ids)
    logits, loss, grads = loss_and_grads(impl, ids, ids)
    assert rel(logits, logits_ref) < LOGIT_TOL
    assert abs(float(loss - loss_ref)) < 1e-5
    assert_grads_match(grads, grads_ref)


def test_gradient_checkpointing_matches_eager():
    ids = torch.randint(0, 300, (2, 33), generator=torch.Generator().manual_seed(3))
    _, loss_ref, grads_ref = loss_and_grads("eager", ids, ids, checkpointing=True)
    _, loss, grads = loss_and_grads("blockwise_fp32_global", ids, ids, checkpointing=True)
    assert abs(float(loss - loss_ref)) < 1e-5
    assert_grads_match(grads, grads_ref)


def _packed_batch(lengths=(11, 17, 9), seed=4):
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(0, 300, (n,), generator=g) for n in lengths]
    ids = torch.cat(seqs)[None]
    pos = torch.cat([torch.arange(n) for n in lengths])[None]
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    labels = ids.clone()
    labels[0, cu[:-1].long()] = -100  # first token of each sequence has no prediction from its own past
    return seqs, ids, pos, cu, labels


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("with_cu_kwargs", [False, True])
def test_packing_matches_eager_and_separate_sequences(with_cu_kwargs, impl, kernel_calls):
    seqs, ids, pos, cu, labels = _packed_batch()
    extra = {}
    if with_cu_kwargs:  # what TRL's padding-free collator passes along with position_ids
        n = int(max(len(s) for s in seqs))
        extra = dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=n, max_length_k=n)
    logits_ref, loss_ref, grads_ref = loss_and_grads("eager", ids, labels, position_ids=pos)
    kernel_calls.clear()
    logits, loss, grads = loss_and_grads(impl, ids, labels, position_ids=pos, **extra)
    assert rel(logits, logits_ref) < LOGIT_TOL
    assert_grads_match(grads, grads_ref)
    plans = [c["plan"] for c in kernel_calls if "plan" in c]
    assert plans and set(plans) == {"packed"}, plans  # structured cu_seqlens, never the dense fallback
    m = model(impl)  # ground truth: each sequence on its own, no LoRA
    with torch.no_grad():
        packed = m(input_ids=ids, position_ids=pos, use_cache=False, **extra).logits
        for s, a in zip(seqs, cu.tolist()):
            alone = m(input_ids=s[None]).logits
            assert rel(packed[:, a : a + len(s)], alone) < LOGIT_TOL


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("impl", IMPLS)
def test_padded_batch_matches_eager(side, impl, kernel_calls):
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(1, 300, (3, 30), generator=g)
    mask = torch.ones(3, 30, dtype=torch.long)
    if side == "left":
        mask[0, :9] = 0
        mask[2, :2] = 0
    else:
        mask[0, 21:] = 0
        mask[2, 28:] = 0
    labels = ids.masked_fill(mask == 0, -100)
    # a label is predicted from the previous position: none from padding (whose outputs are arbitrary)
    labels[:, 1:] = labels[:, 1:].masked_fill(mask[:, :-1] == 0, -100)
    logits_ref, loss_ref, grads_ref = loss_and_grads("eager", ids, labels, attention_mask=mask)
    kernel_calls.clear()
    logits, loss, grads = loss_and_grads(impl, ids, labels, attention_mask=mask)
    real = mask.bool()
    assert rel(logits[real], logits_ref[real]) < LOGIT_TOL
    assert abs(float(loss - loss_ref)) < 1e-5
    assert_grads_match(grads, grads_ref)
    plans = [c["plan"] for c in kernel_calls if "plan" in c]
    assert plans and set(plans) == {"padding"}, plans  # a per-key padding vector, not the dense mask


@pytest.mark.parametrize("impl", IMPLS)
def test_greedy_generation_identical_tokens(impl, kernel_calls):
    g = torch.Generator().manual_seed(6)
    ids = torch.randint(1, 300, (2, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # left padding, as generation uses
    kw = dict(attention_mask=mask, max_new_tokens=24, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        ref = model("eager").eval().generate(ids, **kw)
        kernel_calls.clear()
        out = model(impl).eval().generate(ids, **kw)
    assert torch.equal(out, ref)
    decode = [c for c in kernel_calls if c.get("q_len") == 1]
    assert decode and max(c["k_len"] for c in decode) > 30  # one query against a long cache
    assert "dense" not in {c.get("plan") for c in kernel_calls}


def test_function_level_dense_fallback_and_float_masks():
    """An arbitrary 4-D mask that is no causal/padding/packing pattern still runs, blockwise."""
    from train.attention import reference_attention

    g = torch.Generator().manual_seed(7)
    q = torch.randn(2, 4, 19, 16, generator=g)
    k = torch.randn(2, 2, 19, 16, generator=g)
    v = torch.randn(2, 2, 19, 16, generator=g)
    mask = torch.rand(2, 1, 19, 19, generator=g) > 0.5
    mask[:, :, :, 0] = True

    class Module(torch.nn.Module):
        is_causal = True
        num_key_value_groups = 2

    plan = attention.plan_mask(mask, batch=2, len_q=19, len_k=19, causal=True, window=None)
    assert plan.kind == "dense"
    out, weights = attention.blockwise_fp32_attention_forward(Module(), q, k, v, mask, scaling=0.3)
    assert weights is None and out.shape == (2, 19, 4, 16)
    ref = reference_attention(q.double(), k.double(), v.double(), causal=False, scale=0.3, attn_mask=mask)
    assert rel(out.transpose(1, 2), ref) < 1e-5
    float_mask = torch.zeros(2, 1, 19, 19).masked_fill(~mask, torch.finfo(torch.float32).min)
    out_f, _ = attention.blockwise_fp32_attention_forward(Module(), q, k, v, float_mask, scaling=0.3)
    assert torch.allclose(out_f, out, atol=1e-6, rtol=0)


def test_qlora_4bit_trains_and_matches_eager(tmp_path):
    pytest.importorskip("bitsandbytes")
    from peft import prepare_model_for_kbit_training
    from transformers import BitsAndBytesConfig

    model("eager").save_pretrained(tmp_path / "tiny")
    ids = torch.randint(0, 300, (2, 26), generator=torch.Generator().manual_seed(8))
    results = {}
    for impl in ("eager", "blockwise_fp32_global"):
        bnb = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.float32,
        )
        m = Gemma3ForCausalLM.from_pretrained(
            tmp_path / "tiny",
            quantization_config=bnb,
            device_map="cpu",
            attn_implementation=impl,
            dtype=torch.float32,
        )
        m = prepare_model_for_kbit_training(m, use_gradient_checkpointing=True)
        torch.manual_seed(1)
        m = get_peft_model(
            m, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights=False)
        )
        out = m(input_ids=ids, labels=ids, use_cache=False)
        out.loss.backward()
        results[impl] = (out.loss.detach(), lora_grads(m))
    loss_ref, grads_ref = results["eager"]
    loss, grads = results["blockwise_fp32_global"]
    assert torch.isfinite(loss) and abs(float(loss - loss_ref)) < 1e-4
    assert_grads_match(grads, grads_ref)
