"""What a person looks at after training: loss curves (PNG), a model card, and a held-out parse check."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from train.answer_guard import AnswerGuard, stopping_criteria
from train.checkpoint import stop_token_ids

logger = logging.getLogger("ledgerwright.train")


def loss_series(log_history: list[dict]) -> dict[str, list[tuple[int, float]]]:
    train = [(h["step"], h["loss"]) for h in log_history if "loss" in h and "step" in h]
    val = [(h["step"], h["eval_loss"]) for h in log_history if "eval_loss" in h and "step" in h]
    return {"train": train, "validation": val}


def plot_losses(log_history: list[dict], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = loss_series(log_history)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    if series["train"]:
        ax.plot(*zip(*series["train"]), label="train loss", color="tab:blue", lw=1.5)
    if series["validation"]:
        ax.plot(*zip(*series["validation"]), label="validation loss", color="tab:orange", marker="o", lw=1.5)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (assistant tokens, nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
    return path


def parse_check(
    model,
    tokenizer,
    rows: list[dict],
    max_examples: int,
    *,
    max_new_tokens: int = 192,
    batch_size: int = 8,
    turns_per_example: int = 3,
    max_prompt_tokens: int | None = None,
) -> dict:
    """Greedy answers for the first ``turns_per_example`` assistant turns of the first ``max_examples``
    rows (held-out families), each given the conversation before it; counts how many parse as JSON and
    how many equal the reference JSON. Prompts longer than ``max_prompt_tokens`` are skipped."""
    prompts, refs = _turn_prompts(tokenizer, rows[:max_examples], turns_per_example, max_prompt_tokens)
    if not prompts:
        return {"examples": 0, "answers": 0, "parsed": 0, "parse_rate": None, "exact": 0}
    tally = _Tally()
    was_training = model.training
    side = tokenizer.padding_side
    model.eval()
    tokenizer.padding_side = "left"
    try:
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            for text, ref in zip(_greedy(model, tokenizer, chunk, max_new_tokens, tally), refs[start:]):
                tally.score(text, ref)
    finally:
        tokenizer.padding_side = side
        model.train(was_training)
    return tally.summary(rows[:max_examples])


def _turn_prompts(tokenizer, rows, turns_per_example, max_prompt_tokens):
    """(conversation before each checked assistant turn, that turn's reference answer)."""
    prompts, refs = [], []
    for r in rows:
        msgs = r["messages"]
        turns = [i for i, m in enumerate(msgs) if m["role"] == "assistant"][:turns_per_example]
        for i in turns:
            if max_prompt_tokens is not None:
                enc = tokenizer.apply_chat_template(
                    msgs[:i], tokenize=True, add_generation_prompt=True, return_dict=True
                )
                if len(enc["input_ids"]) > max_prompt_tokens:
                    continue
            prompts.append(msgs[:i])
            refs.append(msgs[i]["content"])
    return prompts, refs


def _greedy(model, tokenizer, chunk, max_new_tokens, tally) -> list[str]:
    """Greedy answers of one left-padded batch, each ended by its guard (a looping answer ends, it
    does not run to the limit); the guard's stops are counted in ``tally``."""
    import torch

    texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in chunk]
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    enc = {k: v.to(model.device) for k, v in enc.items()}
    width = enc["input_ids"].shape[1]
    guards = [AnswerGuard() for _ in chunk]

    def text_of(token_id: int) -> str:
        return tokenizer.decode([token_id], skip_special_tokens=True)

    with torch.no_grad():
        out = model.generate(
            **enc,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=stop_token_ids(tokenizer, model),
            pad_token_id=tokenizer.pad_token_id,
            use_cache=True,
            stopping_criteria=stopping_criteria(guards, text_of, width),
        )
    answers = []
    for guard, row in zip(guards, out[:, width:]):
        if guard.reason:
            row = row[: guard.cut]
            tally.stopped[guard.reason] = tally.stopped.get(guard.reason, 0) + 1
        answers.append(tokenizer.decode(row, skip_special_tokens=True).strip())
    return answers


class _Tally:
    """Parse, exact and per-field counts of the parse check, and its first three samples."""

    def __init__(self):
        self.answers = self.parsed = self.exact = 0
        self.fields: dict[str, list[int]] = {}  # per reference field: [right, asked]
        self.stopped: dict[str, int] = {}  # answers the guard ended, by reason
        self.samples: list[dict] = []

    def score(self, text: str, ref: str) -> None:
        self.answers += 1
        ref_value = json.loads(ref)
        try:
            value = json.loads(text)
            self.parsed += 1
            self.exact += int(value == ref_value)
        except ValueError:
            value = None
        if isinstance(ref_value, dict):
            for key, want in ref_value.items():
                f = self.fields.setdefault(key, [0, 0])
                f[0] += int(isinstance(value, dict) and value.get(key) == want)
                f[1] += 1
        if len(self.samples) < 3:
            self.samples.append({"generated": text, "reference": ref})

    def summary(self, rows: list[dict]) -> dict:
        n = self.answers
        return {
            "examples": len(rows),
            "families": sorted({r["family"] for r in rows}),
            "answers": n,
            "parsed": self.parsed,
            "parse_rate": round(self.parsed / n, 4),
            "exact": self.exact,
            "exact_rate": round(self.exact / n, 4),
            # per field of the reference answer: how many generated answers give the same value
            "field_agreement": {k: {"right": r, "of": a} for k, (r, a) in self.fields.items()},
            "guard_stops": dict(sorted(self.stopped.items())),
            "samples": self.samples,
        }


