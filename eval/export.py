"""Export a checkpoint as a standalone model: the LoRA adapter merged into its base, saved as a plain
Hugging Face model directory that vLLM, transformers or any OpenAI-compatible server loads alone.

    python eval/export.py --adapter ckpt/ --out DIR [--base-model PATH] [--overwrite]

The base is loaded exactly as the adapter was trained and evaluated (``load_base_for_inference``): a
base trained in 4 bits is quantized to nf4 and dequantized again (the round trip the adapter saw), so
the merged weights reproduce the adapter-on-4-bit model, not the unquantized base. The folder holds
``model.safetensors``, ``config.json`` (no quantization config), ``generation_config.json`` (stop ids
including the chat template's end-of-turn token), the checkpoint's tokenizer and chat template
(``chat_template.jinja``), a model card (``README.md``; ``base_model`` is the hub id when the base was
one) and ``manifest.json``: what it came from (checkpoint digest, base, train manifest digest, held-out
data fingerprints), with relative paths only. The output is staged and moved into place when complete.
Exit 0 on success, 2 on bad input.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

EXPORT_VERSION = "ledgerwright-export/1"
TEXT_FILES = ("chat_template.jinja",)


def _hub_id(name: str | None) -> str | None:
    """``name`` when it reads as a hub id (``org/model``), else None (a local folder, the tiny default)."""
    if not name or name.startswith((".", "/", "~")) or name.count("/") != 1 or Path(name).exists():
        return None
    return name


def model_card(manifest: dict, export: dict) -> str:
    hub = export["base_model"]["hub_id"]
    front = ["---", "library_name: transformers", "pipeline_tag: text-generation", "tags:", "- ledgerwright"]
    if hub:
        front += [f"base_model: {hub}", "base_model_relation: finetune"]
    front.append("---")
    role = manifest.get("role") or "model"
    lines = [
        *front,
        "",
        f"# ledgerwright {role} ({manifest.get('task')})",
        "",
        f"A LoRA {role} merged into its base ({hub or 'a local base: ' + str(export['base_model']['name'])}"
        f"{', dequantized from nf4 as trained' if export['base_model']['nf4_round_trip'] else ''}).",
        "Load it on its own:",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        'model = AutoModelForCausalLM.from_pretrained("PATH")',
        'tokenizer = AutoTokenizer.from_pretrained("PATH")',
        "```",
        "",
        "or serve it: `vllm serve PATH` (an OpenAI-compatible endpoint). `manifest.json` records the",
        "checkpoint, base, training data fingerprints and held-out families it came from.",
        "",
    ]
    return "\n".join(lines)


def export(adapter: Path, out: Path, *, base: str | None = None, overwrite: bool = False) -> Path:
    """Merge ``adapter`` into its base and write the standalone model to ``out``; returns ``out``."""
    import torch
    from peft import PeftModel
    from transformers import AutoTokenizer

    from data_prep.manifest import build_manifest, staged_output, write_manifest
    from eval.chat_model import stop_token_ids
    from eval.generation import (
        BackendError,
        DecodingConfig,
        base_model_path,
        checkpoint_digest,
        load_base_for_inference,
        read_checkpoint,
    )
    from train.manifest import file_digests, sha256_file

    adapter = Path(adapter)
    manifest = read_checkpoint(adapter)
    base_path = base_model_path(adapter, manifest, base)
    decoding = DecodingConfig(dequantize_on_cpu=True, threads=None)
    tokenizer = AutoTokenizer.from_pretrained(str(adapter), trust_remote_code=False)
    if not tokenizer.chat_template:
        raise BackendError(f"{adapter}: the checkpoint's tokenizer has no chat template")
    model, dtype = load_base_for_inference(base_path, manifest["config"], decoding, gpu=False)
    nf4 = bool(manifest["config"].get("load_in_4bit"))
    if any("Linear4bit" in type(m).__name__ for m in model.modules()):
        raise BackendError(f"{adapter}: 4-bit layers left after dequantization (bitsandbytes too old?)")
    model = PeftModel.from_pretrained(model, str(adapter), is_trainable=False)
    for name, p in model.named_parameters():
        if "lora_" in name:
            p.data = p.data.to(dtype)
    model = model.merge_and_unload()
    for attr in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(model.config, attr):
            delattr(model.config, attr)
    model.is_quantized = False
    model.hf_quantizer = None
    stops = stop_token_ids(tokenizer, model)
    model.generation_config.eos_token_id = stops if len(stops) > 1 else stops[0]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    digest = checkpoint_digest(adapter)
    bm = manifest["base_model"]
    info = {
        "version": EXPORT_VERSION,
        "checkpoint": {
            "name": adapter.resolve().name,
            "digest": digest["digest"],
            "files": digest["files"],
            "train_manifest_sha256": sha256_file(adapter / "manifest.json"),
            "role": manifest.get("role"),
            "task": manifest.get("task"),
        },
        "base_model": {
            "name": bm.get("name"),
            "hub_id": _hub_id(bm.get("name")) or _hub_id(bm.get("path")),
            "revision": bm.get("revision"),
            "files": digest["base"].get("files"),
            "nf4_round_trip": nf4,
        },
        "dtype": str(dtype).replace("torch.", ""),
        "dataset": {
            k: v for k, v in (manifest.get("dataset") or {}).items() if k in ("fingerprints", "digest")
        },
        "stop_token_ids": stops,
    }
    with staged_output(Path(out), replace=overwrite) as staged:
        with torch.no_grad():
            model.save_pretrained(str(staged), safe_serialization=True)
        tokenizer.save_pretrained(str(staged))
        for name in TEXT_FILES:
            if (adapter / name).is_file() and not (staged / name).is_file():
                shutil.copyfile(adapter / name, staged / name)
        (staged / "README.md").write_text(model_card(manifest, info), encoding="utf-8")
        outputs = file_digests(staged)
        m = build_manifest(
            stage="export",
            config={"adapter": adapter.resolve().name, "base_override": bool(base)},
            inputs={"checkpoint": digest["digest"]},
            outputs=outputs,
            counts={"parameters": sum(p.numel() for p in model.parameters())},
            extra={"export": info},
        )
        write_manifest(staged, m)
    return Path(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="eval/export.py", description=__doc__.split("\n")[0])
    ap.add_argument(
        "--adapter", required=True, type=Path, help="checkpoint directory (train/writer.py, reader.py)"
    )
    ap.add_argument("--out", required=True, type=Path, help="output model directory")
    ap.add_argument("--base-model", help="override the base model path recorded in the checkpoint")
    ap.add_argument(
        "--overwrite", action="store_true", help="replace a non-empty --out once the new one is complete"
    )
    ns = ap.parse_args(argv)
    from eval.cli import setup

    setup()
    from data_prep.manifest import ManifestError
    from eval.generation import BackendError

    try:
        out = export(ns.adapter, ns.out, base=ns.base_model, overwrite=ns.overwrite)
    except (BackendError, ManifestError, OSError, ValueError) as exc:
        print(f"eval/export.py: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"export: wrote {out} (model.safetensors, config.json, tokenizer, chat template, README.md, manifest.json)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
