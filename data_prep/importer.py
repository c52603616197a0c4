"""Import real data into the corpus layout (runs/, policy_cases/, manifest.json, rejects.jsonl).

    python data_prep/importer.py --format workflow-v2|eal-case|runs SRC [SRC ...] --out DIR [--strict]

SRC is a file or a directory (workflow-v2 and runs: *.jsonl; eal-case: *.yaml / *.yml, one case per
file). Bad records are quarantined to DIR/rejects.jsonl and printed as ``file:line: field: problem``.
Exit 0 with counts printed; 1 if anything was rejected and --strict is given; 2 on a usage error.
(Named importer.py because ``import`` is a Python keyword.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from data_prep.importers import eal_case, runs, workflow_v2
from data_prep.importers.common import expand_sources, run_import

FORMATS = {
    "workflow-v2": (workflow_v2.iter_items, ("*.jsonl",)),
    "eal-case": (eal_case.iter_items, ("*.yaml", "*.yml")),
    "runs": (runs.iter_items, ("*.jsonl",)),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--format", required=True, choices=sorted(FORMATS), help="input format")
    ap.add_argument("sources", nargs="+", help="input files or directories")
    ap.add_argument("--out", required=True, type=Path, help="output directory (earlier shards are replaced)")
    ap.add_argument("--strict", action="store_true", help="exit 1 if any record was rejected")
    ap.add_argument("--shard-size", type=int, default=1000, help="records per JSONL shard [1000]")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    if args.shard_size < 1:
        ap.error("--shard-size must be positive")
    iter_items, patterns = FORMATS[args.format]
    paths = expand_sources(args.sources, patterns)
    if not paths:
        print("error: no input files found", file=sys.stderr)
        return 2
    manifest = run_import(
        args.format, iter_items(paths), paths, args.out, shard_size=args.shard_size, progress=not args.quiet
    )
    c = manifest["counts"]
    print(
        f"{args.format}: {c['input_records']} records read, {c['accepted']} accepted "
        f"({c['runs']} runs, {c['policy_cases']} policy cases), {c['rejected']} rejected -> {args.out}"
    )
    if c["rejected"]:
        print(f"rejects: {args.out / 'rejects.jsonl'}")
    return 1 if args.strict and c["rejected"] else 0


if __name__ == "__main__":
    sys.exit(main())