def model_card(*, cfg, manifest: dict, command: str) -> str:
    """A Hugging Face style README.md for the adapter."""
    base = manifest["base_model"]
    res = manifest["results"]
    tags = [
        "ledgerwright",
        cfg.role,
        *manifest["tasks"],
        "qlora" if cfg.load_in_4bit else "lora",
        "peft",
        "trl",
        "sft",
    ]
    front = [
        "---",
        f"base_model: {base['name']}",
        "library_name: peft",
        "pipeline_tag: text-generation",
        "tags:",
        *[f"- {t}" for t in tags],
        "---",
        "",
    ]

    def fmt(x):
        return "n/a" if x is None else (f"{x:.4f}" if isinstance(x, float) else str(x))

    pc = res.get("parse_check") or {}
    lines = [
        f"# ledgerwright {cfg.role}: {', '.join(manifest['tasks'])}",
        "",
        f"A LoRA adapter ({'QLoRA on a 4-bit nf4 base' if cfg.load_in_4bit else 'on a full-precision base'}) "
        f"that makes `{base['name']}` a ledger {cfg.role}. Trained with TRL SFT, assistant-only loss"
        f"{', padding-free packing' if cfg.packing else ''}.",
        "",
        "## Training",
        "",
        "| | |",
        "|---|---|",
        f"| examples | {manifest['examples']} (seed {manifest['seed']}) |",
        f"| dataset fingerprint | `{manifest['dataset']['digest']}` |",
        f"| steps / epochs | {res['global_step']} / {(res.get('epochs') or 0):.2f} |",
        f"| tokens seen | {manifest['tokens_seen']:,} |",
        f"| max length | {cfg.max_length} |",
        f"| LoRA | r={cfg.lora_r}, alpha={cfg.lora_alpha}, dropout={cfg.lora_dropout}, {cfg.lora_target_modules} |",
        f"| learning rate | {cfg.learning_rate} ({cfg.lr_scheduler_type}) |",
        f"| world size | {manifest['world_size']} ({manifest['hardware']['accelerator']}) |",
        f"| wall time | {manifest['wall_seconds']:.0f} s |",
        "",
        "## Results",
        "",
        "| | |",
        "|---|---|",
        f"| validation loss, untrained adapter | {fmt(res.get('eval_loss_initial'))} |",
        f"| validation loss, final | {fmt(res.get('eval_loss_final'))} |",
        f"| train loss, final | {fmt(res.get('train_loss_final'))} |",
    ]
    pre = base.get("pretrain") or {}
    if "copy_accuracy_after" in pre:  # the embedded tiny base: can it copy from its context?
        lines.append(
            f"| tiny base: copy accuracy on fresh copy sequences | {pre['copy_accuracy_before']} -> "
            f"{pre['copy_accuracy_after']} (eval loss {fmt(pre.get('eval_loss_before'))} -> "
            f"{fmt(pre.get('eval_loss_after'))}) |"
        )
    if pc.get("answers"):
        lines.append(
            f"| held-out answers that parse as JSON | {pc['parsed']}/{pc['answers']} ({pc['parse_rate']:.0%}); "
            f"exact {pc['exact']}/{pc['answers']} |"
        )
        for key, f in (pc.get("field_agreement") or {}).items():
            lines.append(f"| held-out `{key}` equal to the reference | {f['right']}/{f['of']} |")
    lines += [
        "",
        "![loss curves](loss_curves.png)",
        "",
        "## Use",
        "",
        "```python",
        "from train.modeling import load_trained",
        f"model, tokenizer = load_trained('{manifest['output_dir']}')",
        "```",
        "",
        "The tokenizer in this folder carries the training chat template (`chat_template.jinja`); prompt with",
        "`tokenizer.apply_chat_template(messages, add_generation_prompt=True)`.",
        "",
        "## Reproduce",
        "",
        "```",
        command,
        "```",
        "",
        f"Code revision `{manifest['code']['revision']}` (dirty: {manifest['code']['dirty']}); "
        "`manifest.json` lists versions and the sha256 of every file here; `config.yaml` is the resolved config.",
        "",
    ]
    return "\n".join(front + lines)
