"""Copy probe: can the embedded tiny Gemma 3 learn to copy from its context within the CPU budget?

Every writer target rests on copying (the call id, the tool name, the argument values). This probe
pretrains the tiny base of ``configs/train/tiny.yaml`` from scratch on one curriculum and reports, as
it trains, two figures:

- ``syn``: next-token accuracy on the repeated half of held-back curriculum documents (tokens a model
  can only get right by copying from earlier in its context);
- at the end, held-out writer answers (families never trained on) under teacher forcing, in the
  pretraining text format: answers whose call id (all 12 hex digits), tool name, or every token is
  the argmax (what greedy decoding would write), and the per-token accuracy of the id characters.

Curricula (``--curriculum``):
  corpus      the message texts of the train split, as ``train/tiny.py`` pretrains today
  fixed       random tokens ``S S``: the copy sits at one fixed distance (a positional head solves it)
  variable    random tokens ``S F S`` with a random gap: only a content-matching (induction) head solves it
  text        corpus windows ``S F S``: real text repeated after a random gap

``--copy-circuit`` starts from the copy circuit of ``train/copy_circuit.py`` (positional heads in
layer 0, a two-token and a one-token match after them, their attention patterns frozen), as the tiny base does.

    python bench/copy_probe.py --curriculum variable --steps 200 --seq 128 --batch 32 --vocab-range 500
    python bench/copy_probe.py --curriculum variable --copy-circuit --steps 200 --seq 512 --batch 8
    python bench/copy_probe.py --tiny-base /tmp/probe-cache [--set copy_fraction=0.4]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sft-dir", help="SFT datasets (default: the embedded default, built if absent)")
    p.add_argument("--curriculum", choices=["corpus", "fixed", "variable", "text"], default="corpus")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--vocab-range", type=int, default=0, help="random tokens from the first N ids (0: all)")
    p.add_argument("--copy-circuit", action="store_true")
    p.add_argument("--heldout-runs", type=int, default=12)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="also write the results as JSON here")
    p.add_argument(
        "--tiny-base",
        metavar="CACHE_DIR",
        help="instead of a curriculum: build the tiny base exactly as training does (train/tiny.py, the "
        "default TinyBaseConfig) into CACHE_DIR, or reuse it there, and report its held-out figures",
    )
    p.add_argument(
        "--set", action="append", default=[], metavar="FIELD=JSON", help="with --tiny-base: a TinyBaseConfig field"
    )
    return p.parse_args(argv)


class Curriculum:
    """Documents of ``seq`` tokens with their labels (-100 where nothing can be predicted)."""

    def __init__(self, kind: str, stream: list[int], vocab: list[int], bos: int, seq: int, seed: int):
        self.kind, self.stream, self.vocab, self.bos, self.seq = kind, stream, vocab, bos, seq
        self.rng = random.Random(seed)

    def _window(self, n: int) -> list[int]:
        start = self.rng.randrange(0, len(self.stream) - n)
        return self.stream[start : start + n]

    def _random(self, n: int) -> list[int]:
        return [self.rng.choice(self.vocab) for _ in range(n)]

    def doc(self) -> tuple[list[int], list[int]]:
        n = self.seq
        if self.kind == "corpus":
            x = self._window(n)
            return x, list(x)
        if self.kind == "fixed":
            half = (n - 1) // 2
            s = self._random(half)
            x = [self.bos] + s + s
            y = [-100] * (half + 2) + s[1:]
        else:
            length = self.rng.randint(16, min(64, n // 3))
            gap = self.rng.randint(0, n - 1 - 2 * length)
            pick = self._random if self.kind == "variable" else self._window
            s, f = pick(length), pick(gap)
            x = [self.bos] + s + f + s
            y = [-100] * (length + gap + 2) + s[1:]
        pad = n - len(x)
        return x + self._random(pad), y + [-100] * pad

    def batch(self, size: int):
        import torch

        docs = [self.doc() for _ in range(size)]
        return torch.tensor([d[0] for d in docs]), torch.tensor([d[1] for d in docs])


def heldout_copy(model, tok, rows: list[dict]) -> dict:
    """Teacher-forced held-out writer answers in the text format: exact call ids, tools, answers."""
    import torch

    counts = {"answers": 0, "call_id_exact": 0, "tool_exact": 0, "answer_exact": 0}
    id_right = id_total = 0
    model.eval()
    for r in rows:
        text, spans = "", []
        for j, m in enumerate(r["messages"]):
            text += "\n\n" if j else ""
            start = len(text)
            text += m["content"]
            if m["role"] == "assistant":
                spans.append((start, len(text)))
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = ([tok.bos_token_id] + enc["input_ids"])[:2048]
        offs = [(0, 0)] + enc["offset_mapping"]
        with torch.no_grad():
            pred = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].argmax(-1).tolist()

        def right(lo: int, hi: int, offs=offs, ids=ids, pred=pred) -> list[bool]:
            idx = [i for i, (a, b) in enumerate(offs) if 0 < i < len(ids) and a >= lo and b <= hi and b > a]
            return [pred[i - 1] == ids[i] for i in idx]

        for lo, hi in spans:
            answer = text[lo:hi]
            cid = re.search(r'"call_id": "(call_[0-9a-f]+)"', answer)
            tool = re.search(r'"tool": "([^"]+)"', answer)
            if not cid or not tool or hi > offs[len(ids) - 1][1]:
                continue
            id_marks = right(lo + cid.start(1), lo + cid.end(1))
            counts["answers"] += 1
            counts["call_id_exact"] += all(id_marks)
            counts["tool_exact"] += all(right(lo + tool.start(1), lo + tool.end(1)))
            counts["answer_exact"] += all(right(lo, hi))
            id_right += sum(id_marks)
            id_total += len(id_marks)
    model.train()
    counts["id_token_accuracy"] = round(id_right / max(1, id_total), 3)
    return counts


def main(argv=None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(REPO))
    import torch

    from train.config import TinyBaseConfig
    from train.copy_circuit import copy_accuracy
    from train.data import load_tasks
    from train.tiny import corpus_rows, model_config, train_tokenizer

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.sft_dir:
        sft = Path(args.sft_dir)
    else:
        from data_prep.embedded import ensure_default_sft

        sft = Path(ensure_default_sft())
    cfg = replace(TinyBaseConfig(), seed=args.seed)
    heldout = load_tasks(sft, ["writer_action"]).splits["heldout"][: args.heldout_runs]
    if args.tiny_base:
        return probe_tiny_base(args, sft, cfg, heldout)
    train_rows, _ = corpus_rows(sft)
    tok = train_tokenizer([m["content"] for r in train_rows for m in r["messages"]], cfg.vocab_size)
    from transformers import Gemma3ForCausalLM

    model = Gemma3ForCausalLM(model_config(cfg, tok))
    model.config._attn_implementation = "sdpa"
    if args.copy_circuit:
        from train.copy_circuit import init_copy_circuit, positional_attention

        init_copy_circuit(model, seed=args.seed)
        print(json.dumps({"positional_attention": positional_attention(model)}), flush=True)
    rng = random.Random(args.seed)
    order = list(range(len(train_rows)))
    rng.shuffle(order)
    stream: list[int] = []
    for i in order:
        if len(stream) > max(300_000, args.steps * args.batch * args.seq):
            break
        text = "\n\n".join(m["content"] for m in train_rows[i]["messages"])
        stream += [tok.bos_token_id] + tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    vocab = list(range(6, args.vocab_range or len(tok)))
    train_docs = Curriculum(args.curriculum, stream, vocab, tok.bos_token_id, args.seq, args.seed)
    probe_docs = Curriculum(
        args.curriculum if args.curriculum != "corpus" else "text",
        stream,
        vocab,
        tok.bos_token_id,
        args.seq,
        args.seed + 1,
    ).batch(16)

    def syn_accuracy() -> float:
        return copy_accuracy(model, *probe_docs)

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    warm = max(1, args.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            (s + 1) / warm
            if s < warm
            else 0.1 + 0.45 * (1 + math.cos(math.pi * (s - warm) / max(1, args.steps - warm)))
        ),
    )
    log, t0 = [], time.time()
    model.train()
    for step in range(args.steps):
        x, y = train_docs.batch(args.batch)
        loss = model(input_ids=x, labels=y, use_cache=False).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 25 == 0 or step == args.steps - 1:
            log.append({"step": step, "loss": round(loss.item(), 3), "syn": syn_accuracy()})
            print(json.dumps(log[-1]), flush=True)
    seconds = time.time() - t0
    result = {
        "args": vars(args),
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_seconds": round(seconds, 1),
        "tokens_per_second": round(args.steps * args.batch * args.seq / seconds),
        "load_average": os.getloadavg(),
        "curve": log,
        "heldout": heldout_copy(model, tok, heldout),
    }
    print(json.dumps({k: result[k] for k in ("tokens_per_second", "load_average", "heldout")}))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


def probe_tiny_base(args, sft: Path, cfg, heldout: list[dict]) -> int:
    """The held-out teacher-forced figures of the tiny base that training builds (or has cached)."""
    from transformers import AutoTokenizer, Gemma3ForCausalLM

    from train.tiny import ensure_tiny_base

    fields = dict(item.split("=", 1) for item in args.set)
    cfg = replace(cfg, **{k: json.loads(v) for k, v in fields.items()})
    t0 = time.time()
    base = ensure_tiny_base(sft, Path(args.tiny_base), cfg)
    info = json.loads((base / "pretrain.json").read_text(encoding="utf-8"))
    model = Gemma3ForCausalLM.from_pretrained(base)
    result = {
        "base": base.name,
        "tiny_config": fields,
        "seconds": round(time.time() - t0, 1),
        "load_average": os.getloadavg(),
        "copy_accuracy_after": info["copy_accuracy_after"],
        "heldout": heldout_copy(model, AutoTokenizer.from_pretrained(base), heldout),
    }
    print(json.dumps(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
