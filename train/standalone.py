"""A checkpoint as a standalone model: the LoRA adapter merged into its base, saved as a plain Hugging
Face model folder that transformers, vLLM or any OpenAI-compatible server loads without this project,
and optionally uploaded to the Hugging Face Hub (``train/export.py`` is the command).

The base is loaded exactly as the adapter was trained (``train.checkpoint.load_base_as_trained``): a
base trained in 4 bits is quantized to nf4 and dequantized again (the round trip the adapter saw), so
the merged weights reproduce the adapter-on-4-bit model, not the unquantized base. The folder holds
``model.safetensors``, ``config.json`` (no quantization config), ``generation_config.json`` (stop ids
including the chat template's end-of-turn token), the checkpoint's tokenizer and chat template
(``chat_template.jinja``), a model card (``README.md``; ``base_model`` is the hub id when the base was
one) and ``manifest.json``: what it came from (checkpoint digest, base, train manifest digest, held-out
data fingerprints), with relative paths only. The output is staged and moved into place when complete.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import train.checkpoint as checkpoint
from train.checkpoint import CheckpointError
from train.manifest import file_digests, sha256_file

EXPORT_VERSION = "ledgerwright-export/1"
TEXT_FILES = ("chat_template.jinja",)


class PushError(RuntimeError):
    """The hub upload cannot start or failed (package missing, not logged in, offline, refused)."""


def hub_id(name: str | None) -> str | None:
    """``name`` when it reads as a hub id (``org/model``), else None (a local folder, the tiny default)."""
    if not name or name.startswith((".", "/", "~")) or name.count("/") != 1 or Path(name).exists():
        return None
    return name


def model_card(manifest: dict, export: dict, *, repo_id: str | None = None) -> str:
    """README.md with hub metadata; the usage snippet names ``repo_id`` when the model is pushed there."""
    hub = export["base_model"]["hub_id"]
    front = ["---", "library_name: transformers", "pipeline_tag: text-generation", "tags:", "- ledgerwright"]
    if hub:
        front += [f"base_model: {hub}", "base_model_relation: finetune"]
    front.append("---")
    role = manifest.get("role") or "model"
    where = repo_id or "PATH"
    base = hub or "a local base: " + str(export["base_model"]["name"])
    nf4 = ", dequantized from nf4 as trained" if export["base_model"]["nf4_round_trip"] else ""
    lines = [
        *front,
        "",
        f"# ledgerwright {role} ({manifest.get('task')})",
        "",
        f"A LoRA {role} merged into its base ({base}{nf4}).",
        "Load it on its own:",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        f'model = AutoModelForCausalLM.from_pretrained("{where}")',
        f'tokenizer = AutoTokenizer.from_pretrained("{where}")',
        "```",
        "",
        f"or serve it: `vllm serve {where}` (an OpenAI-compatible endpoint). `manifest.json` records the",
        "checkpoint, base, training data fingerprints and held-out families it came from.",
        "",
    ]
    return "\n".join(lines)


def merged_model(adapter: Path, manifest: dict, base_path: str):
    """(model, dtype): the adapter merged into its base as trained, with no quantization left."""
    from peft import PeftModel

    model, dtype = checkpoint.load_base_as_trained(
        base_path, manifest["config"], attn_implementation="sdpa", dequantize=True, gpu=False
    )
    if any("Linear4bit" in type(m).__name__ for m in model.modules()):
        raise CheckpointError(f"{adapter}: 4-bit layers left after dequantization (bitsandbytes too old?)")
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
    return model, dtype


def _base_name(name: str | None) -> str | None:
    """A hub id as it is; a local base by its folder name only (a full path would name this machine)."""
    return name if not name or hub_id(name) else Path(name).name


def export_info(adapter: Path, manifest: dict, *, dtype, stops: list[int]) -> dict:
    """What the export came from, with names and digests only (never a machine path)."""
    digest = checkpoint.checkpoint_digest(adapter)
    bm = manifest["base_model"]
    return {
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
            "name": _base_name(bm.get("name")),
            "hub_id": hub_id(bm.get("name")) or hub_id(bm.get("path")),
            "revision": bm.get("revision"),
            "files": digest["base"].get("files"),
            "nf4_round_trip": bool(manifest["config"].get("load_in_4bit")),
        },
        "dtype": str(dtype).replace("torch.", ""),
        "dataset": {
            k: v for k, v in (manifest.get("dataset") or {}).items() if k in ("fingerprints", "digest")
        },
        "stop_token_ids": stops,
    }


def export(
    adapter: Path,
    out: Path,
    *,
    base: str | None = None,
    overwrite: bool = False,
    repo_id: str | None = None,
) -> Path:
    """Merge ``adapter`` into its base and write the standalone model to ``out``; returns ``out``.
    ``repo_id``: the hub repository the model card's usage snippet names."""
    import torch
    from transformers import AutoTokenizer

    from data_prep.manifest import build_manifest, staged_output, write_manifest

    adapter = Path(adapter)
    manifest = checkpoint.read_checkpoint(adapter)
    base_path = checkpoint.base_model_path(adapter, manifest, base)
    tokenizer = AutoTokenizer.from_pretrained(str(adapter), trust_remote_code=False)
    if not tokenizer.chat_template:
        raise CheckpointError(f"{adapter}: the checkpoint's tokenizer has no chat template")
    model, dtype = merged_model(adapter, manifest, base_path)
    stops = checkpoint.stop_token_ids(tokenizer, model)
    model.generation_config.eos_token_id = stops if len(stops) > 1 else stops[0]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    info = export_info(adapter, manifest, dtype=dtype, stops=stops)
    with staged_output(Path(out), replace=overwrite) as staged:
        with torch.no_grad():
            model.save_pretrained(str(staged), safe_serialization=True)
        tokenizer.save_pretrained(str(staged))
        for name in TEXT_FILES:
            if (adapter / name).is_file() and not (staged / name).is_file():
                shutil.copyfile(adapter / name, staged / name)
        (staged / "README.md").write_text(model_card(manifest, info, repo_id=repo_id), encoding="utf-8")
        m = build_manifest(
            stage="export",
            config={"adapter": adapter.resolve().name, "base_override": bool(base)},
            inputs={"checkpoint": info["checkpoint"]["digest"]},
            outputs=file_digests(staged),
            counts={"parameters": sum(p.numel() for p in model.parameters())},
            extra={"export": info},
        )
        write_manifest(staged, m)
    return Path(out)


