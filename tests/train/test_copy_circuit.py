"""The copy circuit of the tiny base: positional heads in place, copy sequences well formed, and a
model that starts from it copies random tokens at any distance after a few steps (a plain one does not)."""

import pytest
import torch

from train.copy_circuit import copy_accuracy, init_copy_circuit, positional_attention, repeat_sequences

VOCAB = 300


def small_model(layer_types=("sliding_attention", "sliding_attention", "full_attention")):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=len(layer_types),
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        query_pre_attn_scalar=32,
        sliding_window=64,
        layer_types=list(layer_types),
        max_position_embeddings=1024,
        tie_word_embeddings=True,
    )
    model = Gemma3ForCausalLM(cfg)
    model.config._attn_implementation = "sdpa"
    return model


def test_positional_heads_attend_to_their_offsets():
    model = small_model()
    assert max(positional_attention(model)) < 0.3  # a plain init attends anywhere
    init_copy_circuit(model)
    assert all(a > 0.95 for a in positional_attention(model))  # offsets 1, 2 and 0


def test_repeat_sequences_label_only_the_predictable_repeat():
    gen = torch.Generator().manual_seed(1)
    ids, labels = repeat_sequences(gen, 8, 96, (6, VOCAB), bos=2)
    assert ids.shape == labels.shape == (8, 96)
    assert (ids[:, 0] == 2).all()
    for row_ids, row_labels in zip(ids.tolist(), labels.tolist(), strict=True):
        marked = [i for i, label in enumerate(row_labels) if label != -100]
        assert marked and marked == list(range(marked[0], marked[-1] + 1))
        n = len(marked) + 1  # the repeat's first token cannot be predicted
        start = marked[0] - 1
        assert row_ids[start : start + n] == row_ids[1 : 1 + n]  # S again, after a gap
        assert all(row_labels[i] == row_ids[i] for i in marked)
    again = repeat_sequences(torch.Generator().manual_seed(1), 8, 96, (6, VOCAB), bos=2)
    assert torch.equal(again[0], ids) and torch.equal(again[1], labels)


def copy_accuracy_after(model, steps: int, hooks=()) -> float:
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(steps):
        ids, labels = repeat_sequences(gen, 16, 96, (6, VOCAB), bos=2)
        model(input_ids=ids, labels=labels, use_cache=False).loss.backward()
        opt.step()
        opt.zero_grad()
    return copy_accuracy(
        model, *repeat_sequences(torch.Generator().manual_seed(99), 16, 96, (6, VOCAB), bos=2)
    )


def test_the_circuit_copies_at_any_distance_where_a_plain_init_cannot():
    plain = copy_accuracy_after(small_model(), 40)
    model = small_model()
    hooks = init_copy_circuit(model)
    frozen = model.model.layers[0].self_attn.q_proj.weight[:64].clone()
    copied = copy_accuracy_after(model, 40)
    assert plain < 0.1
    assert copied > 0.8
    # the attention patterns stayed as set (up to AdamW's decoupled weight decay) while the rest trained
    assert torch.allclose(model.model.layers[0].self_attn.q_proj.weight[:64], frozen, rtol=0.01, atol=0)
    for hook in hooks:
        hook.remove()


def test_the_circuit_needs_a_global_layer():
    with pytest.raises(ValueError, match="global"):
        init_copy_circuit(small_model(("sliding_attention", "sliding_attention")))


