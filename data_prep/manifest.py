"""Manifests: what produced an output, from what, and the digest of every file it wrote.

Every stage writes one next to its output. Host and user names are never recorded. A stage that
reads an earlier stage's output calls ``check_manifest`` first and refuses files whose digests
do not match.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from data_prep.canonical import digest

REPO_ROOT = Path(__file__).resolve().parents[1]
TRACKED_PACKAGES = (
    "torch",
    "transformers",
    "trl",
    "peft",
    "accelerate",
    "datasets",
    "bitsandbytes",
    "tokenizers",
    "safetensors",
    "rfc8785",
    "google-re2",
)


class ManifestError(ValueError):
    pass


def code_revision(root: Path = REPO_ROOT) -> dict:
    """Git commit and dirty flag of the code that ran (``unknown`` outside a checkout)."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        return {"revision": rev, "dirty": bool(status.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"revision": "unknown", "dirty": None}


def versions(packages: tuple[str, ...] = TRACKED_PACKAGES) -> dict:
    out = {"python": platform.python_version()}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return "sha256:" + h.hexdigest()


def file_digests(root: Path, *, exclude: tuple[str, ...] = ("manifest.json",)) -> dict[str, str]:
    """sha256 of every file under ``root`` (relative POSIX paths, sorted)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name not in exclude:
            out[p.relative_to(root).as_posix()] = sha256_file(p)
    return out


def config_hash(config: Any) -> str:
    return digest("config/v1", config)


def build_manifest(
    *,
    stage: str,
    config: Any,
    inputs: dict | None = None,
    outputs: dict | None = None,
    counts: dict | None = None,
    extra: dict | None = None,
) -> dict:
    """A manifest dict with provenance that does not change run to run except for code state.

    No timestamps: same inputs, config and code give the same manifest bytes.
    """
    return {
        "stage": stage,
        "code": code_revision(),
        "versions": versions(),
        "config": config,
        "config_hash": config_hash(config),
        "inputs": inputs or {},
        "outputs": outputs or {},
        "counts": counts or {},
        **(extra or {}),
    }


def write_manifest(out_dir: Path, manifest: dict) -> Path:
    path = Path(out_dir) / "manifest.json"
    path.write_text(
        json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return path


def check_manifest(out_dir: Path, key: str = "outputs") -> dict:
    """Load ``out_dir/manifest.json`` and verify the digests it lists; raise ManifestError if not.

    ``manifest[key]`` maps relative paths to ``sha256:<hex>`` or to objects with a ``sha256`` field."""
    path = Path(out_dir) / "manifest.json"
    if not path.is_file():
        raise ManifestError(f"{path}: missing manifest")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{path}: unreadable manifest: {exc}") from None
    files = manifest.get(key, {})
    if not isinstance(files, dict):
        raise ManifestError(f"{path}: {key}: expected an object of file digests")
    for rel, entry in sorted(files.items()):
        want = entry.get("sha256") if isinstance(entry, dict) else entry
        if not isinstance(want, str):
            raise ManifestError(f"{path}: {key}.{rel}: no sha256 digest")
        if not want.startswith("sha256:"):
            want = "sha256:" + want
        f = Path(out_dir) / rel
        if not f.is_file():
            raise ManifestError(f"{path}: {key}.{rel}: file is missing")
        got = sha256_file(f)
        if got != want:
            raise ManifestError(
                f"{path}: {key}.{rel}: digest mismatch (file changed after the manifest was written)"
            )
    return manifest
