"""A copying (induction) circuit for the embedded tiny base, set at initialisation.

Every writer target rests on copying from the context: the call's 12-hex-digit id, the tool name and
the argument values must reach the entry. A 12B base has induction heads from pretraining on
trillions of tokens; the tiny base gets a few CPU minutes. Measured with ``bench/copy_probe.py``
(results in ``bench/results/``): a content-matching copy does not emerge from 1-2M tokens of
pretraining, whatever the curriculum, while a circuit set at initialisation copies random tokens at
any distance after a few dozen steps. So the tiny base starts with one:

- layer 0 (a sliding layer), three positional heads (four with ``match_tokens=3``): attend zero, one
  and two (and three) tokens back, whatever the tokens. Their queries and keys read a constant
  embedding dimension and differ only by RoPE phase on the high-frequency pairs; their values (a
  random projection of the token half of the residual, the token's *fingerprint*) are written to a
  slot of their own, one per head.
- layer 1 (a sliding layer), query head 0 and its twin on the second key/value head: match this
  token *and the one before it* against the previous two tokens of every position in its window,
  prefer the latest match (a constant query and key on a middle-frequency pair, whose ``cos`` falls
  over the window) and copy the attended token's embedding. A one-token match cannot tell the current
  call's ``"tool": "`` from the entry's own ``"call_id": "`` a few tokens back; a two-token match with
  a preference for the latest one picks the current call. With ``match_tokens=3`` (a fourth positional
  head, three tokens back) it matches this token and the two before it: an id whose character pair
  repeats (``cfb3b3f7``) then continues from the call, not from its own earlier pair, the failure of
  the two-token match (``bench/results/learning-2026-12-03b-cpu.md``); where no position matches all
  three, the longest partial match still wins, the third token weighing half as much.
- the first global layer after it, query head 0: matches this token's fingerprint against the
  previous-token slot of every earlier position on the low-frequency RoPE pairs (nearly position-free
  over the context) and copies the attended token's fingerprint back into the token half: a
  one-token match anywhere in the context.

The attention patterns (queries, keys and their norms), the fingerprints, and everything that could
write into the slots or the constant dimension before the global match (the embeddings' slot
columns, other heads' and MLP rows there) stay frozen during pretraining; everything else, the
copies' values and outputs included, trains. Nothing
task-specific is set: no token, field or layout is named; what to copy, from where and into which
field is learned from the corpus and the teacher's examples.
"""

from __future__ import annotations

import math

OFFSETS = (1, 2, 0, 3)  # layer 0's positional heads by slot: previous token, the one before, this one, 3 back
CONST = 0.05  # the constant embedding dimension (raw weight; Gemma scales it by sqrt(hidden))
GAIN = 3.5  # q/k norm gain of the positional heads (a sharp peak at their offset)
MATCH_GAIN = 4.0  # q/k norm gain of the induction heads
RECENCY = 5.0  # weight of the constant query/key on the window match's recency pair
RECENCY_PAIR = 8  # with the sliding layers' theta 1e4: 0.01 rad a token, monotonic over a 128 window
# the window match's dimensions shared between this token, the one before and the one before that:
# with 3 tokens, a match on the last two still wins where no position matches all three
WINDOW_WEIGHTS = (1.0, 1.0, 0.5)
OUTPUT_GAIN = 4.0  # final norm gain: with embeddings of std 0.02 a copied token could not win the softmax


