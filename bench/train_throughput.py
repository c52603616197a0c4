"""Training throughput of the QLoRA recipe: padding-free packing vs padded batches, side by side.

CPU (default): the tiny default on the same sampled examples, in the same process, alternating
packed and padded rounds so that machine load hits both alike. Tokens are real (non-padding) tokens
trained per second of optimizer steps, the first step of every round left out as warm-up.

    python bench/train_throughput.py --data-dir DIR [--examples 128 --steps 8 --rounds 2]
    python bench/train_throughput.py --gpu-shape gemma-3-12b --steps 6      # (bench/gpu_train.sh)
    python bench/train_throughput.py --fused-vs-blockwise --rounds 3       # CPU global attention paths
    python bench/train_throughput.py --compact-vs-full-head --role reader  # CPU LM head: labelled rows only

``--gpu-shape gemma-3-12b`` builds a Gemma 3 12B-shaped text model with random weights (the real
config's sizes), saves it as safetensors, loads it through the recipe's 4-bit path with the
gemma-3-12b preset, and trains a few steps on random packed tokens; it prints tokens/s and peak
memory. ``--layers N`` shrinks it (a CPU smoke test of the same code).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the repository's packages before bench/ (bench/sanitizer.py is a script)

from gemma3_shape import GEMMA3_12B_TEXT, GEMMA3_SMOKE_TEXT  # noqa: E402  (bench/, the script's folder)

for _k, _v in {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_WAIT_POLICY": "PASSIVE",
}.items():
    os.environ.setdefault(_k, _v)


def _step_timer():
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.marks = []  # (time, tokens) at the end of each step

        def on_train_begin(self, args, state, control, **kw):
            self.marks = [(time.perf_counter(), state.num_input_tokens_seen)]

        def on_step_end(self, args, state, control, **kw):
            self.marks.append((time.perf_counter(), state.num_input_tokens_seen))

        def rate(self, skip: int = 1) -> tuple[float, int, float]:
            (t0, n0), (t1, n1) = self.marks[skip], self.marks[-1]
            return (n1 - n0) / (t1 - t0), n1 - n0, t1 - t0

    return StepTimer()


def _repo_relative(path) -> str:
    """A path as results files record it: relative to the repository when inside it (no machine paths)."""
    p = Path(path).resolve()
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(path)


@contextlib.contextmanager
def _fused_attention(on: bool):
    """With ``on`` False, the CPU's fused global-attention path is refused (every layer tiled)."""
    from train.attention import cpu_fused

    real = cpu_fused.eligible
    if not on:
        cpu_fused.eligible = lambda *a: False
    try:
        yield
    finally:
        cpu_fused.eligible = real


@contextlib.contextmanager
def _compact_head(on: bool):
    """With ``on`` False, TRL's fused LM head scores every position of a packed row on the CPU (as
    TRL ships it), instead of the labelled positions only (``train/lm_head.py``)."""
    import trl.trainer.utils as trl_utils

    from train.lm_head import compact_fused_head_on_cpu

    compact_fused_head_on_cpu()
    patched = trl_utils._use_triton
    if not on:
        trl_utils._use_triton = patched.__wrapped__
    try:
        yield
    finally:
        trl_utils._use_triton = patched


