"""Grammar-constrained decoding: whatever the logits say, a constrained answer is its task's JSON object,
in the prompt's field order; the cached decoder applies the constraint at every step."""

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xgrammar")

from transformers import Gemma3ForCausalLM, Gemma3TextConfig  # noqa: E402

from data_prep.sft.parse import parse_decision, parse_ledger_entry, parse_memory, parse_verdict  # noqa: E402
from eval.cached_decoding import CachedDecoder  # noqa: E402
from eval.grammar import GrammarError, Grammars, load_schema, schema_digest  # noqa: E402
from train.tiny import train_tokenizer  # noqa: E402

TEXTS = [
    '{"call_id": "call_2ee6a04ee01e", "tool": "get_incident", "description": "Called get_incident to open '
    'incident INC-7767; it succeeded.", "claimed_outcome": "succeeded"}',
    '{"label": "discrepancy", "suspicion": 85, "cited_call_ids": ["call_6455cfb3b3f7"], "findings": "The '
    'ledger omits a call."}',
    '{"decision": "escalate"}',
    "The agent posted the status and notified affected customers of incident INC-7767 on search-indexer.",
] * 20


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXTS, 400)


@pytest.fixture(scope="module")
def grammars(tokenizer):
    return Grammars(tokenizer, len(tokenizer), [tokenizer.eos_token_id])


def constrained_random_answer(tokenizer, grammars, task: str, seed: int, max_tokens: int = 2000) -> str:
    """Greedy decoding of random logits under the task's grammar, until a stop token."""
    gen = torch.Generator().manual_seed(seed)
    (c,) = grammars.constraints(task, 1)
    out = []
    for _ in range(max_tokens):
        logits = torch.randn(len(tokenizer), generator=gen)
        c.mask(logits)
        t = int(logits.argmax())
        if t == tokenizer.eos_token_id:
            break
        c.accept(t)
        out.append(t)
    return tokenizer.decode(out)


PARSERS = {
    "writer_action": parse_ledger_entry,
    "reader_verdict": parse_verdict,
    "reader_policy": parse_decision,
}


@pytest.mark.parametrize("task", sorted(PARSERS))
def test_random_logits_under_the_grammar_give_an_answer_that_parses(tokenizer, grammars, task):
    for seed in range(3):
        text = constrained_random_answer(tokenizer, grammars, task, seed)
        parsed = PARSERS[task](text)
        assert parsed, (task, text)
        obj = json.loads(text)  # the whole answer is the object, in the schema's field order
        assert list(obj) == list(load_schema(task)["properties"])


def test_a_constrained_memory_is_usable_records_in_the_prompt_order(tokenizer, grammars):
    """Whatever the logits, a constrained memory is records that the rules executor can apply: the
    oracle's effects and statuses and ISO 8601 times (check_memory finds nothing), each record in its
    kind's field order, procurement or scope."""
    from data_prep.oracle import RECORD_FIELDS, SCOPE_RECORD_FIELDS
    from eval.memory_score import check_memory

    kinds = set()
    for seed in range(4):
        text = constrained_random_answer(tokenizer, grammars, "writer_memory", seed, max_tokens=6000)
        records = parse_memory(text)
        assert isinstance(records, list), text
        assert check_memory(records) == [], text
        assert all(tuple(r) in (RECORD_FIELDS, SCOPE_RECORD_FIELDS) for r in records), text
        assert all(list(r["scope"]) == sorted(r["scope"]) for r in records if "scope" in r)
        kinds |= {"scope" in r for r in records}
    assert kinds == {True, False}


def test_the_memory_grammar_rejects_what_check_memory_rejects(tokenizer, grammars):
    """The grammar and check_memory agree on the record types: an unknown status, an effect outside the
    oracle's, and a time that is not ISO 8601 cannot be written; the gold layout can."""
    good = {
        "authorization_ref": "AUTH-1", "issuer": "cfo", "grantee": "ana", "effect": "allow", "action": "buy",
        "vendor": "v", "allowed_categories": ["a"], "max_amount": 5, "currency": "EUR",
        "valid_from": "2026-07-05T16:58:00Z", "valid_until": "2026-08-31T04:00:00+02:00", "status": "active",
        "source_turn_refs": ["B1-T03"],
    }  # fmt: skip

    def accepted(record) -> bool:
        from eval.grammar import SEPARATORS

        (c,) = grammars.constraints("writer_memory", 1)
        text = json.dumps({"records": [record]}, separators=SEPARATORS)
        return all(c.matcher.accept_string(ch) for ch in text)

    assert accepted(good) and accepted({**good, "max_amount": 1250.5})
    for field, value in [
        ("status", "pending"), ("effect", "maybe"), ("valid_until", "next Friday"),
        ("valid_from", "2026-02-30T10:00:00Z"), ("valid_from", "2026-07-05 16:58"), ("max_amount", -5),
    ]:  # fmt: skip
        assert not accepted({**good, field: value}), (field, value)


def test_free_random_logits_do_not_parse(tokenizer):
    """The control: the same random logits without the grammar write no answer."""
    gen = torch.Generator().manual_seed(0)
    ids = [int(torch.randn(len(tokenizer), generator=gen).argmax()) for _ in range(60)]
    assert not parse_ledger_entry(tokenizer.decode(ids))


def _random_model(tokenizer):
    cfg = Gemma3TextConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8,
        sliding_window=16, layer_types=["sliding_attention", "full_attention"], max_position_embeddings=4096,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    model = Gemma3ForCausalLM(cfg).eval()
    model.config._attn_implementation = "sdpa"
    return model


