"""Evaluations of distilled writers and readers.

Entry scripts (thin): ``eval/sabotage.py`` (held-out sabotage monitoring) and ``eval/policy_reuse.py``
(EAL-style policy reuse). Library: ``sabotage_eval`` and ``policy_reuse_eval`` (the flows), ``generation``
(transformers, vLLM and scripted backends), ``injection`` (ledger sabotage), ``memory_score`` (memory
errors), ``metrics`` (ROC figures, thresholds on honest runs, bootstrap intervals, EAL rates),
``sources`` (held-out items), ``rundir`` (run directory, per-item records, resume), ``report`` and
``plots``. Nothing imports eval.
"""
