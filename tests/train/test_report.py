"""The held-out parse check a user reads in the model card: per-field counts, and loops cut short."""

import json

from train.data import load_tasks
from train.report import parse_check


def _writer_rows(sft_dir, n=2):
    return load_tasks(sft_dir, ["writer_action"]).splits["heldout"][:n]


def test_a_looping_model_is_cut_and_counted(tiny_base, sft_dir):
    """A model that writes one token forever ends by the repetition guard long before the limit,
    and the check reports it as a guard stop and as an answer that does not parse."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_base)
    model = AutoModelForCausalLM.from_pretrained(tiny_base)
    loop_id = tok.convert_tokens_to_ids("e")

    def always_e(module, args, out):
        out.logits.fill_(-1e4)
        out.logits[..., loop_id] = 1e4
        return out

    model.register_forward_hook(always_e)
    rows = _writer_rows(sft_dir)
    with torch.no_grad():
        pc = parse_check(model, tok, rows, len(rows), max_new_tokens=400, turns_per_example=1)
    assert pc["answers"] == len(rows) and pc["parsed"] == 0
    assert pc["guard_stops"] == {"repetition": len(rows)}
    assert all(len(s["generated"]) < 60 for s in pc["samples"])  # cut, not 400 tokens of "e"
    first = next(m["content"] for m in rows[0]["messages"] if m["role"] == "assistant")
    assert set(pc["field_agreement"]) == set(json.loads(first))  # every field of the reference, counted
    assert all(v["right"] == 0 for v in pc["field_agreement"].values())
