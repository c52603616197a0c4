"""A copying (induction) circuit for the embedded tiny base, set at initialisation.

Every writer target rests on copying from the context: the call's 12-hex-digit id, the tool name and
the argument values must reach the entry. A 12B base has induction heads from pretraining on
trillions of tokens; the tiny base gets a few CPU minutes. Measured with ``bench/copy_probe.py``
(results in ``bench/results/``): a content-matching copy does not emerge from 1-2M tokens of
pretraining, whatever the curriculum, while a circuit set at initialisation copies random tokens at
any distance after a few dozen steps. So the tiny base starts with one:

- layer 0 (a sliding layer), query heads 0 and 1 (one GQA group): attend one and two tokens back,
  whatever the tokens. Their queries and keys read a constant embedding dimension and differ only
  by RoPE phase on the high-frequency pairs; their values (a random projection of the token half of
  the residual) are written to two slots of their own. These queries and keys stay frozen during
  pretraining (the positional prior is the point); everything else trains.
- layer 1 (a global layer), query head 0: matches the current token's fingerprint (the same random
  projection) against the previous-token slot of every earlier position, on the low-frequency RoPE
  pairs (nearly position-free over the context), and copies the attended token's embedding.

Nothing task-specific is set: no token, field or layout is named; what to copy, from where and
into which field is learned from the corpus and the teacher's examples.
"""

from __future__ import annotations

import math

OFFSETS = (1, 2)  # the previous-token heads of layer 0
CONST = 0.05  # the constant embedding dimension (raw weight; Gemma scales it by sqrt(hidden))
GAIN = 3.5  # q/k norm gain of the positional heads (a sharp peak at their offset)
MATCH_GAIN = 4.0  # q/k norm gain of the induction head
OUTPUT_GAIN = 4.0  # final norm gain: with embeddings of std 0.02 a copied token could not win the softmax


