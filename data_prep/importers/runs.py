"""The project's own ``ledger-run/v1`` JSONL: re-validated with the Foundation loaders, chains re-verified.

A run that does not load or whose environment ledger fails verification is rejected with its field and
problem; duplicate run ids are rejected. Accepted runs are written unchanged (canonical JSONL); a run
whose gold verdict differs from ``expected_label(labels)`` is kept and counted as ``label_mismatch``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from data_prep.importers.common import Accepted, Item, Rejected
from data_prep.integrity import verify_run
from data_prep.reconcile import expected_label, reconcile
from data_prep.records import LineError, Run, iter_records


def iter_items(paths: list[Path]) -> Iterator[Item]:
    seen: dict[str, str] = {}
    for path in paths:
        for lineno, loaded in iter_records(path, Run.with_dict):
            if isinstance(loaded, LineError):
                yield Rejected.of(loaded)
                continue
            value, run = loaded
            try:
                problem = verify_run(run)
                gold = reconcile(run, check_integrity=False).verdict.label
            except Exception as exc:  # quarantine, never a traceback; the reason names the failure
                yield Rejected(str(path), lineno, "$", f"cannot verify: {type(exc).__name__}: {exc}")
                continue
            if problem is not None:
                yield Rejected(str(path), lineno, problem.field, f"{problem.kind}: {problem.detail}")
                continue
            if run.run_id in seen:
                yield Rejected(str(path), lineno, "$.run_id", f"duplicate of {seen[run.run_id]}")
                continue
            seen[run.run_id] = f"{path}:{lineno}"
            if gold != expected_label(run.labels):
                prov = dict(value.get("provenance") or {})
                prov["label_mismatch"] = True
                value = dict(value, provenance=prov)
            yield Accepted("run", value, str(path), lineno, gold)
