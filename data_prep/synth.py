"""Generate the embedded default corpus: synthetic runs and authorization-policy cases.

    python data_prep/synth.py --out DIR [--runs N] [--policy-cases M] [--seed S] [--config PRESET.yaml]
                              [--sabotage-rates omitted=0.1,late=0.05] [--hazard-rates ...] [...]

Writes DIR/runs/runs-NNNNN.jsonl, DIR/policy_cases/cases-NNNNN.jsonl and DIR/manifest.json (counts per
family, sabotage type, teacher error and verdict; sha256 of every file; ``complete: true``). Every run
carries a run seal, signed with Ed25519 when --signing-key FILE or $LEDGERWRIGHT_SIGNING_KEY is given.
The corpus is written into a sibling staging directory and moved into place only when complete: a
kill or a full disk leaves the previous DIR as it was. Same config and seed give byte-identical
output. Exit 0 on success, 1 when the output cannot be written, 2 on a bad option, preset or key.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from data_prep.inputs import InputError, os_problem, read_text
from data_prep.manifest import ManifestError, replaceable_output, staged_output
from data_prep.signing import SigningKeyError, load_signer
from data_prep.synthetic.config import SynthConfig, config_from_args, config_from_mapping
from data_prep.synthetic.corpus import generate_corpus
from data_prep.yaml_config import add_dataclass_flags, strict_parser

NOT_OURS = "and holds no manifest.json, so it is not an earlier corpus: choose another --out"


def main(argv: list[str] | None = None) -> int:
    ap = strict_parser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="output directory (earlier shards are replaced)")
    ap.add_argument("--config", type=Path, help="YAML preset with SynthConfig fields; flags override it")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    ap.add_argument(
        "--signing-key", type=Path, help="Ed25519 private key (PEM or hex) to sign run seals with"
    )
    add_dataclass_flags(ap, SynthConfig)
    args = ap.parse_args(argv)
    try:
        base = SynthConfig()
        if args.config:
            data = yaml.safe_load(read_text(args.config)) or {}
            if not isinstance(data, dict):
                raise ValueError(f"{args.config}: expected a mapping of SynthConfig fields")
            base = config_from_mapping(data, where=str(args.config))
        cfg = config_from_args(args, base)
        signer = load_signer(args.signing_key)
    except (ValueError, OSError, yaml.YAMLError, SigningKeyError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        with staged_output(args.out, replace=replaceable_output(args.out), hint=NOT_OURS) as staged:
            manifest = generate_corpus(cfg, staged, progress=not args.quiet, signer=signer)
    except ManifestError as exc:
        print(f"synth: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"synth: error: {exc.filename or args.out}: {os_problem(exc)} ({args.out} is unchanged)",
            file=sys.stderr,
        )
        return 1
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
