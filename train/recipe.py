"""The shared QLoRA recipe behind ``train/writer.py`` and ``train/reader.py``.

``run(cfg)`` does, in order: find (or build) the SFT data, sample the examples, find (or build) the
base model, load it in 4 bits, train a LoRA adapter with TRL's SFTTrainer (assistant-only loss,
padding-free packing), and write the checkpoint directory:

    adapter_model.safetensors, adapter_config.json   the adapter
    tokenizer.json, tokenizer_config.json,            the tokenizer and the training chat template
    chat_template.jinja
    config.yaml                                       the resolved config
    train_ids.json                                    the sampled example ids, in order
    log_history.json, loss_curves.png                 losses per step
    README.md                                         a Hugging Face style model card
    manifest.json                                     provenance, results, sha256 of every file
    base-model/                                       (tiny default only) a copy of the base
    checkpoint-<step>/                                resumable trainer checkpoints (--resume)
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_prep.embedded import default_cache_dir
from train.config import TINY, ConfigError, TrainConfig, dump_yaml, report_to_list
from train.console import console_logger

logger = logging.getLogger("ledgerwright.train")

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
# Fields that may differ between a run and its --resume without changing what is trained.
RESUME_FREE = {"resume", "report_to", "num_threads", "logging_steps", "parse_check_examples", "output_dir"}


class RecipeError(RuntimeError):
    pass


def setup_environment(cfg: TrainConfig) -> None:
    """Offline unless the user named a hub model; quiet tokenizers. Call before importing
    transformers. WANDB_MODE is the user's: wandb logs online unless they set it offline."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Idle OpenMP threads sleep instead of spinning. On a shared CPU (other jobs, or DDP processes on
    # the same cores) spinning threads wait on descheduled partners at every parallel region: a
    # tiny-model step measured 6x slower with 2 threads than with 1; with PASSIVE both took the same.
    # Only effective before torch is first imported (the entry scripts import it later).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if cfg.model == TINY or Path(cfg.model).expanduser().exists():
        for k, v in OFFLINE_ENV.items():
            os.environ.setdefault(k, v)


def check_report_to(report_to: str) -> list[str] | str:
    """The Trainer's report_to, or a clear error when a package behind it is missing."""
    trackers = report_to_list(report_to)
    if trackers == ["none"]:
        return "none"
    packages = {"tensorboard": ("tensorboard", "tensorboardX"), "wandb": ("wandb",), "trackio": ("trackio",)}
    for tracker in trackers:
        package = packages[tracker]
        if not any(importlib.util.find_spec(p) is not None for p in package):
            raise RecipeError(
                f"--report-to {report_to}: {tracker} needs the {package[0]} package, which is not installed "
                f"here. Install it (pip install {package[0]}) or pass --report-to none."
            )
    return trackers


def _setup_logging() -> None:
    console_logger(logger.name, "ledgerwright")
    import warnings

    import transformers

    transformers.logging.set_verbosity_warning()
    # transformers 5 renames gradient checkpointing to activation checkpointing; TRL and PEFT still
    # use the old names, which only warn.
    warnings.filterwarnings(
        "ignore", message=r".*[gG]radient_checkpointing.* is deprecated", category=FutureWarning
    )


def _set_threads(cfg: TrainConfig, local_world: int) -> None:
    """CPU threads: ``--num-threads``, else the machine's cores shared among the local processes.
    ``accelerate launch`` exports OMP_NUM_THREADS=1 even for one process, which left one of two cores
    idle (1,478 vs 1,771 tokens/s measured with two); another OMP_NUM_THREADS value is kept (pass
    ``--num-threads 1`` for one thread under accelerate)."""
    import torch

    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
        return
    if torch.cuda.is_available():
        return
    launched = "ACCELERATE_DYNAMO_BACKEND" in os.environ  # set by `accelerate launch` with OMP_NUM_THREADS
    if "OMP_NUM_THREADS" not in os.environ or (launched and os.environ["OMP_NUM_THREADS"] == "1"):
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))


def _checkpoint_config_diff(output_dir: Path, cfg: TrainConfig) -> list[str]:
    import yaml

    path = output_dir / "config.yaml"
    if not path.is_file():
        return []
    old = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    new = cfg.to_dict()
    return sorted(k for k in set(old) | set(new) if k not in RESUME_FREE and old.get(k) != new.get(k))


def _param_digest(model) -> str:
    """sha256 of the trainable parameters (names and bytes, sorted by name)."""
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        if p.requires_grad:
            h.update(name.encode())
            h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
    return "sha256:" + h.hexdigest()


