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
from pathlib import Path

from train.config import TINY, ConfigError, TrainConfig, default_cache_dir, dump_yaml, report_to_list

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
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[ledgerwright] %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
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
    from train.modeling import compute_dtype, load_base_model, lora_config

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


def run(cfg: TrainConfig, *, command: str = "", callbacks=()) -> Path:
    """Train and write the checkpoint directory; returns its path. ``callbacks`` are extra
    TrainerCallbacks (tests use one to keep the trained model)."""
    t_start = time.time()
    check_report_to(cfg.report_to)  # fail before any expensive step
    setup_environment(cfg)
    _setup_logging()

    import torch
    from accelerate import PartialState
    from accelerate.utils import gather_object
    from transformers.trainer_utils import get_last_checkpoint

    from train import data as D
    from train.augment import rename_tools
    from train.manifest import code_revision, file_digests, hardware, versions, write_json
    from train.modeling import compute_dtype, load_tokenizer
    from train.report import model_card, parse_check, plot_losses

    state = PartialState(cpu=not torch.cuda.is_available())
    _set_threads(cfg, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    main = state.is_main_process
    cache_dir = Path(cfg.cache_dir).expanduser() if cfg.cache_dir else default_cache_dir()
    output_dir = Path(cfg.output_dir)

    # data
    with state.main_process_first():
        sft_dir = D.resolve_sft_dir(cfg.data_dir, cache_dir)
    timings = {"startup_and_data": time.time() - t_start}
    data = D.load_tasks(sft_dir, cfg.sft_tasks)
    train_rows = D.sample_train(data, cfg.examples, cfg.seed, cfg.allow_upsample)
    train_rows = rename_tools(train_rows, cfg.seed, cfg.rename_tools)
    eval_rows = D.sample_eval(data, cfg.eval_examples)
    if not eval_rows:
        logger.warning("%s: no validation examples; no validation loss will be reported", sft_dir)
    if main:
        logger.info(
            "data: %s tasks %s: %d training examples (of %d), %d validation, %d held-out",
            sft_dir,
            "+".join(cfg.sft_tasks),
            len(train_rows),
            len(data.splits["train"]),
            len(eval_rows),
            len(data.splits["heldout"]),
        )

    # base model
    pretrain_info = None
    if cfg.model == TINY:
        from train.tiny import ensure_tiny_base

        with state.main_process_first():
            t_base = time.time()
            model_path = ensure_tiny_base(sft_dir, cache_dir, cfg.tiny)
            timings["base_model"] = time.time() - t_base
        pretrain_info = json.loads((model_path / "pretrain.json").read_text(encoding="utf-8"))
        pretrain_info.pop("train_loss", None)
        base_name = model_path.name
    else:
        model_path = cfg.model
        base_name = cfg.model
    tokenizer = load_tokenizer(str(model_path), cfg)

    # lengths and truncation
    train_stats = D.length_stats(train_rows, tokenizer, cfg.max_length)
    eval_stats = D.length_stats(eval_rows, tokenizer, cfg.max_length) if eval_rows else None
    if main:
        D.warn_truncation(train_stats, "training data")
        if eval_stats:
            D.warn_truncation(eval_stats, "validation data")

    # resume
    resume_from = None
    if cfg.resume:
        resume_from = get_last_checkpoint(str(output_dir)) if output_dir.is_dir() else None
        if resume_from is None:
            logger.warning("--resume: no checkpoint in %s; training from the start", output_dir)
        else:
            diff = _checkpoint_config_diff(output_dir, cfg)
            if diff:
                raise ConfigError(
                    f"--resume: {output_dir}/config.yaml differs from this run in {diff}; resuming would "
                    "not continue the same run (use another --output-dir)"
                )
            logger.info("resuming from %s", resume_from)
    elif main and output_dir.is_dir() and get_last_checkpoint(str(output_dir)):
        logger.warning(
            "%s already holds checkpoints of an earlier run; pass --resume to continue it", output_dir
        )
    if main:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "config.yaml").write_text(dump_yaml(cfg), encoding="utf-8")

    trainer = make_trainer(
        cfg,
        str(model_path),
        tokenizer,
        train_rows,
        eval_rows,
        output_dir,
        resuming=resume_from is not None,
        extra_callbacks=callbacks,
    )
    model = trainer.model
    if main:
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        logger.info(
            "model: %s, attention %s, 4-bit %s, %d trainable adapter parameters; world size %d",
            base_name,
            trainer.ledgerwright_attn,
            cfg.load_in_4bit,
            trainable,
            state.num_processes,
        )

    t_train = time.time()
    train_out = trainer.train(resume_from_checkpoint=resume_from)
    train_seconds = time.time() - t_train
    timings["train"] = train_seconds
    t_eval = time.time()
    last = next((h for h in reversed(trainer.state.log_history) if "eval_loss" in h), None)
    if last is not None and last.get("step") == trainer.state.global_step:
        final_eval = {"eval_loss": last["eval_loss"]}  # already evaluated at the last step
    else:
        final_eval = trainer.evaluate() if eval_rows else {}
    timings["final_eval"] = time.time() - t_eval

    digests = gather_object([_param_digest(model)])
    trainer.save_model(str(output_dir))  # adapter + tokenizer (and chat template); main process writes

    if main:
        log_history = trainer.state.log_history
        write_json(output_dir / "log_history.json", {"log_history": log_history})
        (output_dir / "train_ids.json").write_text(
            json.dumps({"task": cfg.task, "seed": cfg.seed, "ids": [r["id"] for r in train_rows]}, indent=0)
            + "\n",
            encoding="utf-8",
        )
        pc = None
        if cfg.parse_check_examples > 0 and data.splits["heldout"]:
            heldout = data.splits["heldout"]
            # a spread over the held-out rows, the same for every seed
            step = max(1, len(heldout) // cfg.parse_check_examples)
            sample = heldout[::step][: cfg.parse_check_examples]
            t_pc = time.time()
            pc = parse_check(model, tokenizer, sample, len(sample), max_prompt_tokens=cfg.max_length)
            timings["parse_check"] = time.time() - t_pc
            logger.info(
                "held-out parse check: %d/%d answers parse as JSON (%d exact)",
                pc["parsed"],
                pc["answers"],
                pc["exact"],
            )
        evals = [h["eval_loss"] for h in log_history if "eval_loss" in h]
        losses = [h["loss"] for h in log_history if "loss" in h]
        local_base = None
        if cfg.model == TINY:
            local_base = "base-model"
            shutil.rmtree(output_dir / local_base, ignore_errors=True)
            shutil.copytree(model_path, output_dir / local_base)
        plot_losses(
            log_history,
            output_dir / "loss_curves.png",
            f"{cfg.role} ({cfg.task}), {len(train_rows)} examples, seed {cfg.seed}",
        )
        ids_text = "\n".join(r["id"] for r in train_rows)
        manifest = {
            "stage": "train",
            "role": cfg.role,
            "task": cfg.task,
            "tasks": cfg.sft_tasks,
            "output_dir": str(output_dir),
            "command": command,
            "code": code_revision(),
            "versions": versions(),
            "config": cfg.to_dict(),
            "config_hash": cfg.config_hash(),
            "base_model": {
                "name": base_name,
                "path": str(Path(model_path).resolve()) if cfg.model == TINY else str(model_path),
                "local_copy": local_base,
                "revision": cfg.revision,
                "pretrain": pretrain_info,
            },
            "attn_implementation": {"requested": cfg.attn_implementation, "used": trainer.ledgerwright_attn},
            "quantization": {
                "load_in_4bit": cfg.load_in_4bit,
                "quant_type": cfg.bnb_4bit_quant_type,
                "double_quant": cfg.bnb_4bit_use_double_quant,
                "compute_dtype": str(compute_dtype(cfg)).replace("torch.", ""),
                "quant_storage": cfg.bnb_4bit_quant_storage
                or (
                    str(compute_dtype(cfg)).replace("torch.", "")
                    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
                    else "uint8"
                ),
            },
            "adapter_dtype": str(compute_dtype(cfg)).replace("torch.", ""),
            "dataset": {
                "sft_dir": str(sft_dir),
                "fingerprints": data.fingerprints,
                "digest": D.content_digest(train_rows),
                "train_available": len(data.splits["train"]),
                "validation_used": len(eval_rows),
            },
            "examples": len(train_rows),
            "example_ids_sha256": "sha256:" + hashlib.sha256(ids_text.encode()).hexdigest(),
            "seed": cfg.seed,
            "world_size": state.num_processes,
            "hardware": hardware(state.num_processes),
            "lengths": {
                "train": train_stats.as_dict(),
                "validation": eval_stats.as_dict() if eval_stats else None,
            },
            "tokens_seen": int(trainer.state.num_input_tokens_seen),
            "wall_seconds": round(time.time() - t_start, 1),
            "train_seconds": round(train_seconds, 1),
            "timings_seconds": {k: round(v, 1) for k, v in timings.items()},
            "resumed_from": Path(resume_from).name if resume_from else None,
            "results": {
                "global_step": trainer.state.global_step,
                "epochs": trainer.state.epoch,
                "train_loss_final": losses[-1] if losses else None,
                "train_loss_mean": train_out.training_loss,
                "eval_loss_initial": evals[0] if evals else None,
                "eval_loss_final": final_eval.get("eval_loss"),
                "parse_check": pc,
            },
            "distributed": {
                "world_size": state.num_processes,
                "param_digests": digests,
                "ranks_agree": len(set(digests)) == 1,
            },
        }
        if not manifest["distributed"]["ranks_agree"]:
            logger.warning("adapter parameters differ between ranks: %s", digests)
        (output_dir / "README.md").write_text(
            model_card(cfg=cfg, manifest=manifest, command=command), encoding="utf-8"
        )
        manifest["outputs"] = file_digests(output_dir, exclude_dirs=("checkpoint-*",))
        write_json(output_dir / "manifest.json", manifest)
        r = manifest["results"]
        logger.info(
            "done in %.0f s: validation loss %s -> %s; %s tokens; wrote %s",
            manifest["wall_seconds"],
            f"{r['eval_loss_initial']:.4f}" if r["eval_loss_initial"] is not None else "n/a",
            f"{r['eval_loss_final']:.4f}" if r["eval_loss_final"] is not None else "n/a",
            f"{manifest['tokens_seen']:,}",
            output_dir,
        )
    state.wait_for_everyone()
    return output_dir


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
