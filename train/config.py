"""The training configuration: a dataclass with help text, a YAML preset, and CLI overrides.

Precedence: dataclass defaults (the embedded tiny default) < ``--config`` YAML preset < command-line
flags. Every field is a flag (``lr_scheduler_type`` -> ``--lr-scheduler-type``); fields of the tiny base
model are ``--tiny-<name>``. This module imports nothing heavy, so entry scripts can parse the config
(and set offline variables) before transformers is imported.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from data_prep.yaml_config import ConfigError as BaseConfigError
from data_prep.yaml_config import (
    add_dataclass_flags,
    apply_flags,
    coerce_value,
    joined,
    read_mapping,
    strict_parser,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
TINY = "tiny"  # the value of `model` that selects the embedded tiny Gemma 3 default

WRITER_TASKS = {
    "action": ["writer_action"],
    "memory": ["writer_memory"],
    "both": ["writer_action", "writer_memory"],
}
READER_TASKS = {
    "verdict": ["reader_verdict"],
    "policy": ["reader_policy"],
    "both": ["reader_verdict", "reader_policy"],
}
ROLE_TASKS = {"writer": WRITER_TASKS, "reader": READER_TASKS}
ROLE_DEFAULTS = {"writer": ("both", "ckpt"), "reader": ("verdict", "ckpt-reader")}
REPORT_TO = ("none", "tensorboard", "wandb", "trackio")


class ConfigError(BaseConfigError):
    """A bad preset or flag; the message names the file (or flag) and the field."""


def _help(text: str) -> dict:
    return {"help": text}


@dataclass
class TinyBaseConfig:
    """The embedded tiny base: a Gemma 3 text model (local + global layers, GQA) built from scratch."""

    vocab_size: int = field(
        default=3072, metadata=_help("byte-level BPE vocabulary size (incl. special tokens)")
    )
    hidden_size: int = field(default=128, metadata=_help("model width"))
    intermediate_size: int = field(default=512, metadata=_help("MLP width"))
    num_hidden_layers: int = field(
        default=4, metadata=_help("layers; alternate sliding (local) and full (global)")
    )
    num_attention_heads: int = field(default=4, metadata=_help("query heads"))
    num_key_value_heads: int = field(default=2, metadata=_help("key/value heads (GQA)"))
    head_dim: int = field(default=32, metadata=_help("head dimension; query_pre_attn_scalar is set to it"))
    sliding_window: int = field(default=128, metadata=_help("window of the local (sliding) layers"))
    max_position_embeddings: int = field(default=8192, metadata=_help("longest position the rope covers"))
    pretrain_steps: int = field(default=400, metadata=_help("full-parameter pretraining steps on the corpus"))
    pretrain_batch_size: int = field(default=8, metadata=_help("sequences per pretraining step"))
    pretrain_seq_len: int = field(default=512, metadata=_help("tokens per pretraining sequence"))
    pretrain_lr: float = field(default=3e-3, metadata=_help("peak AdamW learning rate of pretraining"))
    pretrain_format: str = field(
        default="text",
        metadata=_help(
            "what pretraining reads: 'text' (message texts as plain documents, no chat markup, so the "
            "adapter still has the chat format to learn) or 'conversation' (rendered chat, all tokens)"
        ),
    )
    copy_circuit: bool = field(
        default=True,
        metadata=_help(
            "start from a copying circuit (positional heads in layer 0, a match of the last copy_match_tokens "
            "tokens that prefers the latest occurrence in layer 1, a one-token match in the first global layer; "
            "train/copy_circuit.py): "
            "a content-matching copy does not emerge from minutes of CPU pretraining"
        ),
    )
    copy_match_tokens: int = field(
        default=3,
        metadata=_help(
            "tokens the copy circuit's window match compares (2 or 3): with 3, an id whose character pair "
            "repeats (cfb3b3f7) continues from the call, not from its own earlier pair"
        ),
    )
    copy_global_phrase: bool = field(
        default=False,
        metadata=_help(
            "the copy circuit's first global layer also matches the last copy_match_tokens tokens anywhere "
            "in the context (a second head beside its one-token match), for a phrase and the value after it "
            "that recur turns apart; measured worse on the writer command (descriptions 30% -> 1%: the "
            "student continues its own training-family phrases; bench/results/learning-2026-12-03e-cpu.md)"
        ),
    )
    rename_tools: float = field(
        default=0.5,
        metadata=_help(
            "share of the writer examples in the pretraining text whose tools get fresh verb_noun names in "
            "every turn (train/augment.py): copying a name from the call then pays, recalling one does not"
        ),
    )
    rename_values: float = field(
        default=0.5,
        metadata=_help(
            "share of the writer examples in the pretraining text whose call values get fresh letters in "
            "every turn (train/augment.py): copying an id's prefix from the call then pays, recalling one does not"
        ),
    )
    copy_fraction: float = field(
        default=0.25,
        metadata=_help(
            "share of every pretraining batch that is synthetic copy sequences (S, a gap, S again)"
        ),
    )
    seed: int = field(default=0, metadata=_help("seed of the tokenizer corpus order, init and pretraining"))


@dataclass
class TrainConfig:
    """QLoRA fine-tuning of a ledger writer or reader (see configs/train/*.yaml)."""

    # what to train
    role: str = field(default="writer", metadata=_help("writer or reader (set by the entry script)"))
    task: str | None = field(
        default=None,
        metadata=_help(
            "writer: action | memory | both (default both: action ledgers and authorization memory, "
            "so one ckpt/ serves eval/sabotage.py and eval/policy_reuse.py); reader: verdict | policy | both "
            "(default verdict)"
        ),
    )
    examples: int | None = field(
        default=None, metadata=_help("sample exactly this many training examples (default: all of them)")
    )
    seed: int = field(
        default=0, metadata=_help("seed of example sampling, adapter init, data order, dropout")
    )
    rename_tools: float = field(
        default=1.0,
        metadata=_help(
            "share of the writer's training examples whose tools get fresh names of varying shape in every turn "
            "(train/augment.py), so a tool name is copied from the call up to its quote, never recalled; 0 trains "
            "on the names as built"
        ),
    )
    rename_values: float = field(
        default=1.0,
        metadata=_help(
            "share of the writer's training examples whose call values (ids, names, codes) get fresh letters "
            "in every turn (train/augment.py), so a description copies them from the call; 0 keeps them as built"
        ),
    )
    rename_keys: float = field(
        default=1.0,
        metadata=_help(
            "share of the writer's training examples whose calls' argument keys get fresh letters in every word "
            "but id, in every turn (train/augment.py), so a description copies a held-out call's keys "
            "(fare_class) instead of recalling a training family's (fare_id); 0 keeps them as built"
        ),
    )
    rename_memory: float = field(
        default=0.0,
        metadata=_help(
            "share of the writer's memory examples whose family words (issuer, action, vendor, categories) "
            "get fresh letters in the history and the answer alike (train/augment.py), so that a record's "
            "values can only be copied from the history; off by default: on the tiny writer (memory only, "
            "237 examples) the student wrote random letters instead of recalled words and valid memories "
            "fell from 7/12 to 0/12 (bench/results/learning-2026-12-06b-cpu.md)"
        ),
    )
    allow_upsample: bool = field(
        default=False, metadata=_help("repeat examples when --examples exceeds the train split")
    )
    eval_examples: int | None = field(
        default=24, metadata=_help("validation examples for the eval loss (fixed sample; none = all)")
    )
    # where
    data_dir: str | None = field(
        default=None,
        metadata=_help(
            "prepared SFT datasets (<dir>/<task>/); default: build the embedded default in the cache"
        ),
    )
    cache_dir: str | None = field(
        default=None,
        metadata=_help("cache of the embedded default (default $LEDGERWRIGHT_CACHE or .cache/ledgerwright)"),
    )
    output_dir: str | None = field(
        default=None,
        metadata=_help("checkpoint directory (default ckpt/ for writers, ckpt-reader/ for readers)"),
    )
    resume: bool = field(default=False, metadata=_help("continue from the latest checkpoint in output_dir"))
    # model
    model: str = field(
        default=TINY,
        metadata=_help("'tiny' (embedded tiny Gemma 3, built offline), a local path, or a hub id"),
    )
    revision: str | None = field(default=None, metadata=_help("hub revision (commit) to pin a hub model"))
    chat_template: str | None = field(
        default="configs/chat_templates/gemma3-train.jinja",
        metadata=_help("training chat template with {% generation %} markers (path, relative to the repo)"),
    )
    attn_implementation: str = field(
        default="blockwise_fp32",
        metadata=_help(
            "attention: blockwise_fp32 (every layer to the fp32 kernel, sliding layers with their "
            "window; the CPU default), blockwise_fp32_global (global layers to the kernel, sliding "
            "layers to sdpa / flash-attention; the GPU presets), sdpa, eager, flash_attention_2"
        ),
    )
    attention_precision: str = field(
        default="auto",
        metadata=_help(
            "operands of the blockwise kernel: auto (bf16 products with fp32 scores, softmax "
            "statistics and accumulators for bf16 inputs on a GPU; exact fp32 otherwise), ieee, tf32, bf16"
        ),
    )
    load_in_4bit: bool = field(
        default=True, metadata=_help("QLoRA: load the base in 4 bits with bitsandbytes")
    )
    bnb_4bit_quant_type: str = field(default="nf4", metadata=_help("nf4 or fp4"))
    bnb_4bit_use_double_quant: bool = field(
        default=True, metadata=_help("quantize the quantization constants")
    )
    bnb_4bit_quant_storage: str | None = field(
        default=None,
        metadata=_help("storage dtype of 4-bit weights; bfloat16 for FSDP so parameters flatten"),
    )
    compute_dtype: str = field(
        default="auto", metadata=_help("auto (bfloat16 on GPU, float32 on CPU), bfloat16, float16 or float32")
    )
    lora_r: int = field(default=16, metadata=_help("LoRA rank"))
    lora_alpha: int = field(default=32, metadata=_help("LoRA alpha"))
    lora_dropout: float = field(default=0.0, metadata=_help("LoRA dropout"))
    lora_target_modules: str = field(default="all-linear", metadata=_help("'all-linear' or a comma list"))
    lora_exclude_modules: str | None = field(
        default=None, metadata=_help("regex of modules to leave out (e.g. a vision tower)")
    )
    # training
    max_length: int = field(
        default=4096, metadata=_help("tokens per sequence; longer examples are truncated")
    )
    packing: bool = field(default=True, metadata=_help("padding-free packing (best-fit decreasing)"))
    assistant_only_loss: bool = field(default=True, metadata=_help("loss on assistant tokens only"))
    gradient_checkpointing: bool = field(default=False, metadata=_help("recompute activations in backward"))
    num_train_epochs: float = field(default=1.0, metadata=_help("epochs over the sampled examples"))
    max_steps: int = field(
        default=-1, metadata=_help("stop after this many optimizer steps (-1: epochs decide)")
    )
    per_device_train_batch_size: int = field(
        default=1, metadata=_help("rows per device per step (packed rows of max_length when packing)")
    )
    per_device_eval_batch_size: int = field(default=4, metadata=_help("rows per device per eval step"))
    gradient_accumulation_steps: int = field(default=1, metadata=_help("micro-batches per optimizer step"))
    learning_rate: float = field(default=2e-3, metadata=_help("peak learning rate of the adapter"))
    lr_scheduler_type: str = field(default="cosine", metadata=_help("transformers scheduler name"))
    warmup_ratio: float = field(default=0.05, metadata=_help("fraction of steps of linear warmup"))
    weight_decay: float = field(default=0.0, metadata=_help("AdamW weight decay"))
    max_grad_norm: float = field(default=1.0, metadata=_help("gradient clipping"))
    optim: str = field(default="adamw_torch", metadata=_help("transformers optimizer name"))
    logging_steps: int = field(default=5, metadata=_help("log the train loss every N steps"))
    eval_steps: int | None = field(
        default=64, metadata=_help("evaluate every N steps (none: at the end only)")
    )
    save_steps: int = field(default=100, metadata=_help("write a resumable checkpoint every N steps"))
    save_total_limit: int | None = field(default=2, metadata=_help("keep at most N checkpoints"))
    report_to: str = field(
        default="none",
        metadata={**_help("none, or tensorboard | wandb | trackio, several as TRL takes them"), "list": True},
    )
    num_threads: int | None = field(
        default=None, metadata=_help("CPU threads per process (default: cores / local processes)")
    )
    parse_check_examples: int = field(
        default=16,
        metadata=_help(
            "after training, generate answers for this many held-out examples and report how many "
            "parse as JSON (0: skip)"
        ),
    )
    tiny: TinyBaseConfig = field(default_factory=TinyBaseConfig, metadata=_help("the embedded tiny base"))

    # ---- derived values -------------------------------------------------------------------------
    def resolved(self) -> TrainConfig:
        """A copy with role defaults filled in and values checked; raises ConfigError."""
        cfg = dataclasses.replace(self, tiny=dataclasses.replace(self.tiny))
        if cfg.role not in ROLE_TASKS:
            raise ConfigError(f"role: expected writer or reader, got {cfg.role!r}")
        task_default, out_default = ROLE_DEFAULTS[cfg.role]
        cfg.task = cfg.task or task_default
        if cfg.task not in ROLE_TASKS[cfg.role]:
            raise ConfigError(
                f"task: {cfg.task!r} is not a {cfg.role} task; choose one of {sorted(ROLE_TASKS[cfg.role])}"
            )
        cfg.output_dir = cfg.output_dir or out_default
        if cfg.examples is not None and cfg.examples < 1:
            raise ConfigError(f"examples: expected a positive number, got {cfg.examples}")
        trackers = report_to_list(cfg.report_to)
        if (
            not trackers
            or any(t not in REPORT_TO for t in trackers)
            or ("none" in trackers and len(trackers) > 1)
        ):
            raise ConfigError(
                f"report_to: expected none or a comma list of {list(REPORT_TO[1:])}, got {cfg.report_to!r}"
            )
        if cfg.compute_dtype not in ("auto", "bfloat16", "float16", "float32"):
            raise ConfigError(f"compute_dtype: unknown dtype {cfg.compute_dtype!r}")
        if cfg.tiny.pretrain_format not in ("text", "conversation"):
            raise ConfigError(
                f"tiny.pretrain_format: expected text or conversation, got {cfg.tiny.pretrain_format!r}"
            )
        if cfg.max_length < 16:
            raise ConfigError(f"max_length: {cfg.max_length} is too small")
        return cfg

    @property
    def sft_tasks(self) -> list[str]:
        return ROLE_TASKS[self.role][self.task or ROLE_DEFAULTS[self.role][0]]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def config_hash(self) -> str:
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def resolve_repo_path(path: str | None) -> Path | None:
    """A preset path: absolute, relative to the cwd if it exists there, else relative to the repo."""
    if path is None:
        return None
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    return REPO_ROOT / p


# ---- YAML and CLI -------------------------------------------------------------------------------
def apply_mapping(cfg: TrainConfig, data: dict, source: str) -> TrainConfig:
    """Overlay a (YAML) mapping on ``cfg``; unknown keys and wrong types raise ConfigError."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping of config fields, got {type(data).__name__}")
    hints = typing.get_type_hints(TrainConfig)
    tiny_hints = typing.get_type_hints(TinyBaseConfig)
    for key, value in data.items():
        if key == "tiny":
            if not isinstance(value, dict):
                raise ConfigError(f"{source}: tiny: expected a mapping")
            for tkey, tvalue in value.items():
                if tkey not in tiny_hints:
                    raise ConfigError(f"{source}: tiny.{tkey}: unknown field (known: {sorted(tiny_hints)})")
                setattr(
                    cfg.tiny,
                    tkey,
                    coerce_value(tvalue, tiny_hints[tkey], f"{source}: tiny.{tkey}", ConfigError),
                )
            continue
        if key not in hints:
            raise ConfigError(f"{source}: {key}: unknown field (see --help for the list)")
        setattr(cfg, key, coerce_value(joined(value), hints[key], f"{source}: {key}", ConfigError))
    return cfg


def load_preset(path: str | Path, cfg: TrainConfig | None = None) -> TrainConfig:
    cfg = cfg or TrainConfig()
    p = resolve_repo_path(str(path))
    if not p.is_file():
        raise ConfigError(f"--config: {path}: no such preset file")
    return apply_mapping(cfg, read_mapping(p, ConfigError, "preset"), str(p))


def report_to_list(value: str) -> list[str]:
    """``report_to`` as TRL takes it: ``wandb,tensorboard`` (or ``wandb tensorboard``) -> a list."""
    return [t for t in value.replace(",", " ").split() if t]


def build_parser(role: str, description: str | None = None) -> argparse.ArgumentParser:
    parser = strict_parser(
        prog=f"train/{role}.py",
        description=(description or f"QLoRA fine-tuning of a ledger {role}.")
        + " Every field takes TRL's spelling too (--learning_rate as --learning-rate).",
        argument_default=argparse.SUPPRESS,
    )
    parser.add_argument(
        "--config", metavar="YAML", help="preset under configs/train/ (defaults: the tiny default)"
    )
    add_dataclass_flags(parser, TrainConfig, skip=("tiny", "role"))
    for flag, dtype in (("--bf16", "bfloat16"), ("--fp16", "float16")):  # TRL's precision switches
        parser.add_argument(
            flag, dest="compute_dtype", action="store_const", const=dtype, help=f"--compute-dtype {dtype}"
        )
    group = parser.add_argument_group("embedded tiny base (used when --model tiny)")
    add_dataclass_flags(group, TinyBaseConfig, prefix="tiny_")
    return parser


def parse_config(role: str, argv: list[str] | None = None) -> TrainConfig:
    """defaults < --config preset < flags; returns the resolved config (raises ConfigError)."""
    parser = build_parser(role)
    ns = vars(parser.parse_args(argv))
    cfg = TrainConfig(role=role)
    preset = ns.pop("config", None)
    if preset:
        cfg = load_preset(preset, cfg)
        cfg.role = role
    apply_flags(cfg.tiny, ns, prefix="tiny_", error=ConfigError)
    apply_flags(cfg, ns, error=ConfigError)
    return cfg.resolved()


def dump_yaml(cfg: TrainConfig) -> str:
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)