def init_copy_circuit(model, seed: int = 0, match_tokens: int = 2, global_phrase: bool = False) -> list:
    """Set the circuit in a freshly initialised ``Gemma3ForCausalLM``; returns the gradient hooks
    that keep its attention patterns fixed during pretraining (``hook.remove()`` to release them).
    ``match_tokens``: how many tokens the window match compares (2 or 3). ``global_phrase``: the
    first global layer also matches the last ``match_tokens`` tokens anywhere in the context."""
    import torch

    cfg = model.config
    if match_tokens not in (2, 3):
        raise ValueError(f"copy_match_tokens: expected 2 or 3, got {match_tokens}")
    if not _has_window_match(cfg):
        match_tokens = 2  # no window match to compare more tokens: layer 0 keeps the three slots it had
    offsets = OFFSETS[: match_tokens + 1]
    _check(cfg, offsets)
    d, hd = cfg.hidden_size, cfg.head_dim
    n_tok, const_dim = d // 2, d - 1
    width = min(hd, (d - 1 - n_tok) // len(offsets))
    slot = {offset: n_tok + i * width for i, offset in enumerate(offsets)}
    gen = torch.Generator().manual_seed(seed)
    fingerprint = torch.randn(hd, n_tok, generator=gen) / math.sqrt(n_tok)
    with torch.no_grad():
        emb = model.model.embed_tokens.weight
        emb[:, n_tok:] = 0.0
        emb[:, const_dim] = CONST
        frozen = _positional_heads(model, fingerprint, slot, width, const_dim)
        if _has_window_match(cfg):
            att = model.model.layers[1].self_attn
            frozen += _window_match(att, slot, width, const_dim, n_tok, match_tokens)
            # the balance of match and recency in that layer's queries and keys
            frozen.append((model.model.layers[1].input_layernorm.weight, slice(None), None))
        glob = cfg.layer_types.index("full_attention", 1)
        frozen.append((emb, slice(None), slice(n_tok, None)))  # no token writes to the slots
        frozen += _keep_slots_clear(model.model.layers[0], n_tok, len(offsets))
        for layer in model.model.layers[1:glob]:
            frozen += _keep_slots_clear(layer, n_tok, 1)
        frozen += _one_token_match(model.model.layers[glob].self_attn, fingerprint, slot, width)
        if global_phrase:
            frozen += _phrase_match(
                model.model.layers[glob].self_attn, fingerprint, slot, width, match_tokens
            )
        model.model.norm.weight.fill_(OUTPUT_GAIN - 1)
    return [_freeze(param, rows, cols) for param, rows, cols in frozen]


def _check(cfg, offsets: tuple[int, ...]) -> None:
    n = len(offsets)
    if cfg.num_hidden_layers < 2 or cfg.num_attention_heads < n or cfg.head_dim < 8:
        raise ValueError(
            f"the copy circuit needs >= 2 layers, >= {n} attention heads and head_dim >= 8 "
            "(or tiny.copy_circuit: false)"
        )
    if cfg.hidden_size < 4 * cfg.head_dim // 2 or (cfg.hidden_size // 2 - 1) // n < 8:
        raise ValueError(f"the copy circuit needs hidden_size >= 2 * head_dim and room for {n} slots")
    if "full_attention" not in cfg.layer_types[1:]:
        raise ValueError("the copy circuit needs a global (full_attention) layer after layer 0")


def _has_window_match(cfg) -> bool:
    """The two-token match needs a sliding layer 1 and a head_dim with room for its pairs."""
    return cfg.layer_types[1] == "sliding_attention" and cfg.head_dim >= 32


def _inv_freq(cfg, layer: int):
    import torch

    theta = cfg.rope_parameters[cfg.layer_types[layer]]["rope_theta"]
    return theta ** (-torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim)


def _positional_heads(model, fingerprint, slot: dict, width: int, const_dim: int) -> list:
    """Layer 0: head h attends ``offsets[h]`` tokens back and writes the fingerprint there to its slot.
    Every key/value head serving a positional head gets a constant key and the fingerprint value."""
    import torch

    cfg, layer = model.config, model.model.layers[0]
    att, hd = layer.self_attn, cfg.head_dim
    group = cfg.num_attention_heads // cfg.num_key_value_heads
    offsets = tuple(slot)
    kv_heads = sorted({h // group for h in range(len(offsets))})
    inv_freq = _inv_freq(cfg, 0)
    half, fast = hd // 2, hd // 4
    for kv in kv_heads:
        rows = slice(kv * hd, (kv + 1) * hd)
        att.k_proj.weight[rows].zero_()
        att.k_proj.weight[kv * hd : kv * hd + fast, const_dim] = 1.0
        att.v_proj.weight[rows].zero_()
        att.v_proj.weight[rows, : fingerprint.shape[1]] = fingerprint
    o = att.o_proj.weight
    n_heads = len(offsets)
    for h, delta in enumerate(offsets):
        q = att.q_proj.weight[h * hd : (h + 1) * hd]
        q.zero_()
        q[:fast, const_dim] = torch.cos(-delta * inv_freq[:fast]).float()
        q[half : half + fast, const_dim] = torch.sin(-delta * inv_freq[:fast]).float()
        o[:, h * hd : (h + 1) * hd] = 0.0
        o[slot[delta] : slot[delta] + width, h * hd : h * hd + width] = torch.eye(width)
    gains = torch.zeros(hd)
    gains[:fast] = gains[half : half + fast] = GAIN - 1
    att.q_norm.weight.copy_(gains)
    att.k_norm.weight.copy_(gains)
    kv_rows = slice(0, (max(kv_heads) + 1) * hd)
    return [
        (att.q_proj.weight, slice(0, n_heads * hd), None),
        (att.k_proj.weight, kv_rows, None),
        (att.v_proj.weight, kv_rows, None),
        (att.o_proj.weight, slice(None), slice(0, n_heads * hd)),
        (att.q_norm.weight, slice(None), None),
        (att.k_norm.weight, slice(None), None),
        (layer.input_layernorm.weight, slice(None), None),  # the fingerprints' scale
    ]


def _keep_slots_clear(layer, n_tok: int, circuit_heads: int) -> list:
    """A layer up to the global match: its other heads and its MLP write to the token half only, so
    the slots and the constant dimension hold the circuit's values at every position (measured: left
    trainable, the constant dimension drifted per token and the recency preference with it)."""
    hd = layer.self_attn.head_dim
    layer.self_attn.o_proj.weight[n_tok:, circuit_heads * hd :] = 0.0
    layer.mlp.down_proj.weight[n_tok:] = 0.0
    layer.post_feedforward_layernorm.weight.fill_(-0.9)
    return [
        (layer.self_attn.o_proj.weight, slice(n_tok, None), slice(circuit_heads * hd, None)),
        (layer.mlp.down_proj.weight, slice(n_tok, None), None),
    ]


def _copy_value(att, hd: int) -> None:
    """Head 0's value/output: the attended token's embedding (its first head_dim dimensions)."""
    import torch

    att.v_proj.weight[:hd].zero_()
    att.v_proj.weight[:hd, :hd] = torch.eye(hd)
    att.o_proj.weight[:, :hd] = 0.0
    att.o_proj.weight[:hd, :hd] = torch.eye(hd)


def _slow_dims(hd: int) -> list[int]:
    """The slow half of the RoPE pairs, both dimensions of each: nearly position-free over the context."""
    half = hd // 2
    return [j for p in range(half // 2, half) for j in (p, p + half)]


def _token_bounds(n: int, tokens: int) -> list[int]:
    """Split ``n`` match components between the last ``tokens`` tokens by ``WINDOW_WEIGHTS``."""
    weights = WINDOW_WEIGHTS[:tokens]
    return [round(n * sum(weights[:t]) / sum(weights)) for t in range(tokens + 1)]


def _match_rows(att, dims: list[int], query_slot: int, key_slot: int, components: list[int]) -> None:
    """Head dims ``dims`` of query head 0 / key head 0 read fingerprint ``components`` of two slots."""
    for j, c in zip(dims, components, strict=True):
        att.q_proj.weight[j, query_slot + c] = 1.0
        att.k_proj.weight[j, key_slot + c] = 1.0


def _one_token_match(att, fingerprint, slot: dict, width: int) -> list:
    """A global layer's head 0: this token (slot 0) against every position's previous token (slot 1)
    on the slow half of the RoPE pairs, nearly position-free over the whole context. Its value is the
    attended token's fingerprint (slot 0), mapped back to the token half by the fingerprint's
    transpose: by then the token half also carries the window match's copy of the *next* token,
    which a value read from it would pass on."""
    import torch

    hd = att.head_dim
    dims = _slow_dims(hd)
    dims = dims[: min(len(dims), width)]
    att.q_proj.weight[:hd].zero_()
    att.k_proj.weight[:hd].zero_()
    _match_rows(att, dims, slot[0], slot[1], list(range(len(dims))))
    gains = torch.zeros(hd)
    gains[dims] = MATCH_GAIN - 1
    att.q_norm.weight.copy_(gains)
    att.k_norm.weight.copy_(gains)
    att.v_proj.weight[:hd].zero_()
    att.v_proj.weight[:width, slot[0] : slot[0] + width] = torch.eye(width)
    att.o_proj.weight[:, :hd] = 0.0
    att.o_proj.weight[: fingerprint.shape[1], :width] = fingerprint[:width].T
    return _attention_rows(att, hd)


def _phrase_match(att, fingerprint, slot: dict, width: int, tokens: int) -> list:
    """The global layer's first query head on key/value head 1: this token and the ``tokens - 1``
    before it against the ``tokens`` before every position, on the one-token match's slow pairs
    (nearly position-free), copying the attended token's fingerprint like that match. Where a phrase
    recurs far apart (``open incident INC-7767`` in one turn, ``open incident `` in a later one) the
    window cannot see the first and a one-token match of ``' '`` finds every space."""
    import torch

    hd = att.head_dim
    n_kv = att.config.num_key_value_heads
    if n_kv < 2:
        raise ValueError("the global phrase match needs a second key/value head")
    head = att.config.num_attention_heads // n_kv  # first query head served by key/value head 1
    dims = _slow_dims(hd)
    q, k, v, o = att.q_proj.weight, att.k_proj.weight, att.v_proj.weight, att.o_proj.weight
    q[head * hd : (head + 1) * hd] = 0.0
    k[hd : 2 * hd] = 0.0
    bounds = _token_bounds(min(len(dims), width), tokens)
    for t in range(tokens):  # query: token i - t (slot t back); key: token j - 1 - t
        for c in range(bounds[t], bounds[t + 1]):
            q[head * hd + dims[c], slot[t] + c] = 1.0
            k[hd + dims[c], slot[t + 1] + c] = 1.0
    v[hd : 2 * hd] = 0.0
    v[hd : hd + width, slot[0] : slot[0] + width] = torch.eye(width)
    o[:, head * hd : (head + 1) * hd] = 0.0
    o[: fingerprint.shape[1], head * hd : head * hd + width] = fingerprint[:width].T
    return [
        (q, slice(head * hd, (head + 1) * hd), None),
        (k, slice(hd, 2 * hd), None),
        (v, slice(hd, 2 * hd), None),
        (o, slice(None), slice(head * hd, (head + 1) * hd)),
    ]


def _window_match(att, slot: dict, width: int, const_dim: int, n_tok: int, tokens: int) -> list:
    """Layer 1 head 0: this token and the ``tokens - 1`` before it against the ``tokens`` before every
    position in the window, on the pairs above ``RECENCY_PAIR`` (split between the tokens, each on
    fingerprint components of its own); the recency pair prefers the latest match. Copies the attended
    token's embedding (by layer 1 the token half is still the token's own). A position that matches
    fewer of the tokens still scores in proportion, so without a full match the longest partial one wins."""
    import torch

    hd = att.head_dim
    half = hd // 2
    pairs = list(range(RECENCY_PAIR + 1, half))
    dims = pairs + [p + half for p in pairs]  # a pair's two dimensions rotate together; both are used
    n = min(len(dims), width)
    att.q_proj.weight[:hd].zero_()
    att.k_proj.weight[:hd].zero_()
    bounds = _token_bounds(n, tokens)
    for t in range(tokens):  # query: token i - t (slot t back); key: token j - 1 - t
        group = list(range(bounds[t], bounds[t + 1]))
        _match_rows(att, [dims[c] for c in group], slot[t], slot[t + 1], group)
    att.q_proj.weight[RECENCY_PAIR, const_dim] = RECENCY
    att.k_proj.weight[RECENCY_PAIR, const_dim] = RECENCY
    gains = torch.zeros(hd)
    gains[dims[:n] + [RECENCY_PAIR]] = MATCH_GAIN - 1
    att.q_norm.weight.copy_(gains)
    att.k_norm.weight.copy_(gains)
    _copy_value(att, hd)
    return _attention_rows(att, hd) + _twin_head(att, n_tok)


def _twin_head(att, n_tok: int) -> list:
    """The first query head of the second key/value head: the same match, copying the token half's
    next head_dim dimensions, so the copy carries the whole token embedding (measured: with half of
    it, a rare token's copy lost to the model's prior, ``ts`` after ``list_alert`` scoring 1.2 against
    9.5 for the closing quote, with all attention on the right position)."""
    import torch

    hd = att.head_dim
    n_kv = att.config.num_key_value_heads
    if n_kv < 2 or n_tok < 2 * hd:
        return []
    twin = att.config.num_attention_heads // n_kv  # first query head served by key/value head 1
    q, k, v, o = att.q_proj.weight, att.k_proj.weight, att.v_proj.weight, att.o_proj.weight
    q[twin * hd : (twin + 1) * hd] = q[:hd]
    k[hd : 2 * hd] = k[:hd]
    v[hd : 2 * hd].zero_()
    v[hd : 2 * hd, hd : 2 * hd] = torch.eye(hd)
    o[:, twin * hd : (twin + 1) * hd] = 0.0
    o[hd : 2 * hd, twin * hd : (twin + 1) * hd] = torch.eye(hd)
    return [(q, slice(twin * hd, (twin + 1) * hd), None), (k, slice(hd, 2 * hd), None)]


def _attention_rows(att, hd: int) -> list:
    return [
        (att.q_proj.weight, slice(0, hd), None),
        (att.k_proj.weight, slice(0, hd), None),
        (att.q_norm.weight, slice(None), None),
        (att.k_norm.weight, slice(None), None),
    ]


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


def positional_attention(model, length: int = 64, seed: int = 0, match_tokens: int = 2) -> list[float]:
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
        for h, delta in enumerate(OFFSETS[: match_tokens + 1])
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
