"""What a checkpoint manifest records beyond a data-prep manifest: the hardware it trained on.

The code revision, package versions and file digests come from ``data_prep.manifest`` (the one
manifest module), so a build and a checkpoint are described alike and one checker verifies both. No
host or user names are recorded.
"""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

from data_prep.manifest import code_revision, file_digests, sha256_file, versions

__all__ = ["code_revision", "file_digests", "hardware", "sha256_file", "versions", "write_json"]


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


def write_json(path: Path, data: dict) -> Path:
    """Indented, key-sorted JSON (the checkpoint's manifest and log): readable and diffable."""
    path = Path(path)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