# ---- the hub -----------------------------------------------------------------------------------------
def upload_files(folder: Path, token: str) -> list[str]:
    """The relative paths of a complete export (its manifest's outputs and the manifest itself), after
    checking that no file holds the hub token: only what the export wrote leaves the machine."""
    folder = Path(folder)
    try:
        man = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PushError(f"{folder}: not an export folder (manifest.json: {exc})") from None
    if man.get("stage") != "export" or not man.get("complete"):
        raise PushError(f"{folder}: manifest.json is not a complete export")
    files = sorted({*man.get("outputs", {}), "manifest.json"})
    secret = token.encode("utf-8")
    for name in files:
        path = folder / name
        if not path.is_file():
            raise PushError(f"{path}: listed in manifest.json but missing")
        if secret and secret in path.read_bytes():
            raise PushError(f"{path}: holds the hub token; refusing to upload it")
    return files


def hub_login():
    """huggingface_hub and the saved token, or a PushError saying what to do."""
    try:
        import huggingface_hub
    except ImportError:
        raise PushError(
            "--push-to-hub needs the huggingface_hub package: pip install huggingface_hub"
        ) from None
    if huggingface_hub.constants.HF_HUB_OFFLINE:
        raise PushError("--push-to-hub: HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set; unset it to upload")
    token = huggingface_hub.get_token()
    if not token:
        raise PushError(
            "--push-to-hub: not logged in to the Hugging Face Hub (run `hf auth login` or set HF_TOKEN)"
        )
    return huggingface_hub, token


def push_to_hub(folder: Path, repo_id: str, *, private: bool = False) -> str:
    """Create the model repository (when new) and upload the export folder; returns the repo URL."""
    hf, token = hub_login()
    files = upload_files(folder, token)
    api = hf.HfApi(token=token)
    try:
        url = api.create_repo(repo_id, private=private, repo_type="model", exist_ok=True)
        api.upload_folder(
            repo_id=repo_id,
            repo_type="model",
            folder_path=str(folder),
            allow_patterns=files,
            commit_message="Upload a ledgerwright export",
        )
    except Exception as exc:  # noqa: BLE001 - network and hub refusals alike become one clear message
        raise PushError(f"--push-to-hub {repo_id}: upload failed: {type(exc).__name__}: {exc}") from None
    return str(url)
