"""The tiny base every training test builds (one home: tests/train/conftest.py and the e2e tests)."""

# small settings so that every training test takes seconds: a tiny base of 2 layers, brief pretraining.
TEST_TINY = {
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "sliding_window": 64,
    "pretrain_steps": 20,
    "pretrain_batch_size": 4,
    "pretrain_seq_len": 128,
}