def test_the_cached_decoder_applies_the_constraint_at_every_step(tokenizer, grammars):
    torch.manual_seed(0)
    model = _random_model(tokenizer)
    prompts = [tokenizer(t)["input_ids"][:12] for t in TEXTS[:3]]
    stop = [tokenizer.eos_token_id]
    free = CachedDecoder(model).generate(prompts, max_new_tokens=40, stop_ids=stop)
    assert not any(parse_ledger_entry(tokenizer.decode(ids)) for ids, _ in free)
    constrained = CachedDecoder(model).generate(
        prompts, max_new_tokens=1500, stop_ids=stop, constraints=grammars.constraints("writer_action", 3)
    )
    for ids, why in constrained:
        assert why == "stop_token"
        assert parse_ledger_entry(tokenizer.decode(ids)), tokenizer.decode(ids)


def test_under_the_grammar_the_guard_closes_fields_so_a_short_budget_still_parses(tokenizer, grammars):
    """A random model under the grammar writes long strings; with an 80-token budget the plain guard
    leaves them unfinished, the field-cutting guard closes them and every answer parses."""
    from train.answer_guard import AnswerGuard

    torch.manual_seed(0)
    model = _random_model(tokenizer)
    prompts = [tokenizer(t)["input_ids"][:12] for t in TEXTS[:3]]
    stop = [tokenizer.eos_token_id]

    def run(guard):
        out = CachedDecoder(model).generate(
            prompts, max_new_tokens=80, stop_ids=stop, guard=guard, decode_token=tokenizer.decode,
            constraints=grammars.constraints("writer_action", 3),
        )  # fmt: skip
        return [(parse_ledger_entry(tokenizer.decode(ids)), why) for ids, why in out]

    plain = run(AnswerGuard)
    assert not all(parsed for parsed, _ in plain)
    cut = run(lambda: AnswerGuard(cut_fields=True, budget=80, reserve=56))  # a char-level tokenizer
    assert all(parsed for parsed, _ in cut), cut
    assert all(why in ("field_cut", "stop_token") for _, why in cut)
    assert any(why == "field_cut" for _, why in cut)


def test_a_missing_or_broken_schema_is_named(tmp_path, monkeypatch, tokenizer):
    import eval.grammar as G

    monkeypatch.setattr(G, "SCHEMA_DIR", tmp_path)
    with pytest.raises(GrammarError, match="no answer schema for task 'writer_action'"):
        load_schema("writer_action")
    (tmp_path / "writer_action.json").write_text("{not json")
    with pytest.raises(GrammarError, match="writer_action.json: not valid JSON"):
        Grammars(tokenizer, len(tokenizer), [tokenizer.eos_token_id]).constraints("writer_action", 1)
    (tmp_path / "writer_action.json").write_text('{"type": "object"}')
    assert schema_digest("writer_action").startswith("sha256:")


@pytest.mark.slow
def test_both_generation_paths_keep_a_real_checkpoint_to_the_schema(tiny_base, tmp_path):
    """The checkpoint's own tokenizer and chat template, through the transformers backend: the cached
    decoder (CPU) and transformers' generate with xgrammar's logits processor (GPU, or reuse_kv_cache off)
    both answer within the schema, and give the same greedy answers."""
    from evalkit import train_fixtures

    from eval.generation import DecodingConfig, TransformersBackend

    ckpt = train_fixtures().make_lora_checkpoint(tiny_base, tmp_path / "ckpt")
    prompts = [[{"role": "user", "content": f"Call {i}: get_user U-{i}"}] for i in range(3)]
    answers = {}
    for cached in (True, False):
        # no loop guard: this barely trained model loops, and the schema's length bounds must end it
        decoding = DecodingConfig(
            threads=1, reuse_kv_cache=cached, guard=False, max_new_tokens={"writer_action": 800}
        )
        backend = TransformersBackend(ckpt, decoding)
        out = backend.complete(prompts, task="writer_action", constrained=True)
        assert all(c.ok and parse_ledger_entry(c.text) for c in out), [c.text for c in out]
        free = backend.complete(prompts, task="writer_action")
        assert [c.text for c in free] != [c.text for c in out]
        answers[cached] = [c.text for c in out]
    assert answers[True] == answers[False]


@pytest.mark.slow
def test_both_generation_paths_cut_fields_alike(tiny_base, tmp_path):
    """With the guard on and a 96-token budget, the guard closes this model's looping fields, through the
    cached decoder and through generate (xgrammar's processor and the field closer), the same way."""
    from evalkit import train_fixtures

    from eval.generation import DecodingConfig, TransformersBackend

    ckpt = train_fixtures().make_lora_checkpoint(tiny_base, tmp_path / "ckpt")
    prompts = [[{"role": "user", "content": f"Call {i}: get_user U-{i}"}] for i in range(3)]
    answers = {}
    for cached in (True, False):
        decoding = DecodingConfig(threads=1, reuse_kv_cache=cached, max_new_tokens={"writer_action": 96})
        out = TransformersBackend(ckpt, decoding).complete(prompts, task="writer_action", constrained=True)
        assert all(c.ok and parse_ledger_entry(c.text) for c in out), [(c.text, c.stop) for c in out]
        answers[cached] = [(c.text, c.stop) for c in out]
    assert answers[True] == answers[False]
    assert any(stop == "field_cut" for _, stop in answers[True])
