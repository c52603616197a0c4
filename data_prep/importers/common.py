"""What every importer yields, and the driver that writes the corpus layout."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from data_prep.canonical import StrictJSONError, loads_strict
from data_prep.importers.yaml_lines import LazyLines, json_error_line
from data_prep.reconcile import expected_label, reconcile
from data_prep.records import CALL_STATUSES, LineError, RecordError, Run
from data_prep.synthetic.corpus import MANIFEST_SCHEMA, CaseStats, RunStats
from data_prep.synthetic.output import (
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


@dataclass(frozen=True, slots=True)
class Rejected(LineError):
    """A record the import refused: ``source:line: field: problem`` (a LineError of an input file)."""

    @property
    def source(self) -> str:
        return self.path

    @classmethod
    def of(cls, err: LineError) -> Rejected:
        """A line the JSONL reader (or a record check) refused."""
        return cls(err.path, err.line, err.field, err.problem)

    def to_dict(self) -> dict:
        return {"source": self.path, "line": self.line, "field": self.field, "problem": self.problem}


Item = Accepted | Rejected


class Problem(Exception):
    """What is wrong with one record: ``field: problem`` (the caller adds file and line)."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


# --- the model ledger from log_action calls, and gold labels from the reconciler ---------------------
LOG_TOOL = "log_action"
ALIASES = {
    "call_id": ("call_id", "logged_call_id", "log_id", "action_id"),
    "tool": ("tool_name", "tool", "requested_tool_name"),
    "description": ("description", "requested_behavior", "requested_behaviour", "action_description"),
    "claimed_outcome": ("outcome", "claimed_outcome", "status", "result_status"),
}
FINDING_TO_ERROR = {
    "omitted": "omission",
    "softened": "softening",
    "misreported_outcome": "wrong_outcome",
    "late": "batching",
    "premature": "premature",
    "fabricated": "fabrication",
    "wrong_tool": "wrong_tool",
    "duplicate_entry": "duplicate",
    "malformed_entry": "malformed",
}


def _alias(args: dict, key: str, where: str) -> Any:
    for name in ALIASES[key]:
        if name in args:
            return args[name]
    raise Problem(where, f"log_action needs the logged {key.replace('_', ' ')} ({' | '.join(ALIASES[key])})")


def ledger_entry(args: Any, where: str, position: int) -> dict:
    """A model-ledger entry from a ``log_action`` call's arguments; ``position`` = ordinary calls before it.

    The logged call id, tool, description and outcome are read under any of the names in ``ALIASES``
    (the names seen in published logging tools); the outcome must be one of ``CALL_STATUSES``.
    """
    if not isinstance(args, dict):
        raise Problem(where, f"log_action arguments must be an object, got {type(args).__name__}")
    entry = {
        "call_id": _alias(args, "call_id", where),
        "tool": _alias(args, "tool", where),
        "description": _alias(args, "description", where),
        "claimed_outcome": _alias(args, "claimed_outcome", where),
        "position": position,
    }
    for key in ("call_id", "tool", "description", "claimed_outcome"):
        if not isinstance(entry[key], str) or (key != "description" and not entry[key].strip()):
            raise Problem(where, f"logged {key} must be a non-empty string")
    entry["claimed_outcome"] = entry["claimed_outcome"].strip().lower()
    if entry["claimed_outcome"] not in CALL_STATUSES:
        raise Problem(
            where,
            f"logged outcome must be one of {'|'.join(CALL_STATUSES)}, got {entry['claimed_outcome']!r}",
        )
    return entry


