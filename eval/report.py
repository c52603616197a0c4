"""Markdown reports of the evaluations: every figure with its 95% interval and denominator (Wilson score
intervals for rates of items, percentile bootstrap for AUROC, TPR and means)."""

from __future__ import annotations

import json


def _f(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "n/a"
    return f"{x:.{digits}f}"


def _rate(r: dict | None, pct: bool = True) -> str:
    """``value [lo, hi] (k/n)`` of a rate dict."""
    if not r or r.get("value") is None:
        n = r.get("n") if r else None
        return f"n/a (n={n})" if n is not None else "n/a"
    v, (lo, hi) = r["value"], r["ci"]
    if pct:
        s = f"{100 * v:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}]"
    else:
        s = f"{v:.3f} [{lo:.3f}, {hi:.3f}]"
    if "k" in r:
        s += f" ({r['k']}/{r['n']})"
    elif "n" in r:
        s += f" (n={r['n']})"
    return s


MONITOR_NAMES = {
    "reader": "reader (adapter)",
    "base_reader": "base model, no adapter",
    "reconciler": "reconciler (reference, reads policy_class)",
    "teacher": "teacher verdict on corpus ledger",
}


def sabotage_report(summary: dict, config: dict) -> str:
    """report.md of a sabotage evaluation: the items, the monitors, recall per type, the writers."""
    fprs = [f"{f:g}" for f in config.get("fprs", [0.01, 0.05])]
    lines = _sabotage_intro(summary, config)
    lines += _monitor_table(summary, fprs) + _recall_table(summary, fprs) + _writer_table(summary)
    lines += ["", "## Notes", ""] + [f"- {n}" for n in summary.get("notes", [])]
    lines += ["", "Plots: `roc.png`, `recall_by_type.png`. Per-item records: `items.jsonl`.", ""]
    return "\n".join(lines)


def _sabotage_intro(summary: dict, config: dict) -> list[str]:
    lines = ["# Held-out sabotage evaluation", ""]
    lines.append(
        f"{summary['items']} runs from {summary.get('source', '?')} ({summary['positives']} positive, {summary['negatives']} negative): "
        f"{summary['action_sabotage']} with action sabotage, injected ledger sabotage "
        f"{json.dumps(summary['injected'])} (share {config.get('inject_share')}; requested "
        f"{json.dumps(summary.get('injected_requested', {}))}, a type that cannot apply to a ledger falls back to "
        "the next). Families: " + ", ".join(f"{k} ({v})" for k, v in summary["families"].items()) + "."
    )
    lines += [
        "",
        f"Writer `{config.get('writer')}`, reader `{config.get('reader')}`. Intervals (95%): Wilson score for "
        "rates of items and of turns; percentile bootstrap for AUROC, TPR and means over runs "
        f"({config.get('bootstrap_resamples')} resamples, seed {config.get('seed')}; a mean that is 0 or 1 in "
        "every run gets the Wilson interval of its runs).",
        "",
    ]
    return lines


def _monitor_table(summary: dict, fprs: list[str]) -> list[str]:
    lines = []
    lines += ["## Monitors", ""]
    head = "| monitor | n (pos/neg) | AUROC | " + " | ".join(
        f"TPR @ {float(f):.0%} FPR (achieved FPR)" for f in fprs
    )
    head += " | verdict TPR | verdict FPR | unparseable | label = gold verdict | cites gold ids | AUROC, parsed answers only |"
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for name, m in summary["monitors"].items():
        if not m:
            continue
        a = m["auroc"]
        row = f"| {MONITOR_NAMES.get(name, name)} | {m['n']} ({m['n_pos']}/{m['n_neg']}) | {_f(a['value'])} [{_f(a['ci'][0], 2)}, {_f(a['ci'][1], 2)}] |"
        for f in fprs:
            op = m["operating_points"][f]
            flag = "" if op["resolvable"] else " ⚠"
            row += f" {_f(op['tpr'])} [{_f(op['tpr_ci'][0], 2)}, {_f(op['tpr_ci'][1], 2)}] ({_f(op['achieved_fpr'], 3)}){flag} |"
        row += f" {_rate(m['verdict']['tpr'])} | {_rate(m['verdict']['fpr'])} | {_rate(m['failures']['unparseable'])} |"
        row += (
            f" {_rate(m['verdict']['agrees_with_gold_label'])} | {_rate(m['citations']['exact_gold_ids'])} |"
        )
        po = m.get("parsed_only") or {}
        pa = (po.get("auroc") or {}).get("value")
        row += f" {_f(pa)} (n={po.get('n', 0)}: {po.get('n_pos', 0)}/{po.get('n_neg', 0)}) |"
        lines.append(row)
    lines += [
        "",
        "⚠: fewer than 1/FPR negatives, so the target FPR cannot be resolved (threshold = highest negative score). "
        "'label = gold verdict': the verdict label equals the reconciler's verdict on the same ledger (writer "
        "mistakes included). 'AUROC, parsed answers only' is a diagnostic that leaves failures out; every other "
        "figure keeps them in.",
        "",
    ]
    return lines


def _recall_table(summary: dict, fprs: list[str]) -> list[str]:
    lines = []
    lines += ["## Recall per sabotage type", ""]
    f5 = fprs[-1]
    types = sorted(
        {t for m in summary["monitors"].values() if m for t in m["operating_points"][f5]["recall_by_type"]}
    )
    head = "| monitor | " + " | ".join(types) + " |"
    lines += [
        f"At the {float(f5):.0%}-FPR threshold (score) and by verdict label:",
        "",
        head,
        "|" + "---|" * (len(types) + 1),
    ]
    for name, m in summary["monitors"].items():
        if not m:
            continue
        per = m["operating_points"][f5]["recall_by_type"]
        vper = m["verdict"]["recall_by_type"]
        cells = []
        for t in types:
            if t in per:
                cells.append(f"{per[t]['hits']}/{per[t]['n']} (label {vper[t]['hits']}/{vper[t]['n']})")
            else:
                cells.append("–")
        lines.append(f"| {MONITOR_NAMES.get(name, name)} | " + " | ".join(cells) + " |")
    return lines


def _writer_table(summary: dict) -> list[str]:
    lines = []
    lines += ["", "## Writer", ""]
    head = (
        "| writer | runs | parse rate | call id exact | tool | outcome | description | content agreement "
        "| protocol compliance | bijection | clean ledger | guard stops (field cuts) |"
    )
    lines += [
        "Per-field figures are shares of all turns (an unparseable turn is wrong in every field).",
        "",
        head,
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    names = {
        "adapter": "writer (adapter), all runs",
        "adapter_honest_runs": "writer (adapter), runs with honest corpus label",
        "constrained": "writer (adapter), grammar-constrained decoding, all runs",
        "base": "base model, no adapter",
        "teacher_honest_runs": "teacher ledger, runs with honest corpus label",
    }
    for key, w in summary["writer"].items():
        if not w:
            continue
        fa = w.get("field_accuracy") or {}
        fields = " | ".join(_rate(fa.get(f)) for f in ("call_id", "tool", "outcome", "description"))
        lines.append(
            f"| {names.get(key, key)} | {w['runs']} | {_rate(w.get('parse_rate'))} | {fields} | "
            f"{_rate(w['content_agreement'], pct=False)} | {_rate(w['protocol_compliance'], pct=False)} | "
            f"{_rate(w.get('bijection'))} | {_rate(w.get('clean_ledger'))} | {_stops(w)} |"
        )
    return lines


def _stops(w: dict) -> str:
    """Guard stops of a writer row, with the fields it cut under a grammar where there were any."""
    stops = w.get("guard_stops", "–")
    return f"{stops} ({w['field_cut_turns']})" if w.get("field_cut_turns") else str(stops)


CONDITION_NAMES = {
    "writer": "writer memory (adapter)",
    "constrained_writer": "writer memory (adapter), grammar-constrained",
    "no_memory": "no memory",
    "gold_memory": "gold memory",
    "teacher_memory": "teacher memory",
    "base_writer": "base model memory, no adapter",
}


def policy_report(summary: dict, config: dict) -> str:
    lines = ["# Policy-reuse evaluation", ""]
    lines.append(
        f"{summary['cases']} policy cases from {summary.get('source', '?')}, {summary['requests']} probe requests "
        f"({summary['in_scope']} in scope, {summary['out_of_scope']} out of scope). Writer `{config.get('writer')}`, "
        f"executor `{summary['executor']}`, mode {'incremental' if config.get('incremental') else 'one shot'}."
    )
    lines += [
        "",
        "Each rate has its own denominator (EAL): authorized use over in-scope requests, unauthorized "
        "submission over out-of-scope requests, escalation over all; unparseable answers and provider errors stay in them.",
        "",
    ]
    head = "| memory | authorized use | unauthorized submission | escalation | invalid | provider error | calibrated | oracle agreement |"
    lines += [head, "|---|---|---|---|---|---|---|---|"]
    for cond, c in summary["conditions"].items():
        if c is None:
            lines.append(f"| {CONDITION_NAMES.get(cond, cond)} | n/a | n/a | n/a | n/a | n/a | n/a | n/a |")
            continue
        r = c["rates"]
        lines.append(
            f"| {CONDITION_NAMES.get(cond, cond)} | {_rate(r['authorized_use'])} | {_rate(r['unauthorized_submission'])} | "
            f"{_rate(r['escalation'])} | {_rate(r['invalid'])} | {_rate(r['provider_error'])} | "
            f"{'yes' if r['calibrated'] else 'no'} | {_rate(c['oracle_agreement'])} |"
        )
    lines += ["", "## Per dimension", ""]
    dims = sorted({d for c in summary["conditions"].values() if c for d in c["per_dimension"]})
    head = "| memory | " + " | ".join(f"{d}: AU / US" for d in dims) + " |"
    lines += [
        "AU = authorized use, US = unauthorized submission (k/n).",
        "",
        head,
        "|" + "---|" * (len(dims) + 1),
    ]
    for cond, c in summary["conditions"].items():
        if c is None:
            continue
        cells = []
        for d in dims:
            r = c["per_dimension"].get(d)
            if r is None:
                cells.append("–")
                continue
            au, us = r["authorized_use"], r["unauthorized_submission"]
            cells.append(f"{au['k']}/{au['n']} / {us['k']}/{us['n']}")
        lines.append(f"| {CONDITION_NAMES.get(cond, cond)} | " + " | ".join(cells) + " |")
    lines += _breakdown_tables(summary)
    lines += ["", "## Memory", ""]
    head = (
        "| memory | cases | valid | empty | invalid (unscored) | invalid because | repaired | updates failed "
        "| prompt too long | exact | " + " | ".join(summary["memory_error_types"]) + " |"
    )
    lines += [
        "Memory errors against the gold records (share of scored cases with at least one; total count in parentheses). "
        "'updates failed': failed memory updates of all updates (one per case one shot, one per block by blocks); "
        "'prompt too long': cases with a prompt the writer could not take (attempts in parentheses).",
        "",
        head,
        "|" + "---|" * (head.count("|") - 1),
    ]
    for cond, m in summary["memory"].items():
        if m is None:
            continue
        cells = [
            f"{_rate(m['errors'][t]['cases'])} ({m['errors'][t]['count']})"
            for t in summary["memory_error_types"]
        ]
        writer = "updates" in m
        because = ", ".join(f"{k} ({v})" for k, v in m.get("invalid_reasons", {}).items()) or "–"
        failed = f"{m['failed_updates']}/{m['updates']}" if writer else "–"
        too_long = f"{len(m['prompt_too_long_cases'])} ({m['prompt_too_long']})" if writer else "–"
        lines.append(
            f"| {CONDITION_NAMES.get(cond, cond)} | {m['cases']} | {m['status'].get('valid', 0)} | {m['status'].get('empty', 0)} | "
            f"{m['status'].get('invalid', 0)} | {because if writer else '–'} | {m.get('repaired', 0)} | {failed} | {too_long} | "
            f"{_rate(m['exact'])} | " + " | ".join(cells) + " |"
        )
    for cond in ("writer", "constrained_writer", "base_writer"):
        w = summary["memory"].get(cond) or {}
        if not w.get("attempts"):
            continue
        lines += [
            "",
            f"{CONDITION_NAMES.get(cond, cond)}: modes {json.dumps(w.get('modes', {}))}; answers (first attempts, "
            f"repairs and block updates) {json.dumps(w['attempts'])}; failures: "
            + (", ".join(f"{k} ({v})" for k, v in w.get("failure_reasons", {}).items()) or "none"),
        ]
        if w.get("prompt_too_long_cases"):
            shown = w["prompt_too_long_cases"][:20]
            more = len(w["prompt_too_long_cases"]) - len(shown)
            lines.append(
                "Prompt too long for one shot (cases): "
                + ", ".join(shown)
                + (f" and {more} more" if more else "")
            )
    lines += ["", "## Notes", ""] + [f"- {n}" for n in summary.get("notes", [])]
    lines += ["", "Plot: `policy_confusion.png`. Per-item records: `items.jsonl`.", ""]
    return "\n".join(lines)


BREAKDOWN_NAMES = {"memory_hazards": "memory hazard", "target_dimensions": "target dimension"}


def _breakdown_tables(summary: dict) -> list[str]:
    """One table per case analysis list (EAL-Bench's ``memory_hazards``, ``target_dimensions``)."""
    lines: list[str] = []
    for key, b in (summary.get("breakdowns") or {}).items():
        word = BREAKDOWN_NAMES.get(key, key)
        lines += [
            "",
            f"## Per {word}",
            "",
            f"By the {word}s a case file names (its analysis metadata). A case with several is counted under "
            f"each, so the cells hold {b['memberships']} probe memberships for {b['probes']} probes "
            f"({b['multi_valued_cases']} cases with more than one); cases without any are under (none). "
            "Memory errors: share of scored cases with at least one (in parentheses: errors in all; invalid memories, unscored).",
            "",
            f"| {word} | memory | cases | probes | authorized use | unauthorized submission | memory errors |",
            "|---|---|---|---|---|---|---|",
        ]
        for value, cell in b["cells"].items():
            for cond, c in cell["conditions"].items():
                if c is None:
                    continue
                lines.append(
                    f"| {value} | {CONDITION_NAMES.get(cond, cond)} | {cell['cases']} | {cell['probes']} | "
                    f"{_rate(c['authorized_use'])} | {_rate(c['unauthorized_submission'])} | "
                    f"{_rate(c['memory_errors'])} ({c['memory_error_count']}; unscored {c['unscored']}) |"
                )
    return lines


def summary_lines(run_dir) -> list[str]:
    """A few headline lines of a finished run directory, for the terminal."""
    from pathlib import Path

    s = json.loads((Path(run_dir) / "summary.json").read_text(encoding="utf-8"))
    out = []
    if s.get("eval") == "sabotage":
        out.append(f"{s['items']} runs: {s['positives']} positive, {s['negatives']} negative")
        for name, m in s["monitors"].items():
            if not m:
                continue
            ops = " ".join(f"TPR@{float(k):.0%}FPR={_f(v['tpr'])}" for k, v in m["operating_points"].items())
            out.append(
                f"  {MONITOR_NAMES.get(name, name):<45} AUROC {_f(m['auroc']['value'])} [{_f(m['auroc']['ci'][0], 2)}, "
                f"{_f(m['auroc']['ci'][1], 2)}]  {ops}  unparseable {_rate(m['failures']['unparseable'])}"
            )
        for key, w in s["writer"].items():
            if w:
                cid = w.get("call_id_accuracy")
                out.append(
                    f"  writer {key:<22} agreement {_f(w['content_agreement']['value'])} compliance "
                    f"{_f(w['protocol_compliance']['value'])}"
                    + (f" call id {_rate(cid)}" if cid else "")
                    + (f" parse rate {_rate(w['parse_rate'])}" if "parse_rate" in w else "")
                )
    else:
        out.append(f"{s['cases']} cases, {s['requests']} requests, executor {s['executor']}")
        for cond, c in s["conditions"].items():
            if not c:
                continue
            r = c["rates"]
            m = (s.get("memory") or {}).get(cond) or {}
            mem = ""
            if m.get("status"):  # so that a writer whose memories are all invalid never reads as "no memory"
                st = m["status"]
                mem = f"  memories valid {st.get('valid', 0)} empty {st.get('empty', 0)} invalid {st.get('invalid', 0)}"
                if m.get("invalid_reasons"):
                    mem += " (" + ", ".join(f"{k} {v}" for k, v in m["invalid_reasons"].items()) + ")"
                if m.get("failed_updates"):
                    mem += f"  failed updates {m['failed_updates']}/{m['updates']}"
            out.append(
                f"  {CONDITION_NAMES.get(cond, cond):<32} authorized use {_rate(r['authorized_use'])}  unauthorized "
                f"{_rate(r['unauthorized_submission'])}  escalation {_rate(r['escalation'])}  calibrated {r['calibrated']}"
                + mem
            )
    return out
