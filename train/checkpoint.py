"""What a checkpoint directory is and how its base is loaded as the adapter was trained: the train
manifest, where the base lives (recorded path, the checkpoint's local copy, or a hub id), the digests
that identify it, the end-of-turn ids. Evaluation, serving and export all read a checkpoint through
this module, so they agree on what it holds.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from train.manifest import sha256_file

STOP_TOKENS = ("<end_of_turn>", "<|eot_id|>", "<|im_end|>", "</s>")
HASH_BASE_LIMIT = 1 << 30  # hash the base model's files when they are smaller than this


class CheckpointError(RuntimeError):
    """A checkpoint, its base model, or a backend over them cannot be loaded or used (a missing file or
    package)."""


def read_checkpoint(ckpt: str | Path) -> dict:
    """The train manifest of a checkpoint directory, with a clear error when it is not one."""
    ckpt = Path(ckpt)
    man = ckpt / "manifest.json"
    if not ckpt.is_dir():
        raise CheckpointError(
            f"{ckpt}: no such checkpoint directory (train one with train/writer.py or train/reader.py)"
        )
    for name in ("adapter_config.json", "manifest.json"):
        if not (ckpt / name).is_file():
            raise CheckpointError(f"{ckpt}: not a checkpoint directory ({name} is missing)")
    try:
        manifest = json.loads(man.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise CheckpointError(f"{man}: unreadable manifest: {exc}") from None
    if "base_model" not in manifest or "config" not in manifest:
        raise CheckpointError(f"{man}: base_model or config missing (not a train manifest)")
    return manifest


def base_model_path(ckpt: str | Path, manifest: dict, override: str | None = None) -> str:
    """Where the base model is: ``override``, the recorded path, or the checkpoint's local copy."""
    ckpt = Path(ckpt)
    if override:
        return override
    base = manifest["base_model"]
    path = base.get("path")
    if path and Path(path).exists():
        return str(path)
    local = base.get("local_copy")
    if local and (ckpt / local).exists():
        return str(ckpt / local)
    if path and (ckpt / path).exists():
        return str(ckpt / path)
    if path and not Path(path).is_absolute() and "/" in path and not path.startswith("."):
        return path  # a hub id
    raise CheckpointError(f"{ckpt}: base model {path!r} not found and no local copy in the checkpoint")


def checkpoint_digest(ckpt: str | Path) -> dict:
    """Digests that identify a checkpoint: adapter, tokenizer and chat template files, and the base
    model's files when they are small (the embedded tiny base), else its recorded name and revision."""
    ckpt = Path(ckpt)
    manifest = read_checkpoint(ckpt)
    files = {}
    for name in (
        "adapter_model.safetensors",
        "adapter_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
    ):
        if (ckpt / name).is_file():
            files[name] = sha256_file(ckpt / name)
    base: dict[str, Any] = {
        "name": manifest["base_model"].get("name"),
        "revision": manifest["base_model"].get("revision"),
    }
    try:
        bpath = Path(base_model_path(ckpt, manifest))
    except CheckpointError:
        bpath = None
    if bpath is not None and bpath.is_dir():
        weights = sorted(p for p in bpath.iterdir() if p.is_file() and p.suffix in (".safetensors", ".json"))
        if sum(p.stat().st_size for p in weights) < HASH_BASE_LIMIT:
            base["files"] = {p.name: sha256_file(p) for p in weights}
    combined = hashlib.sha256(json.dumps({"files": files, "base": base}, sort_keys=True).encode()).hexdigest()
    return {
        "path": str(ckpt),
        "digest": "sha256:" + combined,
        "files": files,
        "base": base,
        "role": manifest.get("role"),
        "task": manifest.get("task"),
    }


def dequantize_4bit(model, dtype) -> int:
    """Replace every bitsandbytes 4-bit linear layer by an ``nn.Linear`` with the dequantized weights."""
    import torch

    try:
        import bitsandbytes as bnb
    except ImportError:
        return 0
    n = 0
    for _, module in list(model.named_modules()):
        for cname, child in list(module.named_children()):
            if isinstance(child, bnb.nn.Linear4bit):
                w = bnb.functional.dequantize_4bit(child.weight.data, child.weight.quant_state).to(dtype)
                lin = torch.nn.Linear(
                    child.in_features, child.out_features, bias=child.bias is not None, dtype=dtype
                )
                with torch.no_grad():
                    lin.weight.copy_(w)
                    if child.bias is not None:
                        lin.bias.copy_(child.bias.data.to(dtype))
                setattr(module, cname, lin)
                n += 1
    return n


def load_base_as_trained(
    base_path: str,
    train_cfg: dict,
    *,
    attn_implementation: str = "sdpa",
    dequantize: bool = True,
    gpu: bool = False,
):
    """The base model as it was trained (4-bit when it was), in eval mode, for generation.
    On a CPU its 4-bit layers are dequantized (the same function, faster) unless told otherwise."""
    from transformers import AutoModelForCausalLM

    from train.config import TrainConfig
    from train.modeling import compute_dtype, disable_cpu_weight_repacking, quantization_config

    cfg = TrainConfig(**{k: v for k, v in train_cfg.items() if k != "tiny"})
    dtype = compute_dtype(cfg)
    kwargs: dict[str, Any] = dict(
        dtype=dtype,
        attn_implementation=attn_implementation,
        trust_remote_code=False,
        use_safetensors=True,
        revision=cfg.revision,
        device_map={"": 0} if gpu else "cpu",
    )
    if cfg.load_in_4bit:
        kwargs["quantization_config"] = quantization_config(cfg)
    model = AutoModelForCausalLM.from_pretrained(base_path, **kwargs)
    if cfg.load_in_4bit and not gpu:
        disable_cpu_weight_repacking(model)  # before any forward: repacked weights cannot be dequantized
        if dequantize:
            dequantize_4bit(model, dtype)
    model.config.use_cache = True
    model.eval()
    return model, dtype


def stop_token_ids(tokenizer, model) -> list[int]:
    """End-of-turn ids: the model's eos ids, the chat templates' end tokens, the tokenizer's eos."""
    gc = getattr(model, "generation_config", None)
    ids = gc.eos_token_id if gc is not None else None
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    for t in (*STOP_TOKENS, tokenizer.eos_token):
        if not t:
            continue
        tid = tokenizer.convert_tokens_to_ids(t)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid not in ids:
            ids.append(tid)
    return ids


def trained_on(ckpt: str | Path) -> Path | None:
    """The SFT build a checkpoint was trained on (``dataset.sft_dir`` of its manifest), so that an
    evaluation scores it on that build's held-out families; None when the checkpoint does not say."""
    try:
        recorded = read_checkpoint(ckpt).get("dataset", {}).get("sft_dir")
    except CheckpointError:
        return None
    return Path(recorded) if isinstance(recorded, str) and recorded else None