def cpu_bench(args) -> dict:
    import torch

    from data_prep.embedded import default_cache_dir
    from train.config import load_preset, parse_config
    from train.data import length_stats, load_tasks, resolve_sft_dir, sample_train
    from train.modeling import load_tokenizer
    from train.recipe import _setup_logging, make_trainer
    from train.tiny import ensure_tiny_base

    _setup_logging()
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = load_preset(args.config) if args.config else parse_config(args.role, [])
    cfg = dataclasses.replace(cfg, role=args.role, task=args.task).resolved()
    cfg.max_length = args.max_length or cfg.max_length
    cfg.eval_steps = None
    cfg.parse_check_examples = 0
    cfg.save_steps = 10**6
    cfg.logging_steps = 10**6
    cache = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    sft_dir = resolve_sft_dir(args.data_dir, cache)
    data = load_tasks(sft_dir, cfg.sft_tasks)
    rows = sample_train(data, min(args.examples, len(data.splits["train"])), 0, False)
    model_path = ensure_tiny_base(sft_dir, cache, cfg.tiny) if cfg.model == "tiny" else cfg.model
    tok = load_tokenizer(str(model_path), cfg)
    stats = length_stats(rows, tok, cfg.max_length)
    mean_len = stats.tokens / stats.examples
    packed_rows = args.packed_rows
    equal = max(1, round(packed_rows * cfg.max_length / mean_len))  # as many tokens per step as packed
    batches = args.padded_batch or [equal]
    modes = {"packed": dict(packing=True, per_device_train_batch_size=packed_rows)}
    for b in batches:
        modes[f"padded-{b}"] = dict(packing=False, per_device_train_batch_size=b)
    if args.fused_vs_blockwise:  # packed, with every layer on the Python-tiled kernel (the baseline)
        modes = {"packed": modes["packed"], "packed-blockwise": {**modes["packed"], "fused": False}}
    if args.compact_vs_full_head:  # packed, with the LM head over every position (TRL's CPU default)
        modes = {"packed": modes["packed"], "packed-full-head": {**modes["packed"], "compact": False}}
    results = {m: [] for m in modes}
    tmp = Path(tempfile.mkdtemp(prefix="bench-train-"))
    for r in range(args.rounds):
        for mode, over in modes.items():
            over = dict(over)
            fused = over.pop("fused", True)
            compact = over.pop("compact", True)
            c = dataclasses.replace(cfg, max_steps=args.steps, **over)
            timer = _step_timer()
            tr = make_trainer(c, str(model_path), tok, rows, [], tmp / f"{mode}-{r}", extra_callbacks=[timer])
            with _fused_attention(fused), _compact_head(compact):
                tr.train()
            rate, ntok, secs = timer.rate()
            results[mode].append({"tokens_per_s": rate, "tokens": ntok, "seconds": secs})
            print(f"round {r} {mode:10s}: {rate:8.0f} tokens/s ({ntok} tokens in {secs:.1f} s)", flush=True)
            del tr
    med = {m: statistics.median(x["tokens_per_s"] for x in v) for m, v in results.items()}
    ratios = {m: med["packed"] / v for m, v in med.items() if m != "packed"}
    return {
        "kind": "cpu",
        "date": datetime.date.today().isoformat(),
        "data_dir": _repo_relative(sft_dir),
        "role": cfg.role,
        "task": cfg.task,
        "examples": len(rows),
        "mean_example_tokens": round(mean_len, 1),
        "longest_example_tokens": stats.longest,
        "max_length": cfg.max_length,
        "attn_implementation": cfg.attn_implementation,
        "gradient_checkpointing": cfg.gradient_checkpointing,
        "packed_rows_per_step": packed_rows,
        "padded_equal_tokens_batch": equal,
        "steps_per_round": args.steps,
        "rounds": args.rounds,
        "results": results,
        "median_tokens_per_s": med,
        "ratios_packed_over_padded": ratios,
        "ratio_packed_over_padded": ratios.get(f"padded-{equal}", min(ratios.values())),
        "fused_vs_blockwise": bool(args.fused_vs_blockwise),
        "compact_vs_full_head": bool(args.compact_vs_full_head),
        "torch_threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
        "cpu_count": os.cpu_count(),
        "model": _repo_relative(model_path),
    }


# ---- the 12B shape on a GPU -----------------------------------------------------------------------


def gemma3_12b_config(layers: int | None, shrink: bool):
    from transformers import Gemma3TextConfig

    kw = dict(GEMMA3_12B_TEXT)
    if shrink:
        kw.update(GEMMA3_SMOKE_TEXT)
    if layers:
        kw["num_hidden_layers"] = layers
    n = kw["num_hidden_layers"]
    kw["layer_types"] = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(n)]
    if "full_attention" not in kw["layer_types"]:
        kw["layer_types"][-1] = "full_attention"
    return Gemma3TextConfig(pad_token_id=0, eos_token_id=1, bos_token_id=2, **kw)


def _bench_tokenizer(path: Path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>", unk_token="<unk>"
    )
    fast.save_pretrained(path)
    return fast


