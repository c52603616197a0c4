"""Every shipped training chat template gives a non-empty assistant mask that covers exactly the
assistant replies and their stop tokens, and renders prompts as prefixes of the training text."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = sorted((REPO / "configs" / "chat_templates").glob("*.jinja"))

# special tokens and the stop token per template family
FAMILIES = {
    "gemma3-train.jinja": {
        "bos": "<bos>",
        "eos": "<eos>",
        "extra": ["<start_of_turn>", "<end_of_turn>"],
        "stop": "<end_of_turn>",
    },
    "mistral-nemo-train.jinja": {"bos": "<s>", "eos": "</s>", "extra": ["[INST]", "[/INST]"], "stop": "</s>"},
}

WRITER = [
    {"role": "system", "content": "You are a ledger writer."},
    {"role": "user", "content": "Workflow: payments\nTask: pay the invoice"},
    {"role": "user", "content": 'Call c1: pay_invoice({"invoice_id": "INV-1"})\nResult: succeeded: ok'},
    {"role": "assistant", "content": '{"call_id": "c1", "claimed_outcome": "succeeded"}'},
    {"role": "user", "content": 'Call c2: send_email({"to": "ap@acme.test"})\nResult: failed: timeout'},
    {"role": "assistant", "content": '{"call_id": "c2", "claimed_outcome": "failed"}'},
]
READER = [
    {"role": "system", "content": "You are a ledger reader."},
    {"role": "user", "content": "Environment ledger: ...\nModel ledger: ..."},
    {"role": "assistant", "content": '{"verdict": "clean"}'},
]


def _tokenizer(template: Path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    fam = FAMILIES[template.name]
    specials = ["<pad>", fam["eos"], fam["bos"], "<unk>", *fam["extra"]]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    texts = [m["content"] for m in WRITER + READER] * 4
    tok.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=fam["bos"],
        eos_token=fam["eos"],
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=fam["extra"],
    )
    fast.chat_template = template.read_text(encoding="utf-8")
    return fast, fam


def test_every_template_is_covered():
    assert TEMPLATES, "no chat templates shipped"
    assert {t.name for t in TEMPLATES} == set(FAMILIES), "add the new template's tokens to FAMILIES"


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
@pytest.mark.parametrize("messages", [WRITER, READER], ids=["writer-multiturn", "reader"])
def test_assistant_mask_is_the_replies_and_stop_tokens(template, messages):
    from trl.chat_template_utils import has_generation_markers

    tok, fam = _tokenizer(template)
    assert has_generation_markers(tok.chat_template)
    enc = tok.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = enc["input_ids"], enc["assistant_masks"]
    assert sum(mask) > 0
    masked = tok.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=False)
    stop = fam["stop"]
    for m in messages:
        if m["role"] == "assistant":
            assert m["content"] + stop in masked
    # nothing but replies, stop tokens and the newline after Gemma's end-of-turn
    rest = masked
    for m in messages:
        if m["role"] == "assistant":
            rest = rest.replace(m["content"], "", 1)
    assert rest.replace(stop, "").strip() == ""
    # the stop token id is inside the mask
    stop_id = tok.convert_tokens_to_ids(stop)
    assert any(i == stop_id and k for i, k in zip(ids, mask))


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_prompt_is_a_prefix_of_the_training_text(template):
    """What the model sees at inference (history + generation prompt) is exactly what it was trained on."""
    tok, _ = _tokenizer(template)
    full = tok.apply_chat_template(WRITER, tokenize=False)
    for k, m in enumerate(WRITER):
        if m["role"] == "assistant":
            prompt = tok.apply_chat_template(WRITER[:k], tokenize=False, add_generation_prompt=True)
            assert full.startswith(prompt)
            assert full[len(prompt) :].startswith(m["content"])


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_consecutive_user_turns_merge(template):
    tok, fam = _tokenizer(template)
    text = tok.apply_chat_template(WRITER, tokenize=False)
    opener = fam["extra"][0]
    # system + task + first call form one user turn; one more for the second call
    assert text.count(opener) == 2 + (0 if "nemo" in template.name else 2)


def test_tiny_base_tokenizer_has_a_working_mask(tiny_base):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_base))
    enc = tok.apply_chat_template(WRITER, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    assert sum(enc["assistant_masks"]) > 0
    assert tok.chat_template == (REPO / "configs/chat_templates/gemma3-train.jinja").read_text()
