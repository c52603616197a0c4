"""Build SFT datasets from a corpus of runs and policy cases.

    python data_prep/build.py --corpus DIR --out DIR [--config configs/data/default.yaml] [--strict]

Stages: validate and verify, gold verdicts, verdict-match filter, sanitizer, render, dedup, split by
family. Writes one DatasetDict per task, JSONL spools and previews, rejects.jsonl, filtered.jsonl,
sanitizer_report.json and manifest.json. The corpus must be a sealed stage output (its manifest says
``complete: true`` and every file matches); --allow-unsealed builds from anything. The output is
written into a sibling staging directory and replaces --out only when complete (--overwrite never
deletes the previous build first; a kill or a full disk leaves it as it was). Exit 1 on unusable or
unsealed input, or on any input problem with --strict; otherwise 0 with every problem printed as
file:line: field: problem.
"""

from __future__ import annotations

import sys
from pathlib import Path

from data_prep.inputs import InputError, check_regular, os_problem
from data_prep.manifest import ManifestError
from data_prep.sft.config import DEFAULT_CONFIG, BuildConfigError, load_build_config
from data_prep.sft.pipeline import BuildError, build, summary_lines
from data_prep.yaml_config import strict_parser


def main(argv: list[str] | None = None) -> int:
    ap = strict_parser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--corpus", required=True, type=Path, help="corpus directory (runs/, policy_cases/, manifest.json)"
    )
    ap.add_argument("--out", required=True, type=Path, help="output directory (must be empty or absent)")
    ap.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="build config YAML")
    ap.add_argument("--strict", action="store_true", help="exit 1 on any input problem")
    ap.add_argument("--overwrite", action="store_true", help="replace a non-empty output directory")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument(
        "--allow-unsealed",
        action="store_true",
        help="build from a corpus without a complete, matching manifest (not recommended)",
    )
    args = ap.parse_args(argv)
    try:
        check_regular(args.config)
        cfg = load_build_config(args.config)
        manifest = build(
            args.corpus,
            args.out,
            cfg,
            strict=args.strict,
            progress=not args.no_progress,
            overwrite=args.overwrite,
            allow_unsealed=args.allow_unsealed,
        )
    except (BuildError, BuildConfigError, FileNotFoundError, InputError, ManifestError) as exc:
        print(f"build: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        where = exc.filename or args.out
        print(f"build: error: {where}: {os_problem(exc)} ({args.out} is unchanged)", file=sys.stderr)
        return 1
    for problem in manifest["problems"]:
        print(problem, file=sys.stderr)
    for line in summary_lines(manifest):
        print(line)
    print(
        f"build: wrote {args.out} ({len(manifest['problems'])} input problems; manifest.json lists every file)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
