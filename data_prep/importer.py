"""Import real data into the corpus layout (runs/, policy_cases/, manifest.json, rejects.jsonl).

    python data_prep/importer.py --format workflow-v2|eal-case|runs SRC [SRC ...] --out DIR [--allow-partial]

SRC is a file or a directory (workflow-v2 and runs: *.jsonl; eal-case: *.yaml / *.yml, one case per
file, EAL-Bench's published case files as they are). Bad records are quarantined to DIR/rejects.jsonl
and printed as ``file:line: field: problem``; the counts, per file too, go to DIR/manifest.json.

Exit status:
  0  every record read was imported (and there was at least one);
  1  some records were rejected (a per-file summary is printed; with --allow-partial the accepted
     ones count as a success), or nothing at all was imported (never a success, whatever the flags);
  2  a usage error, or no input files found.
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
SUMMARY_LINES = 50  # files listed in the per-file summary; the manifest lists all


def exit_status(counts: dict, *, allow_partial: bool) -> int:
    """The contract above, from the manifest's counts."""
    if counts["accepted"] == 0:
        return 1
    if counts["rejected"] and not allow_partial:
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog=__doc__[__doc__.index("Exit status:") : __doc__.index("(Named")].rstrip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--format", required=True, choices=sorted(FORMATS), help="input format")
    ap.add_argument("sources", nargs="+", help="input files or directories")
    ap.add_argument("--out", required=True, type=Path, help="output directory (earlier shards are replaced)")
    ap.add_argument(
        "--allow-partial",
        action="store_true",
        help="exit 0 when some records were rejected but at least one was imported",
    )
    ap.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 if any record was rejected (the default now; kept so older scripts still run)",
    )
    ap.add_argument("--shard-size", type=int, default=1000, help="records per JSONL shard [1000]")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    if args.shard_size < 1:
        ap.error("--shard-size must be positive")
    if args.strict and args.allow_partial:
        ap.error("--strict and --allow-partial contradict each other")
    iter_items, patterns = FORMATS[args.format]
    paths = expand_sources(args.sources, patterns)
    if not paths:
        print(f"error: no input files found (looked for {', '.join(patterns)})", file=sys.stderr)
        return 2
    manifest = run_import(
        args.format, iter_items(paths), paths, args.out, shard_size=args.shard_size, progress=not args.quiet
    )
    c = manifest["counts"]
    print(
        f"{args.format}: {c['input_records']} records read from {len(paths)} files, {c['accepted']} accepted "
        f"({c['runs']} runs, {c['policy_cases']} policy cases), {c['rejected']} rejected -> {args.out}"
    )
    troubled = [(p, s) for p, s in zip(paths, manifest["sources"]) if s["rejected"] or not s["accepted"]]
    if troubled:
        print("files with rejected or no records (accepted/rejected):")
        for p, s in troubled[:SUMMARY_LINES]:
            print(f"  {p}: {s['accepted']}/{s['rejected']}")
        if len(troubled) > SUMMARY_LINES:
            print(f"  ... {len(troubled) - SUMMARY_LINES} more, all in {args.out / 'manifest.json'}")
    if c["rejected"]:
        print(f"rejects: {args.out / 'rejects.jsonl'}")
    status = exit_status(c, allow_partial=args.allow_partial)
    if c["accepted"] == 0:
        print(
            f"error: nothing imported ({c['rejected']} rejected of {c['input_records']} read)",
            file=sys.stderr,
        )
    elif status:
        print(
            f"error: {c['rejected']} of {c['input_records']} records rejected "
            "(--allow-partial keeps the accepted ones and exits 0)",
            file=sys.stderr,
        )
    return status


if __name__ == "__main__":
    sys.exit(main())
