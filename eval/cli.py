"""Shared command-line plumbing of the evaluation entry scripts."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_prep.yaml_config import add_dataclass_flags, apply_flags, load_dataclass, option
from train.console import console_logger

logger = logging.getLogger("ledgerwright.eval")


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


# help of the fields both evaluation configs have (SabotageConfig, PolicyConfig): one text each
EVAL_HELP = {
    "limit": "evaluate at most N items ('all' for every held-out item)",
    "seed": "seed of item order, injection and bootstrap",
    "bootstrap_resamples": "bootstrap resamples of every interval",
    "base_writer": "also measure the writer's base model without the adapter as a writer (slower)",
    "constrained_writer": "also measure the writer under its answer's JSON schema (grammar-constrained "
    "decoding, eval/grammar.py) as a row of its own beside free decoding (slower)",
    "teacher": "teacher baseline from the corpus",
    "cache_dir": "cache of the embedded default (default $LEDGERWRIGHT_CACHE or .cache/ledgerwright)",
    "corpus": "corpus directory (default <cache>/corpus)",
    "sft": "SFT build directory whose manifest names the held-out families (default <cache>/sft)",
    "prompts_dir": "directory of the prompt files (relative to the repository)",
    "decoding": "decoding settings YAML",
    "base_model": "override the base model path recorded in the checkpoints",
    "chunk_size": "items generated together and saved at once (none: the batch size)",
    "out": "run directory (rerun with the same arguments to resume)",
    "resume": "reuse finished items of an earlier run in --out (--no-resume starts over)",
    "progress": "progress bar",
}


def eval_option(name: str, default: Any) -> Any:
    """A field both evaluation configs share, with its one help text."""
    return option(default, EVAL_HELP[name])


@dataclass
class EvalSettings:
    """What both evaluations take; SabotageConfig and PolicyConfig extend it (with their own
    ``limit`` and ``out`` defaults)."""

    limit: int | None = eval_option("limit", None)
    seed: int = eval_option("seed", 0)
    bootstrap_resamples: int = eval_option("bootstrap_resamples", 1000)
    base_writer: bool = eval_option("base_writer", True)
    constrained_writer: bool = eval_option("constrained_writer", True)
    teacher: bool = eval_option("teacher", True)
    cache_dir: str | None = eval_option("cache_dir", None)
    corpus: str | None = eval_option("corpus", None)
    sft: str | None = eval_option("sft", None)
    prompts_dir: str = eval_option("prompts_dir", "configs/prompts")
    decoding: str = eval_option("decoding", "configs/eval/decoding.yaml")
    base_model: str | None = eval_option("base_model", None)
    chunk_size: int | None = eval_option("chunk_size", None)
    out: str = eval_option("out", "runs/eval")
    resume: bool = eval_option("resume", True)
    progress: bool = eval_option("progress", True)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


WRITER_ROWS = ("base_writer", "constrained_writer")  # measured beside the adapter's free decoding


def writer_rows(cfg: EvalSettings, writer) -> dict[str, dict]:
    """The writer rows this evaluation measures beside the adapter's free decoding, as the backend's
    arguments by row name: the base model without the adapter, and the adapter under its answer grammar
    where the backend has one (served backends do not here: a warning says the row is not measured)."""
    rows: dict[str, dict] = {}
    if cfg.base_writer:
        rows["base_writer"] = {"adapter": False}
    if cfg.constrained_writer:
        if writer.supports_grammar:
            rows["constrained_writer"] = {"constrained": True}
        else:
            logger.warning(
                "constrained_writer: backend %s offers no grammar-constrained decoding; the row is not measured",
                writer.name,
            )
    return rows


def row_fingerprints(rows: dict[str, dict], writer, task: str) -> dict[str, str | None]:
    """What identifies each writer row's answers (None: not measured), for the items' digests."""
    from eval.grammar import FIELD_CUTS, schema_digest

    out: dict[str, str | None] = {}
    for name in WRITER_ROWS:
        kw = rows.get(name)
        if kw is None:
            out[name] = None
            continue
        out[name] = writer.fingerprint(kw.get("adapter", True))
        if kw.get("constrained"):
            out[name] += "|grammar:" + schema_digest(task) + "|" + FIELD_CUTS
    return out


def add_common(ap: argparse.ArgumentParser, cls: type, default_config: Path) -> None:
    """A flag per field of ``cls``, the evaluation's own first (help shows the default preset's
    values), --config, --limit N|all and the decoding overrides."""
    defaults = load_dataclass(cls, default_config)
    common = tuple(f.name for f in dataclasses.fields(EvalSettings))
    own = tuple(f.name for f in dataclasses.fields(cls) if f.name not in common)
    add_dataclass_flags(ap, cls, skip=common, defaults=defaults)
    ap.add_argument(
        "--config",
        type=Path,
        default=default_config,
        help=f"evaluation preset YAML; flags override it (default: {default_config.name} under configs/eval/)",
    )
    ap.add_argument(
        "--limit",
        type=limit_arg,
        default=argparse.SUPPRESS,
        metavar="N|all",
        help=f"{EVAL_HELP['limit']} (default: {defaults.limit or 'all'})",
    )
    add_dataclass_flags(ap, cls, skip=(*own, "limit"), defaults=defaults)
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


def load_config(cls: type, ns: argparse.Namespace) -> Any:
    """defaults < --config preset < flags; ``--limit all`` lifts the preset's limit."""
    values = dict(vars(ns))
    limit = values.pop("limit", None)
    cfg = apply_flags(load_dataclass(cls, ns.config), values)
    if limit is not None:
        cfg.limit = None if limit == "all" else limit
    return cfg


def decoding_overrides(ns: argparse.Namespace) -> dict[str, Any]:
    return {
        k: getattr(ns, k)
        for k in ("backend", "batch_size", "threads", "workers")
        if getattr(ns, k, None) is not None
    }