def init_copy_circuit(model, seed: int = 0) -> list:
    """Set the circuit in a freshly initialised ``Gemma3ForCausalLM``; returns the gradient hooks
    that keep its attention patterns fixed during pretraining (``hook.remove()`` to release them)."""
    import torch

    cfg = model.config
    d, hd = cfg.hidden_size, cfg.head_dim
    if cfg.num_hidden_layers < 2 or cfg.num_attention_heads < 2 or hd < 8 or d < 4 * hd // 2:
        raise ValueError("the copy circuit needs >= 2 layers, >= 2 heads and hidden_size >= 2 * head_dim")
    if cfg.layer_types[1] != "full_attention":
        raise ValueError("the copy circuit needs a global (full_attention) layer 1")
    n_tok, const_dim = d // 2, d - 1
    width = min(hd, (d - 1 - n_tok) // len(OFFSETS))
    layer0, layer1 = model.model.layers[0], model.model.layers[1]
    a0, a1 = layer0.self_attn, layer1.self_attn
    theta = cfg.rope_parameters[cfg.layer_types[0]]["rope_theta"]
    inv_freq = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    half, fast = hd // 2, hd // 4
    gen = torch.Generator().manual_seed(seed)
    fingerprint = torch.randn(hd, n_tok, generator=gen) / math.sqrt(n_tok)
    with torch.no_grad():
        emb = model.model.embed_tokens.weight
        emb[:, n_tok:] = 0.0
        emb[:, const_dim] = CONST
        # layer 0: constant keys, queries rotated back by `delta` positions on the fast pairs
        a0.k_proj.weight[:hd].zero_()
        a0.k_proj.weight[:fast, const_dim] = 1.0
        for h, delta in enumerate(OFFSETS):
            q = a0.q_proj.weight[h * hd : (h + 1) * hd]
            q.zero_()
            q[:fast, const_dim] = torch.cos(-delta * inv_freq[:fast]).float()
            q[half : half + fast, const_dim] = torch.sin(-delta * inv_freq[:fast]).float()
        gains = torch.zeros(hd)
        gains[:fast] = gains[half : half + fast] = GAIN - 1
        a0.q_norm.weight.copy_(gains)
        a0.k_norm.weight.copy_(gains)
        a0.v_proj.weight[:hd].zero_()
        a0.v_proj.weight[:hd, :n_tok] = fingerprint
        o0 = a0.o_proj.weight
        for h in range(len(OFFSETS)):
            lo = n_tok + h * width
            o0[:, h * hd : (h + 1) * hd] = 0.0
            o0[lo : lo + width, h * hd : h * hd + width] = torch.eye(width)
        o0[n_tok:, len(OFFSETS) * hd :] = 0.0  # the other heads write to the token half only
        layer0.post_feedforward_layernorm.weight.fill_(-0.9)  # keep the MLP off the slots at first
        # layer 1: query = fingerprint of this token, key = previous-token slot, slow pairs only
        slow = [p for p in range(half // 2, half)] + [p + half for p in range(half // 2, half)]
        slow = [j for j in slow if j < width]
        a1.q_proj.weight[:hd].zero_()
        a1.k_proj.weight[:hd].zero_()
        for j in slow:
            a1.q_proj.weight[j, :n_tok] = fingerprint[j]
            a1.k_proj.weight[j, n_tok + j] = 1.0
        gains = torch.zeros(hd)
        gains[slow] = MATCH_GAIN - 1
        a1.q_norm.weight.copy_(gains)
        a1.k_norm.weight.copy_(gains)
        # value/output: copy the attended token's embedding (its first head_dim dimensions)
        a1.v_proj.weight[:hd].zero_()
        a1.v_proj.weight[:hd, :hd] = torch.eye(hd)
        o1 = a1.o_proj.weight
        o1[:, :hd] = 0.0
        o1[:hd, :hd] = torch.eye(hd)
        model.model.norm.weight.fill_(OUTPUT_GAIN - 1)
    # the attention patterns and the fingerprint that keys (through layer 0) and queries (layer 1)
    # share stay fixed; the copy's value/output and everything else train
    frozen = [
        (a0.q_proj.weight, slice(0, len(OFFSETS) * hd), None),
        (a0.k_proj.weight, slice(0, hd), None),
        (a0.v_proj.weight, slice(0, hd), None),
        (a0.o_proj.weight, slice(None), slice(0, len(OFFSETS) * hd)),
        (a1.q_proj.weight, slice(0, hd), None),
        (a1.k_proj.weight, slice(0, hd), None),
    ]
    frozen += [(n.weight, slice(None), None) for n in (a0.q_norm, a0.k_norm, a1.q_norm, a1.k_norm)]
    return [_freeze(param, rows, cols) for param, rows, cols in frozen]


def _freeze(param, rows: slice, cols: slice | None):
    """Zero the gradient of ``param[rows, cols]`` (the circuit's part of a shared matrix)."""

    def hook(grad):
        grad = grad.clone()
        if cols is None:
            grad[rows] = 0
        else:
            grad[rows, cols] = 0
        return grad

    return param.register_hook(hook)


def positional_attention(model, length: int = 64, seed: int = 0) -> list[float]:
    """Mean attention of layer 0's positional heads on their offsets over random tokens (a check
    that the circuit is in place: about 0.99 each after ``init_copy_circuit``)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(6, model.config.vocab_size, (1, length), generator=gen)
    impl = model.config._attn_implementation
    model.config._attn_implementation = "eager"
    try:
        with torch.no_grad():
            att = model(input_ids=x, output_attentions=True, use_cache=False).attentions[0][0]
    finally:
        model.config._attn_implementation = impl
    return [
        round(sum(att[h, t, t - delta].item() for t in range(4, length)) / (length - 4), 4)
        for h, delta in enumerate(OFFSETS)
    ]


def repeat_sequences(gen, count: int, seq_len: int, vocab: tuple[int, int], bos: int):
    """``count`` synthetic copy sequences of ``seq_len`` tokens: random tokens S, a random gap of
    random tokens, S again, random padding; labels only on the repeat (after its first token).
    Returns (input_ids, labels) as int64 tensors. Distances vary, so only content matching helps."""
    import torch

    lo, hi = vocab
    ids = torch.randint(lo, hi, (count, seq_len), generator=gen)
    labels = torch.full((count, seq_len), -100, dtype=torch.long)
    ids[:, 0] = bos
    for i in range(count):
        n = int(torch.randint(16, max(17, min(64, seq_len // 3) + 1), (1,), generator=gen))
        gap = int(torch.randint(0, max(1, seq_len - 1 - 2 * n), (1,), generator=gen))
        start = 1 + n + gap
        ids[i, start : start + n] = ids[i, 1 : 1 + n]
        labels[i, start + 1 : start + n] = ids[i, 2 : 1 + n]
    return ids, labels


def copy_accuracy(model, ids, labels) -> float:
    """Greedy next-token accuracy on the labelled (repeated) tokens of copy sequences: what only
    copying from the context gets right; about 0 for a model that cannot copy."""
    import torch

    was_training = model.training
    model.eval()
    with torch.no_grad():
        pred = model(input_ids=ids, use_cache=False).logits.argmax(-1)
    model.train(was_training)
    mask = labels[:, 1:] != -100
    return round((pred[:, :-1] == labels[:, 1:])[mask].float().mean().item(), 4)
