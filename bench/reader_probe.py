"""Reader probe: has a reader checkpoint learned the verdict at all, apart from the writer's ledgers?

The sabotage evaluation scores the reader on ledgers the student writer wrote; while those disagree with
the environment ledger everywhere, no monitor can separate the injected faults (the reconciler scores
AUROC 0.500 on them). This probe asks the reader alone: on the build's ``reader_verdict`` examples
(sanitized prompts with the teacher's ledgers; ``validation`` is training families, ``heldout`` the
held-out ones; both keep only examples whose teacher verdict matched gold), the probability the
reader gives a flagging label (``discrepancy`` or ``incident``) right after ``{"label": "``, scored
against the gold label: AUROC with its bootstrap interval, and how often the most likely label is the
gold one. A reader that learned nothing scores about 0.5 on both splits.

    python bench/reader_probe.py --reader ckpt-reader/ [--split validation heldout] [--limit 120]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LABELS = ("clean", "discrepancy", "incident")
PREFIX = '{"label": "'


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reader", default="ckpt-reader/", help="reader checkpoint directory")
    p.add_argument("--sft", help="SFT build (default: the one the checkpoint was trained on)")
    p.add_argument("--split", nargs="+", default=["validation", "heldout"], choices=["validation", "heldout"])
    p.add_argument("--limit", type=int, default=120, help="examples per split (the first N in file order)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", help="also write the results as JSON here")
    return p.parse_args(argv)


def label_logprobs(model, tok, messages: list[dict]) -> dict[str, float]:
    """Log-probability of each label's tokens after the prompt and ``{"label": "``."""
    import torch

    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt = tok(text + PREFIX, add_special_tokens=False)["input_ids"]
    out = {}
    for label in LABELS:
        ids = tok(text + PREFIX + label, add_special_tokens=False)["input_ids"]
        if ids[: len(prompt)] != prompt:
            raise ValueError(f"the tokenizer merges {PREFIX!r} with {label!r}; the probe needs them apart")
        with torch.no_grad():
            logp = model(input_ids=torch.tensor([ids])).logits[0].float().log_softmax(-1)
        out[label] = sum(logp[k - 1, ids[k]].item() for k in range(len(prompt), len(ids)))
    return out


def probe_split(model, tok, path: Path, limit: int) -> dict:
    import math

    from eval import metrics as M

    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()][:limit]
    pos, neg, top_right = [], [], 0
    for r in rows:
        gold = json.loads(r["messages"][-1]["content"])["label"]
        lp = label_logprobs(model, tok, r["messages"][:-1])
        z = math.log(sum(math.exp(v) for v in lp.values()))
        p_flag = sum(math.exp(lp[k] - z) for k in LABELS[1:])
        (neg if gold == "clean" else pos).append(p_flag)
        top_right += max(lp, key=lp.get) == gold
    auroc, lo, hi = M.bootstrap_two_sample(pos, neg, M.auroc_from, resamples=1000, seed=0)
    return {
        "examples": len(rows),
        "flagged_gold": len(pos),
        "clean_gold": len(neg),
        "auroc_p_flag": {"value": round(auroc, 3), "ci": [round(lo, 3), round(hi, 3)]},
        "mean_p_flag": {"flagged_gold": round(sum(pos) / max(1, len(pos)), 3),
                        "clean_gold": round(sum(neg) / max(1, len(neg)), 3)},  # fmt: skip
        "most_likely_label_is_gold": top_right,
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    from eval.generation import load_decoding, make_backend
    from eval.sources import resolve_default

    torch.set_num_threads(args.threads)
    t0 = time.time()
    reader = Path(args.reader)
    _, sft = resolve_default(None, corpus=None, sft=Path(args.sft) if args.sft else None, build=False,
                             checkpoint=reader)  # fmt: skip
    backend = make_backend(reader, load_decoding(REPO / "configs" / "eval" / "decoding.yaml"))
    model, tok = backend.model, backend.tokenizer
    result = {"reader": str(reader), "sft": str(sft), "splits": {}}
    for split in args.split:
        path = Path(sft) / "jsonl" / "reader_verdict" / f"{split}.jsonl"
        if not path.is_file():
            print(f"bench/reader_probe.py: error: {path}: no reader_verdict {split} examples", file=sys.stderr)
            return 2
        result["splits"][split] = probe_split(model, tok, path, args.limit)
    result["seconds"] = round(time.time() - t0, 1)
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
