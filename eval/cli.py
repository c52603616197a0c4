"""Shared command-line plumbing of the evaluation entry scripts."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from train.console import console_logger


def setup() -> None:
    """Offline, quiet libraries, and a log format; call before transformers is imported."""
    for k, v in {
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }.items():
        os.environ.setdefault(k, v)
    console_logger("ledgerwright.eval", "ledgerwright.eval")
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()  # weight-loading bars; ours shows items/s
    except ImportError:
        pass
    import warnings

    warnings.filterwarnings(
        "ignore", message=r".*[gG]radient_checkpointing.* is deprecated", category=FutureWarning
    )


def limit_arg(text: str) -> int | str:
    if text.lower() in ("all", "none", "0"):
        return "all"
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'all', got {text!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'all', got {text!r}")
    return n


def floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def add_common(ap: argparse.ArgumentParser, default_config: Path) -> None:
    ap.add_argument(
        "--config",
        type=Path,
        default=default_config,
        help=f"evaluation preset YAML (default: {default_config.name} under configs/eval/)",
    )
    ap.add_argument("--decoding", help="decoding settings YAML (default: configs/eval/decoding.yaml)")
    ap.add_argument("--out", help="run directory (rerun with the same arguments to resume)")
    ap.add_argument(
        "--limit", type=limit_arg, help="evaluate at most N items ('all' for every held-out item)"
    )
    ap.add_argument("--seed", type=int, help="seed of item order, injection and bootstrap")
    ap.add_argument(
        "--bootstrap-resamples", type=int, help="bootstrap resamples of every interval (default 1000)"
    )
    ap.add_argument(
        "--cache-dir",
        help="cache of the embedded default (default $LEDGERWRIGHT_CACHE or .cache/ledgerwright)",
    )
    ap.add_argument("--corpus", help="corpus directory (default <cache>/corpus)")
    ap.add_argument(
        "--sft", help="SFT build directory whose manifest names the held-out families (default <cache>/sft)"
    )
    ap.add_argument("--base-model", help="override the base model path recorded in the checkpoints")
    ap.add_argument(
        "--base-writer",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also measure the writer's base model without the adapter as a writer (slower)",
    )
    ap.add_argument(
        "--teacher",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="teacher baseline from the corpus (default on)",
    )
    ap.add_argument(
        "--chunk-size", type=int, help="items generated together and saved at once (default: batch size)"
    )
    ap.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="reuse finished items of an earlier run in --out (default on; --no-resume starts over)",
    )
    ap.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=None, help="progress bar (default on)"
    )
    g = ap.add_argument_group("decoding overrides")
    g.add_argument(
        "--backend",
        choices=("transformers", "vllm", "openai"),
        help="generation backend (openai: a running OpenAI-compatible server, see --endpoint)",
    )
    g.add_argument("--batch-size", type=int, help="prompts per generate() call")
    g.add_argument("--threads", type=int, help="torch CPU threads")
    g.add_argument(
        "--workers", type=int, help="CPU processes evaluating chunks side by side (default: cores / threads)"
    )


def overrides(ns: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    """Flags that were given (``limit 'all'`` is applied by ``apply_limit`` after loading)."""
    return {
        n: getattr(ns, n)
        for n in names
        if getattr(ns, n, None) is not None and not (n == "limit" and getattr(ns, n) == "all")
    }


def apply_limit(cfg: Any, ns: argparse.Namespace) -> None:
    if getattr(ns, "limit", None) == "all":
        cfg.limit = None


def decoding_overrides(ns: argparse.Namespace) -> dict[str, Any]:
    return {
        k: getattr(ns, k)
        for k in ("backend", "batch_size", "threads", "workers")
        if getattr(ns, k, None) is not None
    }
