"""TRL's fused LM head on the CPU scores only labelled positions, with the same loss and gradients."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
trl_utils = pytest.importorskip("trl.trainer.utils")

from train.lm_head import compact_fused_head_on_cpu  # noqa: E402


def _model():
    cfg = transformers.Gemma3TextConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        sliding_window=8,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    torch.manual_seed(0)
    model = transformers.Gemma3ForCausalLM(cfg)
    trl_utils.add_fused_lm_head(model)
    return model


def _loss_and_grads(model, ids, labels):
    model.zero_grad()
    out = model(input_ids=ids, labels=labels, fused_lm_head=True)
    out.loss.backward()
    return out.loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_cpu_head_scores_labelled_rows_only_with_the_same_loss_and_grads(monkeypatch):
    assert compact_fused_head_on_cpu()
    assert compact_fused_head_on_cpu()  # idempotent: the predicate is not wrapped twice
    patched = trl_utils._use_triton
    assert not getattr(patched.__wrapped__, "_ledgerwright_compact_cpu", False)
    model = _model()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 64, (1, 40), generator=gen)
    labels = torch.full_like(ids, -100)
    labels[0, 30:36] = ids[0, 30:36]  # an answer of 6 labelled tokens in a row of 40
    rows = []
    real_apply = trl_utils._ChunkedLogProbFunction.apply

    def spy(hidden, *rest):
        rows.append(hidden.shape[0])
        return real_apply(hidden, *rest)

    monkeypatch.setattr(trl_utils._ChunkedLogProbFunction, "apply", spy)
    loss_c, grads_c = _loss_and_grads(model, ids, labels)
    monkeypatch.setattr(trl_utils, "_use_triton", patched.__wrapped__)
    loss_f, grads_f = _loss_and_grads(model, ids, labels)
    assert rows == [6, 39]  # the positions predicting a label, then every shifted position
    assert torch.allclose(loss_c, loss_f, rtol=1e-6, atol=1e-7)
    assert grads_c.keys() == grads_f.keys() and grads_c
    for name in grads_c:
        assert torch.allclose(grads_c[name], grads_f[name], rtol=1e-5, atol=1e-7), name
