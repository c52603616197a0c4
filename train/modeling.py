"""Model loading for QLoRA: tokenizer with the training chat template, a 4-bit base, the LoRA config.

The same path serves the embedded tiny default and a 12B model: bitsandbytes 4-bit (nf4, double
quantization), ``prepare_model_for_kbit_training``, LoRA on all linear layers. ``trust_remote_code`` is
always off and weights load as safetensors only.
"""

from __future__ import annotations

import logging
from pathlib import Path

from train.config import TrainConfig, resolve_repo_path

logger = logging.getLogger("ledgerwright.train")


class ModelError(ValueError):
    pass


def on_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def compute_dtype(cfg: TrainConfig):
    import torch

    if cfg.compute_dtype == "auto":
        return torch.bfloat16 if on_gpu() else torch.float32
    return getattr(torch, cfg.compute_dtype)


def resolve_attn_implementation(name: str) -> str:
    """``name`` if it can be used here; the blockwise kernel falls back to sdpa (with a warning)
    while ``train.attention`` does not register it, flash_attention_2 when flash-attn is missing."""
    if name.startswith("blockwise_fp32"):
        try:
            from transformers import AttentionInterface

            import train.attention  # noqa: F401 - registers the implementation on import

            if name in AttentionInterface._global_mapping:
                return name
            reason = "train.attention does not register it"
        except Exception as exc:  # the kernel package is optional until it lands
            reason = f"importing train.attention failed: {exc}"
        logger.warning("attn_implementation %s is not available (%s); using sdpa instead", name, reason)
        return "sdpa"
    if name.startswith("flash_attention"):
        import importlib.util

        if importlib.util.find_spec("flash_attn") is None:
            logger.warning("attn_implementation %s needs the flash-attn package; using sdpa instead", name)
            return "sdpa"
    return name


def load_tokenizer(model_path: str, cfg: TrainConfig):
    from transformers import AutoTokenizer
    from trl.chat_template_utils import has_generation_markers

    tok = AutoTokenizer.from_pretrained(model_path, revision=cfg.revision, trust_remote_code=False)
    if cfg.chat_template:
        path = resolve_repo_path(cfg.chat_template)
        if not path.is_file():
            raise ModelError(f"chat_template: {cfg.chat_template}: no such file")
        tok.chat_template = path.read_text(encoding="utf-8")
    if not tok.chat_template:
        raise ModelError(f"{model_path}: the tokenizer has no chat template; set chat_template in the preset")
    if cfg.assistant_only_loss and not has_generation_markers(tok.chat_template):
        raise ModelError(
            "assistant_only_loss needs a chat template with {% generation %} markers; "
            f"{cfg.chat_template or model_path} has none (use one under configs/chat_templates/)"
        )
    if tok.pad_token is None:
        for candidate in ("<pad>", "[PAD]", "<|pad|>"):
            if candidate in tok.get_vocab():
                tok.pad_token = candidate
                break
        else:
            tok.pad_token = tok.eos_token
    return tok


def quantization_config(cfg: TrainConfig, *, fsdp: bool = False):
    """nf4 + double quantization. Under FSDP the 4-bit weights are stored in the compute dtype unless
    the preset names a storage dtype: FSDP flattens the parameters of a unit into one tensor of one
    dtype, which uint8-stored weights next to bf16 norms would break."""
    import torch
    from transformers import BitsAndBytesConfig

    if cfg.bnb_4bit_quant_storage:
        storage = getattr(torch, cfg.bnb_4bit_quant_storage)
    elif fsdp:
        storage = compute_dtype(cfg)
        logger.info("FSDP: storing the 4-bit weights as %s so that parameters flatten", storage)
    else:
        storage = torch.uint8
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=cfg.bnb_4bit_quant_type,
        bnb_4bit_use_double_quant=cfg.bnb_4bit_use_double_quant,
        bnb_4bit_compute_dtype=compute_dtype(cfg),
        bnb_4bit_quant_storage=storage,
    )


def device_map(fsdp: bool):
    """Where the base loads: all of it on this process's device (DDP), none for FSDP."""
    if fsdp:
        return None
    if not on_gpu():
        return "cpu"
    from accelerate import PartialState

    return {"": PartialState().local_process_index}


