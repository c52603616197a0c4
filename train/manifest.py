"""Manifest helpers shared by the writer and reader recipes.

Same shape as the data-prep manifests (``code``, ``versions``, ``outputs`` with ``sha256:`` digests of
every file), so one checker verifies both. No host or user names are recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from train.config import REPO_ROOT

PACKAGES = (
    "torch",
    "transformers",
    "trl",
    "peft",
    "accelerate",
    "datasets",
    "bitsandbytes",
    "tokenizers",
    "safetensors",
)


def code_revision(root: Path = REPO_ROOT) -> dict:
    """``{"revision": <git HEAD>, "dirty": bool}``; ``unknown``/``None`` outside a git checkout."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=True
        ).stdout

    try:
        rev = git("rev-parse", "HEAD").strip()
    except (OSError, subprocess.SubprocessError):
        rev = "unknown"
    try:
        dirty = bool(git("status", "--porcelain", "--untracked-files=no").strip())
    except (OSError, subprocess.SubprocessError):
        dirty = None
    return {"revision": rev, "dirty": dirty}


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def hardware(world_size: int) -> dict:
    """Device kind and counts; no host names."""
    import torch

    info = {
        "platform": platform.system(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "world_size": world_size,
        "accelerator": "cuda" if torch.cuda.is_available() else "cpu",
    }
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    return info


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return "sha256:" + h.hexdigest()


def file_digests(
    root: Path, *, exclude_dirs: tuple[str, ...] = (), exclude: tuple[str, ...] = ("manifest.json",)
):
    """sha256 of every file under ``root`` (relative POSIX paths, sorted), skipping ``exclude_dirs``
    (glob patterns of top-level folders, e.g. intermediate ``checkpoint-*``)."""
    root = Path(root)
    skipped = {p for pattern in exclude_dirs for p in root.glob(pattern) if p.is_dir()}
    out = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.name in exclude:
            continue
        if any(s in p.parents for s in skipped):
            continue
        out[p.relative_to(root).as_posix()] = sha256_file(p)
    return out


def write_json(path: Path, data: dict) -> Path:
    path = Path(path)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