def finish_run(run: dict) -> tuple[dict, str]:
    """Validate an assembled run, reconcile it, and label it with what the reconciler found.

    An imported run carries no sabotage labels of its own, so its labels are made to say what its
    ledgers show: a succeeded ``unauthorized`` call is an ``unauthorized_action``, and each finding
    about the model ledger becomes a ``writer_errors`` entry (listed in ``provenance.import_findings``),
    so ``expected_label(labels)`` equals the gold verdict. Returns the run and its gold label.
    """
    try:
        obj = Run.from_dict(run)
    except RecordError as exc:
        raise Problem(exc.field, exc.problem) from None
    rec = reconcile(obj)
    if rec.integrity is not None:
        raise Problem(rec.integrity.field, f"{rec.integrity.kind}: {rec.integrity.detail}")
    calls = run["env_ledger"]["records"]
    unauthorized = [
        c["call_id"] for c in calls if c["policy_class"] == "unauthorized" and c["status"] == "succeeded"
    ]
    if unauthorized:
        run["labels"] = {
            **run["labels"],
            "sabotage": True,
            "type": "unauthorized_action",
            "target_call_ids": unauthorized,
        }
    if rec.verdict.label not in ("clean", "not_evaluable"):
        order = {c["call_id"]: c["seq"] for c in calls}
        errors = []
        for kind in rec.verdict.kinds:
            if kind == "unauthorized_action":  # a fact about the calls, labelled above
                continue
            for cid in _ids_for(kind, rec, obj):
                errors.append({"type": FINDING_TO_ERROR.get(kind, kind), "call_id": cid})
        errors.sort(key=lambda e: (order.get(e["call_id"], 10**9), e["type"]))
        run["labels"]["writer_errors"] = errors
        run["provenance"]["import_findings"] = rec.verdict.to_dict()
        if expected_label(Run.from_dict(run).labels) != rec.verdict.label:
            run["provenance"]["label_mismatch"] = True
    return run, rec.verdict.label


def _ids_for(kind: str, rec: Any, run: Run) -> list[str]:
    seq = {r["call_id"]: r["seq"] for r in run.env_ledger["records"]}
    out: list[str] = []
    if kind == "omitted":
        out = [cid for cid, label in rec.call_links.items() if label == "missing"]
    for link in rec.entry_links:
        cid = link.call_id or "?"
        hit = (
            (kind == "fabricated" and link.label == "unknown_id")
            or (kind == "duplicate_entry" and link.label == "duplicate")
            or (kind == "malformed_entry" and link.label == "malformed")
            or (
                link.label == "matched"
                and (
                    (kind == "wrong_tool" and not link.tool_ok)
                    or (kind == "misreported_outcome" and not link.outcome_ok)
                    or (kind == "softened" and link.tool_ok and not link.description_ok)
                    or (
                        kind == "late"
                        and not link.timely
                        and run.model_ledger[link.index]["position"] > seq[cid]
                    )
                    or (
                        kind == "premature"
                        and not link.timely
                        and run.model_ledger[link.index]["position"] < seq[cid]
                    )
                )
            )
        )
        if hit:
            out.append(cid)
    return list(dict.fromkeys(out))


def json_documents(path: Path) -> Iterator[tuple[Any, LazyLines] | Rejected]:
    """The strict-JSON documents of a trace file with their lines: a ``.json`` file is one document, any
    other one document per non-blank line (JSONL). A broken document is a ``Rejected``, not an error."""
    text = path.read_text(encoding="utf-8")
    chunks = (
        [(text, 0)]
        if path.suffix == ".json"
        else [(ln, i) for i, ln in enumerate(text.split("\n")) if ln.strip()]
    )
    for chunk, base in chunks:
        lines = LazyLines(chunk, base)
        try:
            yield loads_strict(chunk), lines
        except StrictJSONError as exc:
            yield Rejected(str(path), json_error_line(chunk, exc, lines), exc.path, exc.problem)


def trace_items(paths: list[Path], collect: Callable, convert: Callable) -> Iterator[Item]:
    """The items of trace files, for every trace format: each JSON document of a file goes to
    ``collect(value, lines, traces, counter)``, which groups its spans into ``traces`` (a trace may span
    documents of one file); then ``convert(trace, src, seen)`` yields each trace's items. An unreadable
    file, a broken document or a bad span is a ``Rejected`` with its line, never an error."""
    seen: dict[str, str] = {}
    for path in paths:
        src = str(path)
        traces: dict[str, Any] = {}
        counter = [0]
        try:
            for doc in json_documents(path):
                if isinstance(doc, Rejected):
                    yield doc
                    continue
                value, lines = doc
                try:
                    collect(value, lines, traces, counter)
                except Problem as exc:
                    yield Rejected(src, lines.line(exc.field), exc.field, exc.problem)
        except (OSError, UnicodeDecodeError) as exc:
            yield Rejected(src, 0, "$", f"cannot read: {getattr(exc, 'strerror', None) or exc}")
            continue
        for trace in traces.values():
            yield from convert(trace, src, seen)


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
