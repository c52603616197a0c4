"""Verify run files: schema, chains, trajectory bijection, run seals; print per-run verdicts and totals.

    python data_prep/verify.py FILE.jsonl [FILE.jsonl ...] [--quiet] [--json]
                               [--public-key KEY.pub.pem] [--allow-unsealed]

A run must carry a run seal that matches its content (everything but the seal: task, tools, trajectory
with results, ledger head, model ledger, labels, teacher, provenance, metadata); --allow-unsealed
accepts legacy runs without one.
With --public-key every run must also carry a valid Ed25519 signature of its seal by that key: the
only check that fails a record someone rewrote and re-sealed whole. Exit 0 when every run in every
file is valid, 1 otherwise (2 on a bad option or key). Bad records are reported as
``file:line: field: problem``; only regular files are read, and nothing in the input can make it crash
or hang.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from data_prep.integrity import check_seal
from data_prep.reconcile import reconcile
from data_prep.records import LineError, iter_runs
from data_prep.signing import SigningKeyError, load_public_key
from data_prep.yaml_config import strict_parser


def main(argv: list[str] | None = None) -> int:
    ap = strict_parser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="run JSONL files (ledger-run/v1)")
    ap.add_argument("--quiet", action="store_true", help="print only problems and totals")
    ap.add_argument("--json", action="store_true", help="print totals as one JSON object at the end")
    ap.add_argument("--public-key", type=Path, help="Ed25519 public key (PEM or hex): require signed seals")
    ap.add_argument("--allow-unsealed", action="store_true", help="accept runs without a run seal")
    args = ap.parse_args(argv)
    public_key = None
    if args.public_key is not None:
        try:
            public_key = load_public_key(args.public_key)
        except SigningKeyError as exc:
            print(f"verify: error: {exc}", file=sys.stderr)
            return 2
    totals: Counter[str] = Counter()
    verdicts: Counter[str] = Counter()
    seen: dict[str, str] = {}
    empty = 0
    for path in args.files:
        before = totals["records"]
        for lineno, item in iter_runs(path):
            totals["records"] += 1
            if isinstance(item, LineError):
                totals["invalid"] += 1
                print(item, file=sys.stderr)
                continue
            where = f"{path}:{lineno}"
            if item.run_id in seen:
                totals["invalid"] += 1
                print(f"{where}: run_id: duplicate of {seen[item.run_id]}", file=sys.stderr)
                continue
            seen[item.run_id] = where
            sealed = check_seal(item, required=not args.allow_unsealed, public_key=public_key)
            rec = reconcile(item)
            problem = rec.integrity or sealed
            if problem is not None:
                totals["invalid"] += 1
                print(f"{where}: {problem}", file=sys.stderr)
                continue
            totals["valid"] += 1
            verdicts[rec.verdict.label] += 1
            if not args.quiet:
                kinds = ",".join(rec.verdict.kinds) or "-"
                print(
                    f"{where}: {item.run_id}: {rec.verdict.label} [{kinds}] "
                    f"agreement={rec.content_agreement:.3f} compliance={rec.protocol_compliance:.3f}"
                )
        if totals["records"] == before:
            empty += 1
            print(f"{path}: no runs in this file", file=sys.stderr)
    summary = {
        "empty_files": empty,
        "records": totals["records"],
        "valid": totals["valid"],
        "invalid": totals["invalid"],
        "verdicts": dict(sorted(verdicts.items())),
    }
    assert summary["valid"] + summary["invalid"] == summary["records"]
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        vs = " ".join(f"{k}={v}" for k, v in sorted(verdicts.items())) or "none"
        print(
            f"total: {summary['records']} records, {summary['valid']} valid, {summary['invalid']} invalid; verdicts: {vs}"
        )
    return 0 if summary["invalid"] == 0 and summary["records"] > 0 and not empty else 1


if __name__ == "__main__":
    sys.exit(main())
