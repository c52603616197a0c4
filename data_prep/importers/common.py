"""What every importer yields, and the driver that writes the corpus layout."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from data_prep.synth.corpus import MANIFEST_SCHEMA, CaseStats, RunStats
from data_prep.synth.output import (
    CASE_DIR,
    RUN_DIR,
    file_sha256,
    prepare_out_dir,
    write_manifest,
    write_rejects,
    write_shards,
)

IMPORTER_VERSION = "1.0.0"


@dataclass(frozen=True)
class Accepted:
    kind: str  # run | case
    record: dict
    source: str
    line: int
    gold_label: str | None = None


@dataclass(frozen=True)
class Rejected:
    source: str
    line: int
    field: str
    problem: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.field}: {self.problem}"

    def to_dict(self) -> dict:
        return {"source": self.source, "line": self.line, "field": self.field, "problem": self.problem}


Item = Accepted | Rejected


def expand_sources(sources: Iterable[str | Path], patterns: tuple[str, ...]) -> list[Path]:
    """Files as given; directories expand to their matching files, sorted by name; a file named twice
    (directly or through its directory) is read once, where it first appears."""
    out: list[Path] = []
    for s in sources:
        p = Path(s)
        if p.is_dir():
            found = sorted({f for pat in patterns for f in p.glob(pat)})
            out.extend(found)
        else:
            out.append(p)
    return list(dict.fromkeys(out))


def run_import(
    fmt: str,
    items: Iterator[Item],
    sources: list[Path],
    out_dir: Path,
    *,
    shard_size: int = 1000,
    progress: bool = False,
    echo_rejects: int = 50,
) -> dict:
    """Stream importer items into the corpus layout; return the manifest."""
    out_dir = Path(out_dir)
    prepare_out_dir(out_dir)
    runs, cases = RunStats(), CaseStats()
    rejects: list[Rejected] = []
    pending_cases: list[dict] = []
    extra = {"label_mismatch": 0, "runs_with_import_findings": 0}
    per_source = {str(p): {"accepted": 0, "rejected": 0} for p in sources}
    bar = tqdm(desc=f"import {fmt}", unit="rec", disable=not progress, leave=False)

    def run_stream() -> Iterator[dict]:
        for item in items:
            bar.update(1)
            tally = per_source.setdefault(item.source, {"accepted": 0, "rejected": 0})
            tally["rejected" if isinstance(item, Rejected) else "accepted"] += 1
            if isinstance(item, Rejected):
                if len(rejects) < echo_rejects:
                    print(item, file=sys.stderr)
                rejects.append(item)
            elif item.kind == "run":
                prov = item.record.get("provenance") or {}
                if prov.get("label_mismatch"):
                    extra["label_mismatch"] += 1
                if prov.get("import_findings"):
                    extra["runs_with_import_findings"] += 1
                yield runs.add(item.record, item.gold_label)
            else:
                pending_cases.append(cases.add(item.record))

    files = write_shards(out_dir, RUN_DIR, "runs", run_stream(), shard_size)
    files.update(write_shards(out_dir, CASE_DIR, "cases", pending_cases, shard_size))
    files.update(write_rejects(out_dir, [r.to_dict() for r in rejects]))
    bar.close()
    if len(rejects) > echo_rejects:
        print(
            f"... {len(rejects) - echo_rejects} more rejects in {out_dir / 'rejects.jsonl'}", file=sys.stderr
        )
    counts = {
        "input_records": runs.n + cases.n + len(rejects),
        "accepted": runs.n + cases.n,
        "rejected": len(rejects),
        **extra,
        **runs.to_dict(),
        **cases.to_dict(),
    }
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "stage": "import",
        "importer": {"format": fmt, "version": IMPORTER_VERSION},
        "sources": [
            {
                "name": p.name,
                "sha256": file_sha256(p) if p.is_file() else None,
                "bytes": p.stat().st_size if p.is_file() else None,
                **per_source[str(p)],
            }
            for p in sources
        ],
        "counts": counts,
        "files": dict(sorted(files.items())),
    }
    write_manifest(out_dir, manifest)
    return manifest