def gpu_shape_bench(args) -> dict:
    import torch
    from transformers import Gemma3ForCausalLM

    try:
        from datasets import Dataset
    except ImportError as err:
        raise SystemExit(
            f"--gpu-shape trains through TRL and needs `datasets` ({err}); on a bare GPU machine use "
            "bench/gpu_check.py, which runs the 12B-shaped QLoRA steps without TRL or datasets"
        ) from err

    from train.config import load_preset
    from train.recipe import _setup_logging, make_trainer

    _setup_logging()
    cuda = torch.cuda.is_available()
    cfg = load_preset(REPO / "configs/train/gemma-3-12b.yaml").resolved()
    cfg.max_length = args.max_length or cfg.max_length
    cfg.assistant_only_loss = False  # the data below is pre-tokenized with labels
    cfg.lora_exclude_modules = None  # a text-only model here: no vision tower to leave out
    cfg.eval_steps = None
    cfg.parse_check_examples = 0
    cfg.save_steps = 10**6
    cfg.logging_steps = 1
    cfg.max_steps = args.steps
    cfg.gradient_accumulation_steps = 1
    if not cuda:
        cfg.compute_dtype = "float32"
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="gemma3-12b-shape-"))
    model_dir = work / "model"
    t0 = time.time()
    mcfg = gemma3_12b_config(args.layers, shrink=not cuda)
    if not (model_dir / "config.json").is_file():
        torch.manual_seed(0)
        dtype = torch.bfloat16 if cuda else torch.float32
        default = torch.get_default_dtype()
        torch.set_default_dtype(dtype)  # build in bf16 directly: 24 GB, not 48 + 24
        try:
            with torch.device("cuda" if cuda else "cpu"):
                model = Gemma3ForCausalLM(mcfg)
        finally:
            torch.set_default_dtype(default)
        model.save_pretrained(model_dir)
        del model
        if cuda:
            torch.cuda.empty_cache()
    tok = _bench_tokenizer(model_dir)
    t_built = time.time() - t0
    # random documents of 256..1024 tokens, packed padding-free into rows of max_length
    g = torch.Generator().manual_seed(0)
    docs = []
    while sum(len(d) for d in docs) < cfg.max_length * (args.steps + 2) * cfg.per_device_train_batch_size * 2:
        n = int(torch.randint(256, 1025, (1,), generator=g))
        docs.append(torch.randint(4, mcfg.vocab_size, (n,), generator=g).tolist())
    ds = Dataset.from_dict({"input_ids": docs, "labels": docs})
    timer = _step_timer()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t1 = time.time()
    tr = make_trainer(cfg, str(model_dir), tok, ds, None, work / "out", extra_callbacks=[timer])
    t_load = time.time() - t1
    tr.train()
    rate, ntok, secs = timer.rate()
    out = {
        "kind": "gpu-shape",
        "shape": "gemma-3-12b" + (f" ({args.layers} layers)" if args.layers else ""),
        "device": torch.cuda.get_device_name(0) if cuda else "cpu (shrunk smoke test)",
        "parameters": sum(p.numel() for p in tr.model.parameters()),
        "attn_implementation": tr.ledgerwright_attn,
        "max_length": cfg.max_length,
        "steps": args.steps,
        "tokens_per_s": rate,
        "tokens_timed": ntok,
        "seconds_timed": secs,
        "build_seconds": round(t_built, 1),
        "load_seconds": round(t_load, 1),
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2) if cuda else None,
    }
    print(
        f"gemma-3-12b shape: {rate:,.0f} tokens/s over {args.steps - 1} steps; "
        f"peak memory {out['peak_memory_gib']} GiB allocated ({out['peak_reserved_gib']} GiB reserved); "
        f"attention {out['attn_implementation']}"
    )
    return out


