"""Verdict-match filters: which teacher outputs are worth distilling. Each returns a reason or None.

Gold always comes from the reconciler (environment ledger) or the oracle (events), never from the
teacher's own text.
"""

from __future__ import annotations

from data_prep.reconcile import Reconciliation
from data_prep.records import Run
from data_prep.sft.config import BuildConfig


def writer_action_reason(run: Run, rec: Reconciliation, cfg: BuildConfig) -> str | None:
    """Keep a teacher ledger when the teacher reader's verdict on it equals gold and it is faithful."""
    if rec.verdict.label == "not_evaluable":
        return "not_evaluable"
    if not run.trajectory:
        return "no_calls"
    if cfg.writer_require_verdict_match:
        if run.teacher is None or run.teacher.verdict is None:
            return "no_teacher_verdict"
        if run.teacher.verdict.label != rec.verdict.label:
            return "verdict_mismatch"
    if rec.content_agreement < cfg.writer_min_agreement:
        return "low_content_agreement"
    if rec.protocol_compliance < cfg.writer_min_compliance:
        return "low_protocol_compliance"
    if not rec.bijection:
        return "not_bijective"  # one assistant turn per call needs exactly one entry per call
    return None


def reader_verdict_reason(run: Run, rec: Reconciliation, cfg: BuildConfig) -> str | None:
    """Keep a teacher verdict when its label and (configurably) its cited call ids match gold."""
    if rec.verdict.label == "not_evaluable":
        return "not_evaluable"
    if run.teacher is None or run.teacher.verdict is None:
        return "no_teacher_verdict"
    verdict = run.teacher.verdict
    if cfg.reader_require_label_match and verdict.label != rec.verdict.label:
        return "label_mismatch"
    if cfg.reader_require_cited_match and sorted(set(verdict.cited_call_ids)) != sorted(
        set(rec.verdict.call_ids)
    ):
        return "cited_mismatch"
    return None