def load_base_model(model_path: str, cfg: TrainConfig, *, fsdp: bool = False):
    """The base model, 4-bit when ``cfg.load_in_4bit``, prepared for k-bit training."""
    from transformers import AutoModelForCausalLM

    attn = resolve_attn_implementation(cfg.attn_implementation)
    kwargs = dict(
        dtype=compute_dtype(cfg),
        attn_implementation=attn,
        trust_remote_code=False,
        use_safetensors=True,
        revision=cfg.revision,
    )
    dm = device_map(fsdp)
    if dm is not None:
        kwargs["device_map"] = dm
    if cfg.load_in_4bit:
        kwargs["quantization_config"] = quantization_config(cfg, fsdp=fsdp)
    model = AutoModelForCausalLM.from_pretrained(model_path, **kwargs)
    model.config.use_cache = False
    if cfg.load_in_4bit:
        disable_cpu_weight_repacking(model)
    if cfg.load_in_4bit and not fsdp:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(
            model,
            use_gradient_checkpointing=cfg.gradient_checkpointing,
            gradient_checkpointing_kwargs={"use_reentrant": False},
        )
        keep_embeddings_in(model, compute_dtype(cfg))
    elif cfg.gradient_checkpointing:
        # FSDP flattens parameters of one dtype: prepare_model_for_kbit_training would upcast the
        # norms and embeddings to float32, so only what it does for checkpointing is done here.
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    if attn.startswith("blockwise_fp32"):
        from train.attention import set_precision

        set_precision(model, cfg.attention_precision)
    return model, attn


def keep_embeddings_in(model, dtype) -> int:
    """Cast the input embedding (and an untied, unquantized output embedding) back to ``dtype``.

    ``prepare_model_for_kbit_training`` upcasts every non-4-bit parameter to fp32, the (tied, ~1B
    parameter in Gemma 3 12B) embedding included: the residual stream, and with it q, k, v, then run in
    fp32 (2 GB more weights, twice the checkpointed activations, the attention kernel off tensor
    cores). Norms stay fp32 (they compute in fp32 and return their input's dtype). Returns the number of
    embedding matrices cast.
    """
    n = 0
    seen = set()
    for emb in (model.get_input_embeddings(), model.get_output_embeddings()):
        w = getattr(emb, "weight", None)
        if w is None or id(w) in seen or not w.is_floating_point() or w.dtype == dtype:
            continue
        seen.add(id(w))
        w.data = w.data.to(dtype)
        n += 1
    return n


def disable_cpu_weight_repacking(model) -> int:
    """Keep bitsandbytes from repacking 4-bit weights for its CPU inference kernel.

    On a CPU with AVX512-BF16, the first forward of a ``Linear4bit`` in eval mode without grad (an
    evaluation, a generation) converts its weight in place to a packed layout, and every later call,
    training included, then goes through ``gemv_4bit``, which has no autograd: gradients stop
    flowing through the frozen base layers (PyTorch only warns). Training, evaluation and reloading
    must compute the same function, so the repacking is turned off. Returns the modules changed.
    """
    import bitsandbytes as bnb

    n = 0
    for m in model.modules():
        if isinstance(m, bnb.nn.Linear4bit) and getattr(m, "support_avx512bf16_for_cpu", False):
            m.support_avx512bf16_for_cpu = False
            n += 1
    return n


def lora_config(cfg: TrainConfig):
    from peft import LoraConfig

    targets = cfg.lora_target_modules
    if targets != "all-linear":
        targets = [t.strip() for t in targets.split(",") if t.strip()]
    kwargs = {}
    if cfg.lora_exclude_modules:
        kwargs["exclude_modules"] = cfg.lora_exclude_modules
    return LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        bias="none",
        task_type="CAUSAL_LM",
        **kwargs,
    )


def load_trained(ckpt_dir: str | Path, *, base: str | None = None):
    """(model, tokenizer) of a checkpoint directory: its base loaded as it was trained (4-bit when it
    was), with the adapter on top, in eval mode. ``base`` overrides the recorded base model path."""
    import json

    import torch
    from peft import PeftModel
    from transformers import AutoTokenizer

    ckpt = Path(ckpt_dir)
    manifest = json.loads((ckpt / "manifest.json").read_text(encoding="utf-8"))
    cfg = TrainConfig(**{k: v for k, v in manifest["config"].items() if k != "tiny"})
    cfg.gradient_checkpointing = False
    base_path = base or manifest["base_model"]["path"]
    local = manifest["base_model"].get("local_copy")
    if base is None and local and (ckpt / local).is_dir() and not Path(base_path).exists():
        base_path = str(ckpt / local)  # the cache was cleared: the copy saved with the checkpoint
    model, _ = load_base_model(base_path, cfg)
    model = PeftModel.from_pretrained(model, str(ckpt), is_trainable=False)
    # The adapter was trained (and saved) in its training dtype; keep it rather than upcasting.
    adapter_dtype = getattr(torch, manifest.get("adapter_dtype", "float32"))
    for name, p in model.named_parameters():
        if "lora_" in name:
            p.data = p.data.to(adapter_dtype)
    model.eval()
    tok = AutoTokenizer.from_pretrained(str(ckpt), trust_remote_code=False)
    return model, tok