def build_sft_config(cfg: TrainConfig, *, output_dir: Path, has_eval: bool, resuming: bool):
    import torch
    from trl import SFTConfig

    from train.modeling import compute_dtype, on_gpu

    dtype = compute_dtype(cfg)
    gpu = on_gpu()
    eval_during = has_eval and cfg.eval_steps is not None
    return SFTConfig(
        output_dir=str(output_dir),
        seed=cfg.seed,
        data_seed=cfg.seed,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        per_device_eval_batch_size=cfg.per_device_eval_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        num_train_epochs=cfg.num_train_epochs,
        max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate,
        lr_scheduler_type=cfg.lr_scheduler_type,
        warmup_steps=cfg.warmup_ratio,
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.max_grad_norm,
        optim=cfg.optim,
        logging_steps=cfg.logging_steps,
        logging_first_step=True,
        eval_strategy="steps" if eval_during else "no",
        eval_steps=cfg.eval_steps if eval_during else None,
        eval_on_start=has_eval and not resuming,
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        report_to=check_report_to(cfg.report_to),
        bf16=gpu and dtype == torch.bfloat16,
        fp16=gpu and dtype == torch.float16,
        use_cpu=not gpu,
        gradient_checkpointing=cfg.gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False} if cfg.gradient_checkpointing else None,
        dataloader_num_workers=0,
        ddp_find_unused_parameters=False,
        include_num_input_tokens_seen="non_padding",
        disable_tqdm=True,
        max_length=cfg.max_length,
        packing=cfg.packing,
        packing_strategy="bfd",
        padding_free=cfg.packing,
        assistant_only_loss=cfg.assistant_only_loss,
        save_only_model=False,
    )


def make_trainer(
    cfg: TrainConfig,
    model_path: str,
    tokenizer,
    train_rows,
    eval_rows,
    output_dir: Path,
    *,
    resuming: bool = False,
    extra_callbacks=(),
):
    """The SFTTrainer with the 4-bit base and a fresh LoRA adapter (adapters in the compute dtype).

    ``train_rows``/``eval_rows`` are lists of example rows (with ``messages``) or ready ``Dataset``s
    (e.g. pre-tokenized ``input_ids``/``labels`` for benchmarks)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import SFTTrainer

    from train.callbacks import ExitAfterSave, ProgressBar
    from train.data import to_dataset
    from train.lm_head import compact_fused_head_on_cpu
    from train.modeling import compute_dtype, load_base_model, lora_config

    compact_fused_head_on_cpu()  # the LM head scores labelled positions only (CPU; GPUs already do)
    fsdp = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    model, attn_used = load_base_model(model_path, cfg, fsdp=fsdp)
    args = build_sft_config(
        cfg, output_dir=output_dir, has_eval=eval_rows is not None and len(eval_rows) > 0, resuming=resuming
    )

    def as_dataset(rows):
        return to_dataset(rows) if isinstance(rows, list) else rows

    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=as_dataset(train_rows),
        eval_dataset=as_dataset(eval_rows) if eval_rows else None,
        processing_class=tokenizer,
        peft_config=lora_config(cfg),
        callbacks=[ExitAfterSave(), *extra_callbacks],
    )
    # TRL casts QLoRA adapters to bf16. Keep them in the compute dtype instead: the same bf16 on a GPU,
    # float32 on the CPU (bf16 adapters there lose small AdamW updates and run slower).
    want = compute_dtype(cfg)
    for _, p in trainer.model.named_parameters():
        if p.requires_grad and p.dtype != want:
            p.data = p.data.to(want)
    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(ProgressBar())
    trainer.ledgerwright_attn = attn_used
    return trainer


@dataclass
class Session:
    """What the stages of one training run share: its config, the process state, where it writes,
    and the seconds each stage took (recorded in the manifest)."""

    cfg: TrainConfig
    state: Any
    cache_dir: Path
    output_dir: Path
    command: str = ""
    t_start: float = field(default_factory=time.time)
    timings: dict[str, float] = field(default_factory=dict)
    lengths: dict[str, Any] = field(default_factory=dict)  # length stats per split (fit)
    resumed_from: str | None = None  # the trainer checkpoint continued (fit)

    @property
    def main(self) -> bool:
        return self.state.is_main_process


@dataclass
class Prepared:
    """The data stage's result: the build, its rows, the sampled training and validation rows."""

    sft_dir: Path
    data: Any
    train_rows: list[dict]
    eval_rows: list[dict]


@dataclass
class Base:
    """The base stage's result: where the base model is, its name, and (tiny) its pretraining record."""

    path: Path | str
    name: str
    tokenizer: Any
    pretrain: dict | None = None


