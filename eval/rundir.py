"""The run directory of an evaluation, per-item records, and resume.

    <out>/
      manifest.json     code revision and dirty flag, versions, checkpoint digests, dataset fingerprint,
                        decoding and evaluation config, counts, sha256 of every output file
      items.jsonl       one line per item: id, input digest, raw outputs, parsed outputs, scores
      summary.json      every figure with its interval and denominator
      report.md         the tables, for a person
      *.png             plots

Resume: items are appended to ``items.jsonl`` a chunk at a time as they finish. A rerun with the same
arguments reads it, reuses every item whose input digest matches (the digest covers the item's inputs,
the models that answer, the decoding settings and the chunk size) and whose chunk was saved whole, and
computes the rest in the same fixed chunks (batch composition can change greedy outputs by rounding),
so it ends with the same results as an uninterrupted run. At the end ``items.jsonl`` is rewritten in item
order with exactly the current items.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from data_prep.canonical import dumps_canonical
from data_prep.manifest import code_revision, file_digests, sha256_file, versions

ITEMS = "items.jsonl"
EXTRA_PACKAGES = ("numpy", "matplotlib", "vllm")


def digest_of(value: Any) -> str:
    """sha256 of sorted-key JSON of ``value`` (prompts, records, configs)."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def jsonable(value: Any) -> Any:
    """Replace NaN and infinities (not JSON) by None, recursively."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def write_json(path: Path, data: Any) -> Path:
    path = Path(path)
    path.write_text(
        json.dumps(jsonable(data), indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return path


class RunDir:
    """An evaluation's output folder with resumable per-item records."""

    def __init__(self, path: str | Path, *, resume: bool = True):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.items_path = self.path / ITEMS
        self.done: dict[str, dict] = {}
        self.stale = 0
        self.unreadable = 0
        self.incomplete = 0
        if resume and self.items_path.is_file():
            self._load()
        elif self.items_path.exists():
            self.items_path.unlink()

    def _load(self) -> None:
        records: list[dict] = []
        with open(self.items_path, encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except ValueError:
                    self.unreadable += 1  # a line cut short by an interruption: recomputed
                    continue
                if (
                    isinstance(rec, dict)
                    and isinstance(rec.get("id"), str)
                    and isinstance(rec.get("input_digest"), str)
                ):
                    records.append(rec)
        # a chunk is reused only whole: its items were generated together, and a chunk cut short by an
        # interruption is generated again with the same composition
        sizes: dict[str, int] = {}
        for rec in records:
            key = (rec.get("chunk") or {}).get("key", rec["id"])
            sizes[key] = sizes.get(key, 0) + 1
        for rec in records:
            chunk = rec.get("chunk") or {"key": rec["id"], "size": 1}
            if sizes.get(chunk.get("key"), 0) >= chunk.get("size", 1):
                self.done[rec["id"]] = rec
            else:
                self.incomplete += 1

    def reusable(self, item_id: str, input_digest: str) -> dict | None:
        """The finished record of this item if its inputs are unchanged."""
        rec = self.done.get(item_id)
        if rec is not None and rec.get("input_digest") == input_digest:
            return rec
        if rec is not None:
            self.stale += 1
        return None

    def append(self, records: list[dict]) -> None:
        """Append the finished items of one chunk (tagged with the chunk's key and size) and flush."""
        if not records:
            return
        key = digest_of([r["id"] for r in records])
        for r in records:
            r["chunk"] = {"key": key, "size": len(records)}
        with open(self.items_path, "a", encoding="utf-8", newline="\n") as fh:
            fh.write("".join(dumps_canonical(jsonable(r)) + "\n" for r in records))
            fh.flush()
            os.fsync(fh.fileno())
        for r in records:
            self.done[r["id"]] = r

    def finalize_items(self, records: list[dict]) -> None:
        """Rewrite items.jsonl with exactly ``records`` in this order (atomic replace)."""
        tmp = self.items_path.with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            fh.write("".join(dumps_canonical(jsonable(r)) + "\n" for r in records))
        os.replace(tmp, self.items_path)

    def write_manifest(
        self,
        *,
        stage: str,
        config: dict,
        checkpoints: dict,
        dataset: dict,
        decoding: dict,
        counts: dict,
        extra: dict | None = None,
    ) -> Path:
        ver = versions()
        from importlib import metadata

        for name in EXTRA_PACKAGES:
            try:
                ver[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        manifest = {
            "stage": stage,
            "code": code_revision(),
            "versions": ver,
            "config": config,
            "config_digest": digest_of(config),
            "checkpoints": checkpoints,
            "dataset": dataset,
            "decoding": decoding,
            "counts": counts,
            **(extra or {}),
        }
        manifest["outputs"] = file_digests(self.path)
        return write_json(self.path / "manifest.json", manifest)


def file_digest(path: Path) -> str:
    return sha256_file(Path(path))