def tiny_sized_model():
    """The embedded tiny base's shape (configs/train/tiny.yaml), freshly initialised."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(
        vocab_size=3000,
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        query_pre_attn_scalar=32,
        sliding_window=128,
        layer_types=["sliding_attention"] * 2 + ["full_attention"] * 2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    model = Gemma3ForCausalLM(cfg)
    model.config._attn_implementation = "eager"
    return model


@pytest.mark.parametrize("match_tokens", [2, 3])
def test_the_window_match_takes_the_latest_two_token_match_over_a_nearer_one_token_match(match_tokens):
    """``"tool": "`` in an entry must copy from the current call's ``"tool": "``, not from the entry's
    own ``"call_id": "`` a few tokens back (the same last token) nor from an older call's tool field.
    With three tokens and no position matching all three, the latest two-token match still wins most
    of the time (29 of these 40; the third token's dimensions add noise), the older one most others."""
    model = tiny_sized_model()
    init_copy_circuit(model, match_tokens=match_tokens)
    gen = torch.Generator().manual_seed(1)
    hits = 0
    for _ in range(40):
        x = torch.randint(6, 3000, (120,), generator=gen)
        a, b, c = (int(v) for v in torch.randint(6, 3000, (3,), generator=gen))
        x[20], x[21] = a, b  # an older full match (next token at 22)
        x[70], x[71] = a, b  # the latest full match (next token at 72)
        x[113], x[114] = c, b  # a nearer match on the last token only
        x[118], x[119] = a, b
        with torch.no_grad():
            att = model(input_ids=x[None], output_attentions=True, use_cache=False).attentions[1][0, 0, -1]
        hits += int(att.argmax()) == 72
    assert hits >= {2: 36, 3: 26}[match_tokens]



def window_match_target(match_tokens: int, seed: int) -> tuple[int, int]:
    """An id whose character pair repeats (``p q`` at id positions 2-3 and 6-7), copied later in the
    context: (where the window match attends after the copy's second ``p q``, the right position)."""
    model = tiny_sized_model()
    init_copy_circuit(model, match_tokens=match_tokens)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(6, 3000, (120,), generator=gen)
    ident = torch.randint(6, 3000, (12,), generator=gen)
    ident[6], ident[7] = ident[2], ident[3]
    x[30:42] = ident  # the id in the call
    x[100:108] = ident[:8]  # the answer has copied it up to the repeated pair
    with torch.no_grad():
        att = model(input_ids=x[None], output_attentions=True, use_cache=False).attentions[1][0, 0, 107]
    return int(att.argmax()), 38  # the call's token after its second pair


def test_a_three_token_match_continues_an_id_past_its_repeated_pair():
    """Two tokens match the copy's own earlier pair (the latest occurrence) and continue from there
    (``cfb3b3f7`` -> ``cfb3b3b3``); three tokens find the call's id."""
    three = [window_match_target(3, seed) for seed in range(20)]
    assert sum(got == want for got, want in three) >= 14  # 16 of 20 (the rest: the own pair, 3 back)
    two = [window_match_target(2, seed) for seed in range(20)]
    assert sum(got == 104 for got, _ in two) >= 18  # the old failure: the copy's own pair


def test_the_global_phrase_match_finds_a_phrase_beyond_the_window():
    """``open incident INC-7767`` in an early turn, ``open incident `` a thousand tokens later: the
    phrase head attends to the value after the first phrase, where the one-token match of the space
    (a token that is everywhere) cannot, and without the option the head is not set."""
    gen = torch.Generator().manual_seed(1)
    with_phrase, plain = tiny_sized_model(), tiny_sized_model()
    init_copy_circuit(with_phrase, match_tokens=3, global_phrase=True)
    init_copy_circuit(plain, match_tokens=3)
    head = 2  # the first query head on key/value head 1
    found = {"phrase": 0.0, "one_token": 0.0, "plain": 0.0}
    for trial in range(10):
        x = torch.randint(10, 3000, (1200,), generator=gen)
        x[torch.rand(1200, generator=gen) < 0.15] = 5  # the space
        a, b = (int(v) for v in torch.randint(10, 3000, (2,), generator=gen))
        p = 100 + 20 * trial
        x[p : p + 3] = torch.tensor([a, b, 5])
        x[-3:] = torch.tensor([a, b, 5])
        with torch.no_grad():
            att = with_phrase(input_ids=x[None], output_attentions=True, use_cache=False).attentions[2][0]
            att_plain = plain(input_ids=x[None], output_attentions=True, use_cache=False).attentions[2][0]
        found["phrase"] += att[head, -1, p + 3].item() / 10
        found["one_token"] += att[0, -1, p + 3].item() / 10
        found["plain"] += att_plain[head, -1, p + 3].item() / 10
    assert found["phrase"] > 0.6  # 0.77 here (the rest on other spaces and partial matches)
    assert found["one_token"] < 0.05 and found["plain"] < 0.05


def test_the_global_phrase_match_needs_a_second_key_value_head():
    model = small_model()
    model.config.num_key_value_heads = 1
    with pytest.raises(ValueError, match="second key/value head"):
        from train.copy_circuit import _phrase_match

        _phrase_match(model.model.layers[2].self_attn, torch.zeros(32, 32), {0: 32, 1: 40, 2: 48, 3: 56}, 8, 3)
