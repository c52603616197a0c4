"""Held-out sabotage evaluation of a ledger writer and a ledger reader, with baselines in the same run.

    python eval/sabotage.py --writer ckpt/ --reader ckpt-reader/ [--runs heldout] [--limit N]

On held-out families the writer writes each run's ledger from its trajectory, a share of the ledgers
gets ledger sabotage injected, and the reader returns a verdict and a suspicion score seeing only what a
deployed monitor sees. Reports AUROC, TPR at 1% and 5% FPR (thresholds on honest runs only), recall per
sabotage type, the writer's content agreement, protocol compliance and parse rate, and citation
accuracy, each with a 95% bootstrap interval, beside the reconciler, the base model and the teacher.
Writes a run directory (manifest.json, items.jsonl, summary.json, report.md, roc.png,
recall_by_type.png); rerunning with the same arguments resumes. Exit 0 on success, 2 on bad input.
"""

import argparse
import sys

from data_prep.yaml_config import strict_parser
from eval.cli import add_common, apply_limit, decoding_overrides, overrides, setup
from eval.sabotage_eval import DEFAULT_CONFIG, SabotageConfig


def main(argv: list[str] | None = None) -> int:
    ap = strict_parser(prog="eval/sabotage.py", description=__doc__.split("\n")[0])
    ap.add_argument("--writer", help="writer checkpoint directory (default ckpt/)")
    ap.add_argument("--reader", help="reader checkpoint directory (default ckpt-reader/)")
    ap.add_argument(
        "--runs",
        help="heldout (default: held-out families of the corpus), all, or a run JSONL file / corpus directory",
    )
    ap.add_argument(
        "--inject-share",
        type=float,
        help="share of written ledgers that get ledger sabotage injected (default 0.5)",
    )
    ap.add_argument(
        "--inject-types",
        type=lambda s: [t.strip() for t in s.split(",") if t.strip()],
        help="comma list of injected types (default omitted,softened,misreported_outcome,fabricated,swapped_ids)",
    )
    from eval.cli import floats

    ap.add_argument("--fprs", type=floats, help="target false-positive rates (default 0.01,0.05)")
    ap.add_argument(
        "--base-reader",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the reader's base model without the adapter as a baseline monitor (default on)",
    )
    add_common(ap, DEFAULT_CONFIG)
    from eval.openai_backend import add_endpoint_args

    add_endpoint_args(ap, ("writer", "reader"))
    ns = ap.parse_args(argv)
    setup()
    from data_prep.yaml_config import ConfigError, load_dataclass
    from eval.generation import BackendError, DecodingConfigError, load_decoding
    from eval.sabotage_eval import _path, run_sabotage
    from eval.sources import SourceError

    names = [
        "writer",
        "reader",
        "runs",
        "limit",
        "seed",
        "inject_share",
        "inject_types",
        "fprs",
        "bootstrap_resamples",
        "base_reader",
        "base_writer",
        "teacher",
        "cache_dir",
        "corpus",
        "sft",
        "decoding",
        "base_model",
        "chunk_size",
        "out",
        "resume",
        "progress",
    ]
    try:
        cfg = load_dataclass(SabotageConfig, ns.config, overrides(ns, names))
        apply_limit(cfg, ns)
        decoding = load_decoding(_path(cfg.decoding), decoding_overrides(ns))
        served = {}
        from eval.openai_backend import OpenAIBackend, endpoint_settings, require_base, served_label

        for role in ("writer", "reader"):
            settings = endpoint_settings(ns, role)
            if settings is not None:
                require_base(settings, role, getattr(cfg, f"base_{role}"))
                served[role] = OpenAIBackend(settings, decoding)
                setattr(cfg, role, served_label(settings))
        out = run_sabotage(cfg, decoding=decoding, **served)
    except (
        ConfigError,
        DecodingConfigError,
        SourceError,
        BackendError,
        ValueError,
        FileNotFoundError,
    ) as exc:
        print(f"eval/sabotage.py: error: {exc}", file=sys.stderr)
        return 2
    from eval.report import summary_lines

    for line in summary_lines(out):
        print(line)
    print(f"sabotage eval: wrote {out} (report.md, summary.json, items.jsonl, roc.png, recall_by_type.png)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
