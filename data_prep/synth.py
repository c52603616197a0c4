"""Generate the embedded default corpus: synthetic runs and authorization-policy cases.

    python data_prep/synth.py --out DIR [--runs N] [--policy-cases M] [--seed S] [--config PRESET.yaml]
                              [--sabotage-rates omitted=0.1,late=0.05] [--hazard-rates ...] [...]

Writes DIR/runs/runs-NNNNN.jsonl, DIR/policy_cases/cases-NNNNN.jsonl and DIR/manifest.json (counts per
family, sabotage type, teacher error and verdict; sha256 of every file). Same config and seed give
byte-identical output. Exit 0 on success, 2 on a bad option or preset.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from data_prep.synth.config import SynthConfig, add_config_arguments, config_from_args, config_from_mapping
from data_prep.synth.corpus import generate_corpus


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="output directory (earlier shards are replaced)")
    ap.add_argument("--config", type=Path, help="YAML preset with SynthConfig fields; flags override it")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    add_config_arguments(ap)
    args = ap.parse_args(argv)
    try:
        base = SynthConfig()
        if args.config:
            data = yaml.safe_load(args.config.read_text()) or {}
            if not isinstance(data, dict):
                raise ValueError(f"{args.config}: expected a mapping of SynthConfig fields")
            base = config_from_mapping(data, where=str(args.config))
        cfg = config_from_args(args, base)
    except (ValueError, OSError, yaml.YAMLError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    manifest = generate_corpus(cfg, args.out, progress=not args.quiet)
    c = manifest["counts"]
    print(
        f"wrote {c['runs']} runs and {c['policy_cases']} policy cases to {args.out} (manifest: {args.out / 'manifest.json'})"
    )
    print("gold verdicts: " + ", ".join(f"{k}={v}" for k, v in c["runs_by_gold_verdict"].items() if v))
    print("sabotage: " + ", ".join(f"{k}={v}" for k, v in c["runs_by_sabotage"].items()))
    print(f"teacher verdict matches gold: {c['teacher_verdict_match']}/{c['runs']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
