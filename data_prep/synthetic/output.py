"""The corpus layout shared by synth and the importers: sharded canonical JSONL plus a manifest.

```
OUT/runs/runs-00000.jsonl ...        ledger-run/v1, canonical JSONL (data_prep.records.write_jsonl)
OUT/policy_cases/cases-00000.jsonl   policy-case/v1
OUT/rejects.jsonl                    importers only: {source, line, field, problem}
OUT/manifest.json                    canonical JSON: counts, config, sha256 of every file above
```
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from data_prep.manifest import write_manifest as seal_manifest
from data_prep.records import write_jsonl

RUN_DIR, CASE_DIR = "runs", "policy_cases"
MANIFEST, REJECTS = "manifest.json", "rejects.jsonl"


def shard_files(corpus: Path, sub: str, *, loose: bool = False) -> list[Path]:
    """The JSONL files of ``corpus/sub`` (``RUN_DIR`` or ``CASE_DIR``) in name order: how every reader
    finds a corpus's shards. With ``loose``, a directory without that folder gives its own top-level
    ``*.jsonl`` (a bare set of files, as users and other tools write them)."""
    if (corpus / sub).is_dir():
        return sorted((corpus / sub).glob("*.jsonl"))
    return sorted(corpus.glob("*.jsonl")) if loose else []


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def prepare_out_dir(out_dir: Path) -> None:
    """Create the layout; remove earlier shards, rejects and manifest so no stale file survives."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for sub, prefix in ((RUN_DIR, "runs-"), (CASE_DIR, "cases-")):
        d = out_dir / sub
        d.mkdir(exist_ok=True)
        for old in sorted(d.glob(f"{prefix}*.jsonl")):
            old.unlink()
    for name in (MANIFEST, REJECTS):
        if (out_dir / name).exists():
            (out_dir / name).unlink()


def _chunks(records: Iterable[dict], size: int) -> Iterator[list[dict]]:
    batch: list[dict] = []
    for rec in records:
        batch.append(rec)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def write_shards(
    out_dir: Path, sub: str, prefix: str, records: Iterable[dict], shard_size: int
) -> dict[str, dict]:
    """Write ``records`` as ``sub/prefix-NNNNN.jsonl`` shards; return ``{relpath: {sha256, bytes, records}}``."""
    files: dict[str, dict] = {}
    for n, batch in enumerate(_chunks(records, shard_size)):
        rel = f"{sub}/{prefix}-{n:05d}.jsonl"
        path = out_dir / rel
        count = write_jsonl(path, batch)
        files[rel] = {"sha256": file_sha256(path), "bytes": path.stat().st_size, "records": count}
    return files


def write_rejects(out_dir: Path, rejects: list[dict]) -> dict[str, dict]:
    path = out_dir / REJECTS
    count = write_jsonl(path, rejects)
    return {REJECTS: {"sha256": file_sha256(path), "bytes": path.stat().st_size, "records": count}}


def write_manifest(out_dir: Path, manifest: dict) -> None:
    """The stage's seal (``data_prep.manifest.write_manifest``: ``complete: true``, written atomically
    as the last file), in canonical JSON."""
    seal_manifest(out_dir, manifest, canonical=True)


def verify_manifest(out_dir: Path) -> list[str]:
    """Files whose sha256 differs from the manifest, or that are missing (empty list: all match).
    Consumers use ``data_prep.manifest.require_sealed``, which also refuses unsealed outputs."""
    import json

    manifest = json.loads((out_dir / MANIFEST).read_text())
    problems = []
    for rel, meta in manifest["files"].items():
        path = out_dir / rel
        if not path.exists():
            problems.append(f"{rel}: missing")
        elif file_sha256(path) != meta["sha256"]:
            problems.append(f"{rel}: sha256 mismatch")
    return problems
