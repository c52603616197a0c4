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

import sys

from data_prep.yaml_config import strict_parser
from eval.cli import add_common, decoding_overrides, load_config, setup
from eval.sabotage_eval import DEFAULT_CONFIG, SabotageConfig


def main(argv: list[str] | None = None) -> int:
    ap = strict_parser(prog="eval/sabotage.py", description=__doc__.split("\n")[0])
    add_common(ap, SabotageConfig, DEFAULT_CONFIG)
    from eval.openai_backend import add_endpoint_args

    add_endpoint_args(ap, ("writer", "reader"))
    ns = ap.parse_args(argv)
    setup()
    from data_prep.yaml_config import ConfigError
    from eval.generation import BackendError, DecodingConfigError, load_decoding
    from eval.sabotage_eval import _path, run_sabotage
    from eval.sources import SourceError

    try:
        cfg = load_config(SabotageConfig, ns)
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
