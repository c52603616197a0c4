"""Every shipped training chat template gives a non-empty assistant mask that covers exactly the
assistant replies and their stop tokens, and renders prompts as prefixes of the training text. The
Mistral-Nemo template is also checked on Nemo's real Tekken vocabulary against mistral-common's own
encoding: equal token ids, except the documented placement of a system message."""

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


# ---- the real Mistral-Nemo tokenizer -----------------------------------------------------------------
# mistral-common (test extra) ships Nemo's Tekken vocabulary and encodes chats the way Mistral serves
# them; transformers builds a fast tokenizer from the same file, which renders our template.
NEMO = REPO / "configs" / "chat_templates" / "mistral-nemo-train.jinja"
CHAT = [  # tool-free, multi-turn, with consecutive user messages as writer trajectories have
    {"role": "user", "content": "Task: pay invoice INV-1 for Acme.\n\nThe run starts."},
    {"role": "user", "content": 'Call 1 (id c1): pay_invoice {"invoice_id": "INV-1"}\nResult: ok'},
    {"role": "assistant", "content": '{"call_id": "c1", "claimed_outcome": "succeeded"}'},
    {"role": "user", "content": 'Call 2 (id c2): send_email {"to": "ap@acme.test"}\nResult: timeout'},
    {"role": "assistant", "content": '{"call_id": "c2", "claimed_outcome": "failed"}'},
]
SYSTEM = {"role": "system", "content": "You are a ledger writer. Answer with one JSON entry."}


@pytest.fixture(scope="module")
def tekken():
    """(our template on a transformers tokenizer built from Tekken, mistral-common's tokenizer)."""
    mc = pytest.importorskip("mistral_common")
    from mistral_common.protocol.instruct.validator import ValidationMode
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer
    from transformers.integrations.mistral.tokenizer import convert_tekken_tokenizer

    path = Path(mc.__file__).parent / "data" / "tekken_240718.json"
    ours = convert_tekken_tokenizer(str(path), chat_template=NEMO.read_text(encoding="utf-8"))
    # agnostic: a chat may end with a user turn (a prompt) or the reply (the training text)
    return ours, MistralTokenizer.from_file(str(path), mode=ValidationMode.agnostic)


def _mistral_ids(mt, messages: list[dict]) -> list[int]:
    from mistral_common.protocol.instruct.messages import AssistantMessage, SystemMessage, UserMessage
    from mistral_common.protocol.instruct.request import ChatCompletionRequest

    kinds = {"system": SystemMessage, "user": UserMessage, "assistant": AssistantMessage}
    request = ChatCompletionRequest(messages=[kinds[m["role"]](content=m["content"]) for m in messages])
    return mt.encode_chat_completion(request).tokens


def _our_ids(tok, messages: list[dict], *, prompt: bool) -> list[int]:
    enc = tok.apply_chat_template(messages, tokenize=True, return_dict=True, add_generation_prompt=prompt)
    return enc["input_ids"]


def _system_in_first_user(messages: list[dict]) -> list[dict]:
    """Our placement said in mistral-common's terms: the system text opens the first user message."""
    system, rest = messages[0]["content"], [dict(m) for m in messages[1:]]
    rest[0]["content"] = system + "\n\n" + rest[0]["content"]
    return rest


def _prefixes(messages: list[dict]) -> list[list[dict]]:
    """Every prompt the model answers (the history up to each reply) and the whole conversation."""
    return [messages[:k] for k, m in enumerate(messages) if m["role"] == "assistant"] + [messages]


@pytest.mark.slow
@pytest.mark.parametrize("turns", ["single", "multi"])
def test_nemo_without_system_prompt_equals_mistral_common(tekken, turns):
    tok, mt = tekken
    chat = CHAT[:2] if turns == "single" else CHAT
    for messages in _prefixes(chat) if turns == "multi" else [chat]:
        prompt = messages[-1]["role"] != "assistant"
        assert _our_ids(tok, messages, prompt=prompt) == _mistral_ids(mt, messages)


@pytest.mark.slow
def test_nemo_system_prompt_with_one_user_turn_equals_mistral_common(tekken):
    tok, mt = tekken
    for messages in ([SYSTEM, *CHAT[:2]], [SYSTEM, *CHAT[:3]]):  # the first and last user turn coincide
        prompt = messages[-1]["role"] != "assistant"
        assert _our_ids(tok, messages, prompt=prompt) == _mistral_ids(mt, messages)


@pytest.mark.slow
def test_nemo_system_prompt_placement_differs_from_mistral_common_as_documented(tekken):
    """With more than one user turn mistral-common puts the system text in the LAST user message and we
    put it in the FIRST; otherwise the token ids are the same. Ours keeps every prompt a prefix of the
    training text; mistral-common's placement would not (the prompt of the first reply would carry the
    system text where the training text has none), so multi-turn writer examples would be trained on
    contexts they are never prompted with."""
    tok, mt = tekken
    messages = [SYSTEM, *CHAT]
    ours = _our_ids(tok, messages, prompt=False)
    assert ours != _mistral_ids(mt, messages)
    assert ours == _mistral_ids(mt, _system_in_first_user(messages))
    text = tok.decode(ours)
    assert text.index(SYSTEM["content"]) < text.index(CHAT[0]["content"])
    # why: under mistral-common's placement the first reply's prompt is not a prefix of the chat
    theirs_full = _mistral_ids(mt, messages)
    theirs_first = _mistral_ids(mt, messages[:3])
    assert theirs_full[: len(theirs_first)] != theirs_first
    for k, m in enumerate(messages):
        if m["role"] == "assistant":
            head = _our_ids(tok, messages[:k], prompt=True)
            assert ours[: len(head)] == head


@pytest.mark.slow
@pytest.mark.parametrize("system", [False, True], ids=["no-system", "system"])
def test_nemo_assistant_mask_on_the_real_tokenizer(tekken, system):
    """On Tekken ids the training mask is exactly each reply's tokens plus its ``</s>``."""
    tok, mt = tekken
    messages = [SYSTEM, *CHAT] if system else CHAT
    enc = tok.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = enc["input_ids"], enc["assistant_masks"]
    eos = tok.convert_tokens_to_ids("</s>")
    want = []
    for m in messages:
        if m["role"] == "assistant":
            want += [*mt.instruct_tokenizer.tokenizer.encode(m["content"], bos=False, eos=False), eos]
    assert [i for i, k in zip(ids, mask) if k] == want
