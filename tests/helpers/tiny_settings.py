"""The tiny base every training test builds (one home: tests/train/conftest.py and the e2e tests)."""

# small settings so that every training test takes seconds: a tiny base of 2 layers, brief pretraining.
TEST_TINY = {
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "sliding_window": 64,
    "pretrain_steps": 20,
    "pretrain_batch_size": 4,
    "pretrain_seq_len": 128,
}

# a Gemma 3 text model small enough for the attention tests on a CPU (head_dim 16: several tiles)
TINY_GEMMA3 = {
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "vocab_size": 300,
    "query_pre_attn_scalar": 16,
}


def tiny_gemma3_config(layers: int, window: int, max_positions: int, **overrides):
    """``TINY_GEMMA3`` with ``layers`` layers alternating sliding (``window`` wide) and global."""
    from transformers import Gemma3TextConfig

    layer_types = ["sliding_attention", "full_attention"] * (layers // 2)
    return Gemma3TextConfig(
        **TINY_GEMMA3,
        num_hidden_layers=layers,
        sliding_window=window,
        layer_types=layer_types,
        max_position_embeddings=max_positions,
        **overrides,
    )
