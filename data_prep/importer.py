"""Import real data into the corpus layout (runs/, policy_cases/, manifest.json, rejects.jsonl).

    python data_prep/importer.py --format FORMAT SRC [SRC ...] --out DIR [--allow-partial] [--allow-empty]
                                 [--labeller RULES.yaml] [--signing-key FILE]

FORMAT and what SRC (a file, or a directory of such files) holds:
  workflow-v2   *.jsonl, seed-style workflows, one per line
  eal-case      *.yaml / *.yml, one EAL-style case per file (EAL-Bench's published case files as they are)
  runs          *.jsonl, the project's own ledger-run/v1 records
  inspect-log   *.eval / *.json, inspect_ai eval logs (one run per sample and epoch)
  otel-genai    *.json / *.jsonl, OTLP JSON traces with GenAI execute_tool spans (one run per trace)
  openai-agents *.json / *.jsonl, OpenAI Agents SDK trace exports: function spans (one run per trace)
The trace formats take --labeller RULES.yaml: the policy_class of each call (default benign; see
data_prep/importers/labeller.py). Only regular files are read: a FIFO, device,
directory or /proc file named as a source is refused with ``file: problem``. Bad records are
quarantined to DIR/rejects.jsonl and printed as ``file:line: field: problem``; the counts, per file
too, go to DIR/manifest.json. Every imported run gets a run seal (signed with Ed25519 when
--signing-key FILE or $LEDGERWRIGHT_SIGNING_KEY is given). The corpus is written into a sibling staging
directory and moved into place, with ``complete: true`` in its manifest, only when complete.

Exit status:
  0  every record read was imported (and there was at least one);
  1  some records were rejected (a per-file summary is printed; with --allow-partial the accepted
     ones count as a success), nothing was imported (with --allow-empty, sources holding no records
     at all are a success; a rejected record never is), a source cannot be read (or is a directory
     without matching files), or the output cannot be written;
  2  a usage error.
(Named importer.py because ``import`` is a Python keyword.)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path

from data_prep.importers import eal_case, inspect_log, openai_agents, otel_genai, runs, workflow_v2
from data_prep.importers.common import Accepted, Item, Rejected, expand_sources, run_import
from data_prep.importers.labeller import LabellerError, load_labeller
from data_prep.inputs import InputError, check_regular, os_problem
from data_prep.integrity import seal_run
from data_prep.manifest import ManifestError, replaceable_output, staged_output
from data_prep.records import RecordError
from data_prep.signing import SigningKeyError, load_signer
from data_prep.yaml_config import strict_parser

FORMATS = {
    "workflow-v2": (workflow_v2.iter_items, ("*.jsonl",)),
    "eal-case": (eal_case.iter_items, ("*.yaml", "*.yml")),
    "runs": (runs.iter_items, ("*.jsonl",)),
    "inspect-log": (inspect_log.iter_items, ("*.eval", "*.json")),
    "otel-genai": (otel_genai.iter_items, ("*.json", "*.jsonl")),
    "openai-agents": (openai_agents.iter_items, ("*.json", "*.jsonl")),
}
TRACE_FORMATS = ("inspect-log", "otel-genai", "openai-agents")  # the formats a --labeller applies to
SUMMARY_LINES = 50  # files listed in the per-file summary; the manifest lists all


def exit_status(counts: dict, *, allow_partial: bool, allow_empty: bool = False) -> int:
    """The contract above, from the manifest's counts."""
    if counts["accepted"] == 0:
        return 0 if allow_empty and counts["input_records"] == 0 else 1
    if counts["rejected"] and not allow_partial:
        return 1
    return 0


def sealed_items(items: Iterator[Item], signer) -> Iterator[Item]:
    """Accepted runs with a fresh run seal (an importer that cannot seal a run quarantines it)."""
    for item in items:
        if isinstance(item, Accepted) and item.kind == "run":
            try:
                item = replace(item, record=seal_run(item.record, signer))
            except (RecordError, ValueError) as exc:
                item = Rejected(item.source, item.line, "$", f"cannot seal: {exc}")
        yield item


def _parser() -> argparse.ArgumentParser:
    ap = strict_parser(
        description=__doc__.split("\n")[0],
        epilog=__doc__[__doc__.index("Exit status:") : __doc__.index("(Named")].rstrip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--format", required=True, choices=sorted(FORMATS), help="input format")
    ap.add_argument("sources", nargs="+", help="input files or directories")
    ap.add_argument(
        "--out", required=True, type=Path, help="output directory (an earlier corpus is replaced)"
    )
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
    ap.add_argument(
        "--allow-empty",
        action="store_true",
        help="exit 0 when the sources hold no records at all (rejected records still fail)",
    )
    ap.add_argument("--labeller", type=Path, help="YAML rules giving imported trace calls a policy_class")
    ap.add_argument("--shard-size", type=int, default=1000, help="records per JSONL shard [1000]")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument("--signing-key", type=Path, help="Ed25519 private key (PEM or hex) to sign run seals")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if args.shard_size < 1:
        ap.error("--shard-size must be positive")
    if args.strict and args.allow_partial:
        ap.error("--strict and --allow-partial contradict each other")
    if args.labeller and args.format not in TRACE_FORMATS:
        ap.error(f"--labeller applies to {', '.join(TRACE_FORMATS)} only")
    prepared = _prepare(args)
    if isinstance(prepared, int):
        return prepared
    iter_items, signer, paths = prepared
    try:
        with staged_output(
            args.out, replace=replaceable_output(args.out), hint="and is not an earlier corpus"
        ) as staged:
            manifest = run_import(
                args.format,
                sealed_items(iter_items(paths), signer),
                paths,
                staged,
                shard_size=args.shard_size,
                progress=not args.quiet,
            )
    except ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"error: {exc.filename or args.out}: {os_problem(exc)} ({args.out} is unchanged)", file=sys.stderr
        )
        return 1
    return _report(args, paths, manifest)


def _prepare(args):
    """(record iterator, run signer, input files), or the exit status when a labeller, key or input
    cannot be used: every problem is named before anything is imported."""
    iter_items, patterns = FORMATS[args.format]
    if args.format in TRACE_FORMATS:
        try:
            labeller = load_labeller(args.labeller)
        except LabellerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        iter_items = partial(iter_items, labeller=labeller)
    try:
        signer = load_signer(args.signing_key)
    except SigningKeyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        paths = expand_sources(args.sources, patterns)
    except OSError as exc:
        print(f"error: {exc.filename}: {os_problem(exc)}", file=sys.stderr)
        return 1
    empty = [s for s in args.sources if Path(s).is_dir() and not expand_sources([s], patterns)]
    if empty or not paths:
        for s in empty:
            print(f"error: {s}: no {' or '.join(patterns)} files in this directory", file=sys.stderr)
        print("error: no input files found" if not paths else "error: nothing imported", file=sys.stderr)
        return 1
    bad = 0
    for p in paths:
        try:
            check_regular(p)
        except InputError as exc:
            print(f"error: {exc}", file=sys.stderr)
            bad += 1
    if bad:
        print(f"error: {bad} source(s) cannot be read; nothing imported", file=sys.stderr)
        return 1
    return iter_items, signer, paths


def _report(args, paths: list[Path], manifest: dict) -> int:
    """The summary a user reads after an import, and the exit status its counts give."""
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
    status = exit_status(c, allow_partial=args.allow_partial, allow_empty=args.allow_empty)
    if c["accepted"] == 0 and status:
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
