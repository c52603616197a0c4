"""The KV-reusing decoder gives exactly the greedy answers of transformers' generate, turn after turn."""

import pytest

torch = pytest.importorskip("torch")

from transformers import Gemma3ForCausalLM, Gemma3TextConfig  # noqa: E402

from eval.cached_decoding import CachedDecoder, supports  # noqa: E402


def tiny_model(window: int = 8):
    torch.manual_seed(0)
    cfg = Gemma3TextConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        query_pre_attn_scalar=8,
        sliding_window=window,
        layer_types=["sliding_attention", "full_attention"] * 2,
        max_position_embeddings=512,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=1,
    )
    model = Gemma3ForCausalLM(cfg).eval()
    model.config._attn_implementation = "sdpa"
    return model


def reference(model, prompt: list[int], max_new: int, stop: set[int]) -> list[int]:
    x = torch.tensor([prompt])
    with torch.inference_mode():
        g = model.generate(
            input_ids=x,
            attention_mask=torch.ones_like(x),
            max_new_tokens=max_new,
            do_sample=False,
            eos_token_id=list(stop),
            pad_token_id=0,
        )
    out = g[0, len(prompt) :].tolist()
    for k, t in enumerate(out):
        if t in stop:
            return out[:k]
    return out


def test_supports_gemma3_only():
    assert supports(tiny_model())
    assert not supports(torch.nn.Linear(2, 2))


def test_batched_turns_equal_generate_and_reuse_the_cache():
    model = tiny_model(window=8)  # prompts far longer than the window: the sliding mask matters
    dec = CachedDecoder(model)
    g = torch.Generator().manual_seed(1)
    convs = [torch.randint(3, 97, (n,), generator=g).tolist() for n in (40, 23, 57)]
    stop = {1}
    for turn in range(3):
        got = dec.generate(convs, max_new_tokens=12, stop_ids=stop)
        for i, (ids, why) in enumerate(got):
            assert ids == reference(model, convs[i], 12, stop), (turn, i)
            assert why in ("stop_token", "max_new_tokens")
        # the next turn: the answer plus a new "user" turn of a different length per conversation
        convs = [
            c + ids + torch.randint(3, 97, (5 + 3 * i,), generator=g).tolist()
            for i, (c, (ids, _)) in enumerate(zip(convs, got))
        ]
    assert dec.cache.hits >= 6  # turns 2 and 3 started from the stored prefixes
    assert dec.stats["encoded_tokens"] < dec.stats["prompt_tokens"] / 2


def looping_model():
    """A model that always repeats its last token: attention and MLP outputs are zero, so the logits are
    the tied embedding's scores of the current token's own embedding, highest for itself."""
    model = tiny_model()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return model


def test_a_looping_generation_is_cut_by_the_guard_in_both_decoding_paths():
    from train.answer_guard import AnswerGuard, stopping_criteria

    model = looping_model()
    prompt = [2, 40, 41, 42]
    dec = CachedDecoder(model)
    ((ids, why),) = dec.generate(
        [prompt], max_new_tokens=200, stop_ids=[1], guard=AnswerGuard, decode_token=lambda t: "x"
    )
    assert why == "repetition" and len(ids) == AnswerGuard().window  # cut at the first full window
    assert set(ids) == {42}
    # transformers' generate with the same guard as a stopping criterion
    guards = [AnswerGuard()]
    x = torch.tensor([prompt])
    out = model.generate(input_ids=x, attention_mask=torch.ones_like(x), max_new_tokens=200, do_sample=False,
                         pad_token_id=0, stopping_criteria=stopping_criteria(guards, lambda t: "x", len(prompt)))  # fmt: skip
    assert guards[0].reason == "repetition" and out.shape[1] - len(prompt) == guards[0].cut < 200
