"""The text configuration of google/gemma-3-12b: the shape both GPU benchmarks build models of."""

GEMMA3_12B_TEXT = {
    "vocab_size": 262208,
    "hidden_size": 3840,
    "intermediate_size": 15360,
    "num_hidden_layers": 48,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 256,
    "query_pre_attn_scalar": 256,
    "sliding_window": 1024,
    "max_position_embeddings": 131072,
    "rope_theta": 1_000_000.0,
    "rms_norm_eps": 1e-6,
    "hidden_activation": "gelu_pytorch_tanh",
}

# a CPU smoke test of the training benchmark: the same structure, small sizes
GEMMA3_SMOKE_TEXT = {
    "vocab_size": 4096,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "query_pre_attn_scalar": 64,
    "sliding_window": 128,
}
