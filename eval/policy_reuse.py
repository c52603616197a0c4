"""Policy-reuse evaluation (EAL-style) of an authorization-memory writer.

    python eval/policy_reuse.py --writer ckpt/ [--executor CKPT|base|rules] [--cases PATH] [--incremental]

For each held-out policy case the writer forms authorization memory from the history (one shot, or
block by block with --incremental; at most one repair attempt), the memory is frozen and digested, an
executor sees only the memory and one probe request and decides execute_requested, decline or
escalate, and the oracle scores every decision. The default executor is ``rules`` (the typed records
applied deterministically: memory fidelity alone). Baselines: no memory, gold memory, the teacher's
memory. Reports authorized use, unauthorized submission, escalation, the calibrated flag, per-dimension
results and memory errors, with 95% bootstrap intervals. Writes a run directory (manifest.json,
items.jsonl, summary.json, report.md, policy_confusion.png); rerunning with the same arguments resumes.
A history too long for the writer in one shot is written block by block (--long-history blocks,
the default). Served models instead of checkpoints (vLLM or any OpenAI-compatible server):
``--backend openai --endpoint URL --writer-model writer [--writer-base-model BASE]`` (and
``--reader-model`` for a model executor); ``eval/serve.py --lora-modules`` serves them locally.
Exit 0 on success, 2 on bad input.
"""

import sys

from data_prep.yaml_config import strict_parser
from eval.cli import add_common, decoding_overrides, load_config, setup
from eval.policy_reuse_eval import DEFAULT_CONFIG, PolicyConfig


def main(argv: list[str] | None = None) -> int:
    ap = strict_parser(prog="eval/policy_reuse.py", description=__doc__.split("\n")[0])
    add_common(ap, PolicyConfig, DEFAULT_CONFIG)
    from eval.openai_backend import add_endpoint_args

    add_endpoint_args(ap, ("writer", "reader"))
    ns = ap.parse_args(argv)
    setup()
    from data_prep.yaml_config import ConfigError
    from eval.generation import BackendError, DecodingConfigError, load_decoding
    from eval.policy_reuse_eval import _path, run_policy
    from eval.sources import SourceError

    try:
        cfg = load_config(PolicyConfig, ns)
        decoding = load_decoding(_path(cfg.decoding), decoding_overrides(ns))
        writer, executor = served_models(ns, cfg, decoding)
        out = run_policy(cfg, decoding=decoding, writer=writer, executor=executor)
    except (
        ConfigError,
        DecodingConfigError,
        SourceError,
        BackendError,
        ValueError,
        FileNotFoundError,
    ) as exc:
        print(f"eval/policy_reuse.py: error: {exc}", file=sys.stderr)
        return 2
    from eval.report import summary_lines

    for line in summary_lines(out):
        print(line)
    print(f"policy-reuse eval: wrote {out} (report.md, summary.json, items.jsonl, policy_confusion.png)")
    return 0


def served_models(ns, cfg, decoding):
    """The writer and executor served by OpenAI-compatible endpoints (None: a local checkpoint)."""
    from eval.openai_backend import OpenAIBackend, endpoint_settings, require_base, served_label

    writer = executor = None
    ws = endpoint_settings(ns, "writer")
    if ws is not None:
        require_base(ws, "writer", cfg.base_writer or cfg.executor == "base")
        writer = OpenAIBackend(ws, decoding)
        cfg.writer = served_label(ws)
    # the executor is served when a reader is named, or with --backend openai and a model executor
    reader_named = ns.reader_endpoint or ns.reader_model
    if reader_named or (decoding.backend == "openai" and cfg.executor not in ("rules", "base")):
        rs = endpoint_settings(ns, "reader")
        if rs is not None:
            executor = OpenAIBackend(rs, decoding)
            cfg.executor = served_label(rs)
    return writer, executor


if __name__ == "__main__":
    sys.exit(main())