def run(cfg: TrainConfig, *, command: str = "", callbacks=()) -> Path:
    """Train and write the checkpoint directory; returns its path. ``callbacks`` are extra
    TrainerCallbacks (tests use one to keep the trained model). The stages, in order:
    ``prepare_data`` -> ``prepare_base`` -> ``fit`` -> ``write_checkpoint``."""
    check_report_to(cfg.report_to)  # fail before any expensive step
    setup_environment(cfg)
    _setup_logging()
    import torch
    from accelerate import PartialState

    state = PartialState(cpu=not torch.cuda.is_available())
    _set_threads(cfg, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    cache_dir = Path(cfg.cache_dir).expanduser() if cfg.cache_dir else default_cache_dir()
    session = Session(cfg, state, cache_dir, Path(cfg.output_dir), command)
    prepared = prepare_data(session)
    base = prepare_base(session, prepared.sft_dir)
    trainer, train_out, final_eval = fit(session, prepared, base, callbacks)
    write_checkpoint(session, prepared, base, trainer, train_out, final_eval)
    state.wait_for_everyone()
    return session.output_dir


def prepare_data(s: Session) -> Prepared:
    """The SFT build (the embedded default is built in the cache when no --data-dir is given), the
    sampled training examples (tools renamed when asked) and the validation rows."""
    from train import data as D
    from train.augment import rename_keys, rename_memory, rename_tools, rename_values

    cfg = s.cfg
    with s.state.main_process_first():
        sft_dir = D.resolve_sft_dir(cfg.data_dir, s.cache_dir)
    s.timings["startup_and_data"] = time.time() - s.t_start
    data = D.load_tasks(sft_dir, cfg.sft_tasks)
    train_rows = D.sample_train(data, cfg.examples, cfg.seed, cfg.allow_upsample)
    train_rows = rename_values(rename_tools(train_rows, cfg.seed, cfg.rename_tools), cfg.seed, cfg.rename_values)
    train_rows = rename_keys(train_rows, cfg.seed, cfg.rename_keys)
    train_rows = rename_memory(train_rows, cfg.seed, cfg.rename_memory)
    eval_rows = D.sample_eval(data, cfg.eval_examples)
    if not eval_rows:
        logger.warning("%s: no validation examples; no validation loss will be reported", sft_dir)
    if s.main:
        logger.info(
            "data: %s tasks %s: %d training examples (of %d), %d validation, %d held-out",
            sft_dir,
            "+".join(cfg.sft_tasks),
            len(train_rows),
            len(data.splits["train"]),
            len(eval_rows),
            len(data.splits["heldout"]),
        )
    return Prepared(sft_dir, data, train_rows, eval_rows)


def prepare_base(s: Session, sft_dir: Path) -> Base:
    """The base model: a hub id or local folder as given, or the embedded tiny base (built and
    pretrained in the cache on first use); and its tokenizer with the training chat template."""
    from train.modeling import load_tokenizer

    cfg = s.cfg
    if cfg.model != TINY:
        return Base(cfg.model, cfg.model, load_tokenizer(cfg.model, cfg))
    from train.tiny import ensure_tiny_base

    with s.state.main_process_first():
        t_base = time.time()
        path = ensure_tiny_base(sft_dir, s.cache_dir, cfg.tiny)
        s.timings["base_model"] = time.time() - t_base
    pretrain = json.loads((path / "pretrain.json").read_text(encoding="utf-8"))
    pretrain.pop("train_loss", None)
    return Base(path, path.name, load_tokenizer(str(path), cfg), pretrain)


def resume_point(s: Session) -> str | None:
    """The trainer checkpoint to continue from (--resume), refusing one of a different run."""
    from transformers.trainer_utils import get_last_checkpoint

    out = s.output_dir
    if not s.cfg.resume:
        if s.main and out.is_dir() and get_last_checkpoint(str(out)):
            logger.warning(
                "%s already holds checkpoints of an earlier run; pass --resume to continue it", out
            )
        return None
    found = get_last_checkpoint(str(out)) if out.is_dir() else None
    if found is None:
        logger.warning("--resume: no checkpoint in %s; training from the start", out)
        return None
    diff = _checkpoint_config_diff(out, s.cfg)
    if diff:
        raise ConfigError(
            f"--resume: {out}/config.yaml differs from this run in {diff}; resuming would "
            "not continue the same run (use another --output-dir)"
        )
    logger.info("resuming from %s", found)
    return found


def fit(s: Session, prepared: Prepared, base: Base, callbacks=()):
    """Train the adapter (resuming when asked) and take the final validation loss; returns
    (trainer, train output, final eval metrics)."""
    from train import data as D

    cfg = s.cfg
    s.lengths = {
        "train": D.length_stats(prepared.train_rows, base.tokenizer, cfg.max_length),
        "validation": D.length_stats(prepared.eval_rows, base.tokenizer, cfg.max_length)
        if prepared.eval_rows
        else None,
    }
    if s.main:
        D.warn_truncation(s.lengths["train"], "training data")
        if s.lengths["validation"]:
            D.warn_truncation(s.lengths["validation"], "validation data")
    s.resumed_from = resume_point(s)
    if s.main:
        s.output_dir.mkdir(parents=True, exist_ok=True)
        (s.output_dir / "config.yaml").write_text(dump_yaml(cfg), encoding="utf-8")
    trainer = make_trainer(
        cfg,
        str(base.path),
        base.tokenizer,
        prepared.train_rows,
        prepared.eval_rows,
        s.output_dir,
        resuming=s.resumed_from is not None,
        extra_callbacks=callbacks,
    )
    if s.main:
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        logger.info(
            "model: %s, attention %s, 4-bit %s, %d trainable adapter parameters; world size %d",
            base.name,
            trainer.ledgerwright_attn,
            cfg.load_in_4bit,
            trainable,
            s.state.num_processes,
        )
    t_train = time.time()
    train_out = trainer.train(resume_from_checkpoint=s.resumed_from)
    s.timings["train"] = time.time() - t_train
    t_eval = time.time()
    last = next((h for h in reversed(trainer.state.log_history) if "eval_loss" in h), None)
    if last is not None and last.get("step") == trainer.state.global_step:
        final_eval = {"eval_loss": last["eval_loss"]}  # already evaluated at the last step
    else:
        final_eval = trainer.evaluate() if prepared.eval_rows else {}
    s.timings["final_eval"] = time.time() - t_eval
    return trainer, train_out, final_eval


def write_checkpoint(s: Session, prepared: Prepared, base: Base, trainer, train_out, final_eval) -> None:
    """The checkpoint directory: adapter and tokenizer, log, example ids, held-out parse check, the
    base's local copy (tiny), loss curves, model card and, last, the manifest of every file."""
    from accelerate.utils import gather_object

    from train.manifest import file_digests, write_json
    from train.report import model_card, plot_losses

    cfg, out = s.cfg, s.output_dir
    digests = gather_object([_param_digest(trainer.model)])
    trainer.save_model(str(out))  # adapter + tokenizer (and chat template); main process writes
    if not s.main:
        return
    log_history = trainer.state.log_history
    write_json(out / "log_history.json", {"log_history": log_history})
    ids = [r["id"] for r in prepared.train_rows]
    (out / "train_ids.json").write_text(
        json.dumps({"task": cfg.task, "seed": cfg.seed, "ids": ids}, indent=0) + "\n", encoding="utf-8"
    )
    pc = heldout_parse_check(s, prepared, base, trainer.model)
    local_base = None
    if cfg.model == TINY:
        local_base = "base-model"
        shutil.rmtree(out / local_base, ignore_errors=True)
        shutil.copytree(base.path, out / local_base)
    plot_losses(
        log_history, out / "loss_curves.png", f"{cfg.role} ({cfg.task}), {len(ids)} examples, seed {cfg.seed}"
    )
    manifest = checkpoint_manifest(s, prepared, base, trainer, train_out, final_eval, pc, local_base)
    manifest["distributed"] = {
        "world_size": s.state.num_processes,
        "param_digests": digests,
        "ranks_agree": len(set(digests)) == 1,
    }
    if not manifest["distributed"]["ranks_agree"]:
        logger.warning("adapter parameters differ between ranks: %s", digests)
    (out / "README.md").write_text(
        model_card(cfg=cfg, manifest=manifest, command=s.command), encoding="utf-8"
    )
    manifest["outputs"] = file_digests(out, exclude_dirs=("checkpoint-*",))
    write_json(out / "manifest.json", manifest)
    r = manifest["results"]
    logger.info(
        "done in %.0f s: validation loss %s -> %s; %s tokens; wrote %s",
        manifest["wall_seconds"],
        f"{r['eval_loss_initial']:.4f}" if r["eval_loss_initial"] is not None else "n/a",
        f"{r['eval_loss_final']:.4f}" if r["eval_loss_final"] is not None else "n/a",
        f"{manifest['tokens_seen']:,}",
        out,
    )


def heldout_parse_check(s: Session, prepared: Prepared, base: Base, model) -> dict | None:
    """Greedy answers on a spread of held-out rows (the same for every seed); None when off."""
    from train.report import parse_check

    heldout = prepared.data.splits["heldout"]
    n = s.cfg.parse_check_examples
    if n <= 0 or not heldout:
        return None
    sample = heldout[:: max(1, len(heldout) // n)][:n]
    t_pc = time.time()
    pc = parse_check(model, base.tokenizer, sample, len(sample), max_prompt_tokens=s.cfg.max_length)
    s.timings["parse_check"] = time.time() - t_pc
    logger.info(
        "held-out parse check: %d/%d answers parse as JSON (%d exact)",
        pc["parsed"],
        pc["answers"],
        pc["exact"],
    )
    return pc


def checkpoint_manifest(
    s: Session, prepared: Prepared, base: Base, trainer, train_out, final_eval, pc, local_base
):
    """The checkpoint contract: what was trained, from which data and base, how, and the results.
    Evaluation reads ``dataset.sft_dir`` to score the checkpoint on its own held-out families."""
    from train import data as D
    from train.manifest import code_revision, hardware, versions

    cfg, state = s.cfg, trainer.state
    log = state.log_history
    evals = [h["eval_loss"] for h in log if "eval_loss" in h]
    losses = [h["loss"] for h in log if "loss" in h]
    ids_text = "\n".join(r["id"] for r in prepared.train_rows)
    return {
        "stage": "train",
        "role": cfg.role,
        "task": cfg.task,
        "tasks": cfg.sft_tasks,
        "output_dir": str(s.output_dir),
        "command": s.command,
        "code": code_revision(),
        "versions": versions(),
        "config": cfg.to_dict(),
        "config_hash": cfg.config_hash(),
        "base_model": {
            "name": base.name,
            "path": str(Path(base.path).resolve()) if cfg.model == TINY else str(base.path),
            "local_copy": local_base,
            "revision": cfg.revision,
            "pretrain": base.pretrain,
        },
        "attn_implementation": {"requested": cfg.attn_implementation, "used": trainer.ledgerwright_attn},
        "quantization": _quantization(cfg),
        "adapter_dtype": _dtype_name(cfg),
        "dataset": {
            "sft_dir": str(prepared.sft_dir),
            "fingerprints": prepared.data.fingerprints,
            "digest": D.content_digest(prepared.train_rows),
            "train_available": len(prepared.data.splits["train"]),
            "validation_used": len(prepared.eval_rows),
        },
        "examples": len(prepared.train_rows),
        "example_ids_sha256": "sha256:" + hashlib.sha256(ids_text.encode()).hexdigest(),
        "seed": cfg.seed,
        "world_size": s.state.num_processes,
        "hardware": hardware(s.state.num_processes),
        "lengths": {k: (v.as_dict() if v else None) for k, v in s.lengths.items()},
        "tokens_seen": int(state.num_input_tokens_seen),
        "wall_seconds": round(time.time() - s.t_start, 1),
        "train_seconds": round(s.timings["train"], 1),
        "timings_seconds": {k: round(v, 1) for k, v in s.timings.items()},
        "resumed_from": Path(s.resumed_from).name if s.resumed_from else None,
        "results": {
            "global_step": state.global_step,
            "epochs": state.epoch,
            "train_loss_final": losses[-1] if losses else None,
            "train_loss_mean": train_out.training_loss,
            "eval_loss_initial": evals[0] if evals else None,
            "eval_loss_final": final_eval.get("eval_loss"),
            "parse_check": pc,
        },
    }


def _dtype_name(cfg: TrainConfig) -> str:
    from train.modeling import compute_dtype

    return str(compute_dtype(cfg)).replace("torch.", "")


def _quantization(cfg: TrainConfig) -> dict:
    fsdp = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    return {
        "load_in_4bit": cfg.load_in_4bit,
        "quant_type": cfg.bnb_4bit_quant_type,
        "double_quant": cfg.bnb_4bit_use_double_quant,
        "compute_dtype": _dtype_name(cfg),
        "quant_storage": cfg.bnb_4bit_quant_storage or (_dtype_name(cfg) if fsdp else "uint8"),
    }


def main(role: str, argv: list[str] | None = None) -> int:
    """Entry point of train/writer.py and train/reader.py."""
    import shlex
    import sys

    from train.config import parse_config
    from train.data import DataError

    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = parse_config(role, argv)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        out = run(cfg, command=f"accelerate launch train/{role}.py {shlex.join(argv)}".rstrip())
    except (ConfigError, DataError, RecipeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if os.environ.get("RANK", "0") == "0":
        print(f"{role} checkpoint: {out}")
    return 0
