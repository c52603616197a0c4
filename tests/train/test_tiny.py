"""The embedded tiny base: Gemma 3 architecture facts, tokenizer, pretraining, caching."""

from __future__ import annotations

import dataclasses
import json

import pytest

from train.config import TinyBaseConfig


def test_tiny_base_files_and_architecture(tiny_base, tiny_settings):
    TEST_TINY = tiny_settings
    for f in (
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "pretrain.json",
    ):
        assert (tiny_base / f).is_file(), f
    assert tiny_base.name.startswith("tiny-gemma3-")
    cfg = json.loads((tiny_base / "config.json").read_text())
    assert cfg["model_type"] == "gemma3_text"
    assert set(cfg["layer_types"]) == {"sliding_attention", "full_attention"}  # local and global layers
    assert cfg["num_key_value_heads"] < cfg["num_attention_heads"]  # GQA
    assert cfg["query_pre_attn_scalar"] == cfg["head_dim"] == TEST_TINY["head_dim"]
    assert cfg["sliding_window"] == TEST_TINY["sliding_window"]


def test_tiny_pretraining_lowers_the_loss(tiny_base, tiny_settings):
    TEST_TINY = tiny_settings
    info = json.loads((tiny_base / "pretrain.json").read_text())
    assert info["eval_loss_after"] < info["eval_loss_before"] - 0.5
    assert info["corpus_digest"].startswith("sha256:")
    assert len(info["train_loss"]) == TEST_TINY["pretrain_steps"]


def test_tiny_tokenizer_is_byte_level_with_gemma_specials(tiny_base, tiny_settings):
    TEST_TINY = tiny_settings
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_base))
    assert len(tok) <= TEST_TINY["vocab_size"]
    for t in ("<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"):
        assert t in tok.get_vocab()
    assert (tok.pad_token, tok.eos_token, tok.bos_token) == ("<pad>", "<eos>", "<bos>")
    text = 'Zahlung €1.200 an "Acme" ✓ — 払い {"k": [1, 2]}\n\ttab'
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    assert "{% generation %}" in tok.chat_template


def test_tiny_base_is_cached_and_keyed_by_config(sft_dir, cache_dir, tiny_base, tiny_settings):
    TEST_TINY = tiny_settings
    from train.tiny import base_dir_name, corpus_digest, corpus_rows, ensure_tiny_base

    before = (tiny_base / "model.safetensors").stat().st_mtime_ns
    again = ensure_tiny_base(sft_dir, cache_dir, TinyBaseConfig(**TEST_TINY))
    assert again == tiny_base and (again / "model.safetensors").stat().st_mtime_ns == before
    digest = corpus_digest(corpus_rows(sft_dir)[0])
    other = dataclasses.replace(TinyBaseConfig(**TEST_TINY), pretrain_steps=21)
    assert base_dir_name(other, digest) != tiny_base.name
    assert base_dir_name(TinyBaseConfig(**TEST_TINY), digest) == tiny_base.name


def test_tokenizer_training_is_deterministic(sft_dir):
    from train.tiny import corpus_rows, train_tokenizer

    texts = [m["content"] for r in corpus_rows(sft_dir)[0] for m in r["messages"]]
    a = train_tokenizer(texts, 400).backend_tokenizer.to_str()
    b = train_tokenizer(texts, 400).backend_tokenizer.to_str()
    assert a == b


def test_tiny_base_generates_with_stop_tokens(tiny_base):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_base))
    eos = model.generation_config.eos_token_id
    assert isinstance(eos, list) and len(eos) == 2  # <eos> and <end_of_turn>
    out = model.generate(torch.tensor([[2, 10, 11]]), max_new_tokens=4, do_sample=False)
    assert out.shape[1] <= 7


@pytest.mark.parametrize("fmt", ["text", "conversation"])
def test_pretrain_formats(sft_dir, fmt):
    from train.tiny import _documents, corpus_rows, train_tokenizer

    rows = corpus_rows(sft_dir)[0][:3]
    texts = [m["content"] for r in rows for m in r["messages"]]
    tok = train_tokenizer(texts, 300)
    docs = _documents(rows, tok, fmt)
    assert len(docs) == 3 and all(d[-1] == tok.eos_token_id for d in docs)
    sot = tok.convert_tokens_to_ids("<start_of_turn>")
    assert any(sot in d for d in docs) == (fmt == "conversation")


def test_ids_tokenize_one_character_per_token_wherever_they_appear(sft_dir):
    """A call id is a token-by-token copy: every digit and hex letter of it is a token of its own, the
    same tokens in the call shown to the writer and in the entry it answers; plain words keep merging."""
    from train.tiny import corpus_rows, train_tokenizer

    texts = [m["content"] for r in corpus_rows(sft_dir)[0] for m in r["messages"]]
    tok = train_tokenizer(texts, 600)
    cid = "call_80e76f8c7143"
    pieces = [tok.convert_tokens_to_string([t]) for t in tok.tokenize(cid)]
    hex_part = "".join(pieces).split("_", 1)[1]
    assert hex_part == "80e76f8c7143"
    assert pieces[-12:] == list("80e76f8c7143")  # one token per character
    shown = tok(f"Call 3: get_vendor (id {cid})", add_special_tokens=False)["input_ids"]
    logged = tok(f'{{"call_id": "{cid}", "tool": "get_vendor"}}', add_special_tokens=False)["input_ids"]
    id_tokens = tok(cid[5:], add_special_tokens=False)["input_ids"]
    assert len(id_tokens) == 12
    for ids in (shown, logged):
        assert any(ids[i : i + 12] == id_tokens for i in range(len(ids) - 11))
    # identifiers are the same tokens after a space (the call line, a description) as after a quote
    for ident in ("get_vendor", "INV-8408", "notify_traveler"):
        plain = tok(f'"{ident}"', add_special_tokens=False)["input_ids"][1:-1]
        assert plain and any(
            shown_ids[i : i + len(plain)] == plain
            for shown_ids in [
                tok(f"Call 3: {ident} (id {cid}) for {ident}", add_special_tokens=False)["input_ids"]
            ]
            for i in range(len(shown_ids))
        )
    for amount in ("1950.25", "INV-8408"):
        digits = [
            p for p in tok.tokenize(amount) if any(c.isdigit() for c in tok.convert_tokens_to_string([p]))
        ]
        assert all(len(tok.convert_tokens_to_string([p]).strip()) == 1 for p in digits)
    # words made of hex letters are not split when no digit is next to them
    assert len(tok.tokenize(" cafe")) < 4 or len(tok.tokenize(" decade")) < 6
    text = 'Zahlung €1.200 an "Acme" ✓ call_00ffab12cd34 {"k": [1, 2]}'
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_json_separators_are_one_token_each(tiny_base):
    """``": "`` and ``", "`` are single tokens, so a value follows the same two tokens ``key": "``
    wherever the key appears (the copy circuit's two-token match), and text round-trips."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_base))
    text = '{"tool": "get_user", "call_id": "call_0a1b2c3d4e5f"}'
    ids = tok(text, add_special_tokens=False)["input_ids"]
    pieces = [tok.decode([i]) for i in ids]
    assert pieces.count('": "') == 2 and pieces.count('", "') == 1
    assert pieces[pieces.index("tool") + 1] == '": "'
    assert tok.decode(ids) == text