def write_markdown(res: dict, path: Path, notes: str = "") -> None:
    r = res
    modes = list(r["median_tokens_per_s"])
    lines = [
        f"# Training throughput, {r['date']}, CPU: padding-free packing vs padded batches",
        "",
        "Command: `python bench/train_throughput.py " + " ".join(sys.argv[1:]) + "`",
        "",
        f"Tiny default (QLoRA through bitsandbytes 4-bit, fp32 compute, attention "
        f"`{r['attn_implementation']}`), {r['examples']} `{r['task']}` {r.get('role', 'writer')} examples (mean "
        f"{r['mean_example_tokens']} tokens, longest {r['longest_example_tokens']}), max_length {r['max_length']}. "
        f"Packed: {r['packed_rows_per_step']} best-fit-decreasing row(s) of up to {r['max_length']} tokens per "
        "step, padding-free (position_ids restart per example). Padded-N: N examples per step, padded to the "
        f"longest in the batch (N={r['padded_equal_tokens_batch']} carries as many real tokens per step as a "
        f"packed step on average). Same process; rounds alternate; {r['steps_per_round']} steps per round, the "
        "first left out. Tokens are real (non-padding) tokens trained per second.",
        "",
        "| round | " + " | ".join(f"{m} tokens/s" for m in modes) + " |",
        "|---|" + "---|" * len(modes),
    ]
    for i in range(r["rounds"]):
        lines.append(
            f"| {i} | " + " | ".join(f"{r['results'][m][i]['tokens_per_s']:.0f}" for m in modes) + " |"
        )
    lines.append(
        "| **median** | " + " | ".join(f"**{r['median_tokens_per_s'][m]:.0f}**" for m in modes) + " |"
    )
    if r.get("fused_vs_blockwise"):
        lines[0] = f"# Training throughput, {r['date']}, CPU: global attention fused vs tiled"
        ratio = r["ratios_packed_over_padded"]["packed-blockwise"]
        verdict = (
            f"Packed rows both. `packed`: global layers through PyTorch's fused CPU kernel "
            f"(`train/attention/cpu_fused.py`, the default); `packed-blockwise`: every layer on the tiled "
            f"kernel (the baseline). Ratio fused / tiled: **{ratio:.2f}x**."
        )
    elif r.get("compact_vs_full_head"):
        lines[0] = f"# Training throughput, {r['date']}, CPU: LM head on labelled positions vs every position"
        ratio = r["ratios_packed_over_padded"]["packed-full-head"]
        verdict = (
            "Packed rows both. `packed`: TRL's fused LM head scores only the positions with a label "
            "(`train/lm_head.py`, the default); `packed-full-head`: every position of the packed row, as TRL "
            f"ships it for the CPU (the baseline). Ratio labelled-only / every position: **{ratio:.2f}x**."
        )
    else:
        verdict = (
            "Ratios packed / padded: "
            + ", ".join(f"{m}: **{v:.2f}x**" for m, v in r["ratios_packed_over_padded"].items())
            + " (target at least 1.5x)."
        )
    lines += [
        "",
        verdict,
        "",
        f"Machine: {platform.machine()}, {r['cpu_count']} cores shared with other jobs (load average at the end "
        f"{', '.join(f'{x:.1f}' for x in r['load_average'])}), {r['torch_threads']} torch thread(s).",
        "",
    ]
    if notes:
        lines += [notes, ""]
    lines += ["```json", json.dumps(r, indent=1, default=str), "```", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines), encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", help="prepared SFT datasets (default: the embedded default)")
    ap.add_argument("--cache-dir", help="cache of the embedded default and the tiny base")
    ap.add_argument("--config", help="train preset (default: the tiny default)")
    ap.add_argument("--examples", type=int, default=128)
    ap.add_argument("--steps", type=int, default=8, help="optimizer steps per round (the first is warm-up)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-length", type=int, default=None)
    ap.add_argument("--packed-rows", type=int, default=1, help="packed rows per step")
    ap.add_argument(
        "--padded-batch",
        type=int,
        nargs="+",
        default=None,
        help="examples per padded step, one or more (default: as many tokens as a packed step)",
    )
    ap.add_argument(
        "--fused-vs-blockwise",
        action="store_true",
        help="packed rows with the CPU's fused global attention vs every layer on the tiled kernel",
    )
    ap.add_argument(
        "--compact-vs-full-head",
        action="store_true",
        help="packed rows with the LM head on labelled positions only vs on every position",
    )
    ap.add_argument("--role", default="writer", choices=["writer", "reader"], help="which recipe's data")
    ap.add_argument(
        "--task",
        default=None,
        help="writer: action | memory | both; reader: verdict | policy | both (default: the role's)",
    )
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--notes", default="", help="a paragraph added to the markdown results")
    ap.add_argument("--out", help="markdown results file (CPU mode)")
    ap.add_argument("--gpu-shape", choices=["gemma-3-12b"], help="random-weight 12B-shape run (for a GPU)")
    ap.add_argument("--layers", type=int, default=None, help="with --gpu-shape: fewer layers")
    ap.add_argument("--work-dir", help="with --gpu-shape: where the random model is written")
    ap.add_argument("--json", help="also write the result as JSON here")
    args = ap.parse_args(argv)
    if args.gpu_shape:
        res = gpu_shape_bench(args)
    else:
        res = cpu_bench(args)
        print("median tokens/s: " + ", ".join(f"{m} {v:.0f}" for m, v in res["median_tokens_per_s"].items()))
        print(
            "packed / padded: "
            + ", ".join(f"{m} {v:.2f}x" for m, v in res["ratios_packed_over_padded"].items())
        )
        if args.out:
            write_markdown(res, Path(args.out), args.notes)
            print(f"wrote {args.out}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
