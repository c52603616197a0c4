"""Throughput of the sanitizer (all packs) on what the build sanitizes, beside the same rules applied
one after another with Python's ``re`` in the same run.

    python bench/sanitizer.py [--runs 1500] [--records 12000] [--seed 7] [--md OUT.md] [--json OUT.json]

First rows, the build's workload: every turn of every rendered example (writer and reader tasks, policy
cases too) sanitized message by message with the field path ``<task>.<role>``
(``data_prep.sft.sanitize.ExampleSanitizer``: one rule set, personal data pseudonymized), for a
synthetic corpus as generated and for the same corpus with secrets and personal data planted in every
field (``data_prep.sft.planted``: a stress case, a finding every ~600 bytes). The baseline applies
each applicable rule in turn with ``re`` (same confirmers, same surrogates). The other rows are the
CLI's ``apply`` loop over ledger records. Both engines are warmed on a corpus of another seed first
(RE2 builds DFA states lazily, once per process), so no timed text was seen before.

The corpus is ``sanitizer.corpus.bench_corpus``: ledger-run records (model_ledger entries with ordinary
descriptions, a teacher verdict, metadata with hidden identifiers), 3% of them carrying a planted
secret, reasoning block or label word. Both engines run the same JSONL loop (parse, sanitize, write
canonical JSON) on one core (the process is pinned to one CPU); MB/s is input bytes per second of
process CPU time (wall time is reported too; on a shared machine it is the noisier figure). A second
corpus variant puts a quoted word (a ``\\"`` escape) in every teacher rationale, so no line can take
the raw-line pre-filter and every record is walked (the record-level pre-filter still applies).

"identical output lines" counts the ledger lines both engines write alike. The two regex engines agree
(every rule's raw spans under RE2 and under ``re`` are equal on every string of both ledger corpora);
the lines that differ (9 of 3000 at seed 7, a 10th for some keys) come from what the baseline lacks:
overlapping matches of two rules are resolved into one span by the engine (longest first, a loser
sticking out widens the winner) but rewritten one rule after another by the baseline, and the engine
leaves the surrogates it made alone while the baseline's later rules match inside them (an IBAN
surrogate whose digits pass as a Luhn-valid card, depending on the run's random key).
"""

from __future__ import annotations

import io
import json
import os
import platform
import random
import re
import sys
import time
from datetime import date
from pathlib import Path

# This file is itself named sanitizer.py: put the repository first so ``import sanitizer`` finds the
# package, not this script's directory.
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from data_prep.yaml_config import strict_parser  # noqa: E402
from sanitizer import Sanitizer, SanitizeResult  # noqa: E402
from sanitizer.checks import VALIDATORS  # noqa: E402
from sanitizer.cli import process_stream  # noqa: E402
from sanitizer.core import _rebuild, hidden_ids  # noqa: E402
from sanitizer.corpus import bench_corpus  # noqa: E402
from sanitizer.engine import HIDDEN_ID_PLACEHOLDER, pair_tags  # noqa: E402
from sanitizer.fieldpath import covered_by_any  # noqa: E402
from sanitizer.report import Report  # noqa: E402


class SequentialRe:
    """The baseline: every rule compiled with Python's ``re`` and applied to every selected string one
    rule after another (same record walk, field rules, confirmers, allowlists, block pairing)."""

    def __init__(self, san: Sanitizer):
        self.san = san
        self.rules = []
        for r in san.rules:
            if r.kind == "quote":
                continue
            rx = re.compile(py_pattern(r.pattern))
            close = re.compile(py_pattern(r.close)) if r.close else None
            allow = [re.compile(py_pattern(p)) for p in r.allow_patterns]
            check = VALIDATORS.get(r.validate) if r.validate else None
            if r.validate == "base64_secret":
                check = san._base64_secret  # the same confirmation work as the engine's
            self.rules.append((r, rx, close, allow, check))
        pseudo = san.pseudonymizer
        self.surrogate = (lambda cls, seg: pseudo.surrogate(cls, seg)) if pseudo is not None else None
        self._lit_cache: dict[tuple, re.Pattern] = {}

    def _literal_rx(self, lits: tuple[str, ...]) -> re.Pattern | None:
        rx = self._lit_cache.get(lits)
        if rx is None and lits:
            parts = []
            for lit in sorted(set(lits), key=lambda s: (-len(s), s)):
                p = re.escape(lit)
                if re.match(r"\w", lit[0], re.ASCII):
                    p = r"\b" + p
                if re.match(r"\w", lit[-1], re.ASCII):
                    p += r"\b"
                parts.append(p)
            rx = self._lit_cache[lits] = re.compile("|".join(parts))
        return rx

    @staticmethod
    def _spans(rx: re.Pattern, text: str):
        group = "m" if "m" in rx.groupindex else 0
        pos = 0
        while pos <= len(text):
            m = rx.search(text, pos)
            if m is None:
                return
            s, e = m.span(group)
            if s < 0:
                s, e = m.span()
            if e > s:
                yield s, e
            pos = e if e > pos else pos + 1

    def _apply_rule(self, text: str, rule, rx, close, allow, check) -> tuple[str, int, bool]:
        spans = []
        if close is not None:
            tags = [(s, e, 1) for s, e in self._spans(rx, text)]
            tags += [(s, e, 0) for s, e in self._spans(close, text)]
            spans = pair_tags(tags, len(text))  # the engine's pairing, on the baseline's spans
        else:
            for s, e in self._spans(rx, text):
                seg = text[s:e]
                if check is not None:
                    win = check(seg.encode())
                    if win is None:
                        continue
                    b = seg.encode()
                    s2 = s + len(b[: win[0]].decode())
                    e = s2 + len(b[win[0] : win[1]].decode())
                    s, seg = s2, text[s2:e]
                if any(a.fullmatch(seg) for a in allow) or seg == rule.placeholder:
                    continue
                spans.append((s, e))
        if not spans:
            return text, 0, False
        if rule.action == "drop":
            return text, len(spans), True
        rep = rule.placeholder if rule.action == "redact" else ""
        out, pos = [], 0
        for s, e in spans:
            if s < pos:
                continue
            out.append(text[pos:s])
            out.append(self.surrogate(rule.pii, text[s:e]) if rule.action == "pseudonymize" else rep)
            pos = e
        out.append(text[pos:])
        return "".join(out), len(spans), False

    def sanitize_json_line(
        self, line: bytes, fields=None, hidden_ids_field="metadata.hidden_identifiers", context=""
    ):
        record = json.loads(line)
        if not isinstance(record, dict):
            raise ValueError("expected a JSON object")
        ids = tuple(hidden_ids(record, hidden_ids_field))
        dyn = self._literal_rx(ids) if ids else None
        items, _sources = self.san._collect(record, None if fields is None else tuple(fields))
        changes, n_found, dropped = [], 0, False
        for keys, k, value, info in items:
            text = value
            for i, (rule, rx, close, allow, check) in enumerate(self.rules):
                if info.allowed is not None and i not in info.allowed:
                    continue
                text, n, drop = self._apply_rule(text, rule, rx, close, allow, check)
                n_found += n
                dropped |= drop
            if dyn is not None and info.dynamic:
                text, n = dyn.subn(HIDDEN_ID_PLACEHOLDER, text)
                n_found += n
            if text != value:
                changes.append((keys + (k,), text))
        return SanitizeResult(_rebuild(record, changes) if changes else record, [], dropped, [])

    def sanitize_messages(self, task: str, messages: list[dict], hidden: tuple[str, ...]) -> list[dict]:
        """Every turn, each applicable rule in turn (the rule's fields against ``<task>.<role>``)."""
        dyn = self._literal_rx(hidden) if hidden else None
        out = []
        for m in messages:
            npath = f"{task}.{m['role']}"
            text = m["content"]
            for rule, rx, close, allow, check in self.rules:
                if covered_by_any(rule.fields, npath) and not covered_by_any(rule.exclude_fields, npath):
                    text = self._apply_rule(text, rule, rx, close, allow, check)[0]
            if dyn is not None:
                text = dyn.sub(HIDDEN_ID_PLACEHOLDER, text)
            out.append({**m, "content": text})
        return out


def py_pattern(p: str) -> str:
    """An RE2 pattern in Python ``re`` syntax (``\\p{Z}`` and ``\\x{....}`` spelled out)."""
    spaces = "\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000 "
    p = p.replace("\\p{Z}", spaces)
    return re.sub(r"\\x\{([0-9A-Fa-f]{4})\}", lambda m: "\\u" + m.group(1), p)


def rendered_corpus(
    runs: int, seed: int, planted: bool = True
) -> list[tuple[str, list[dict], tuple[str, ...]]]:
    """``(task, messages, hidden ids)`` for every example the build would render from a synthetic
    corpus, planted or as generated (before any filter: every run, both run tasks; every case's
    memory task)."""
    import tempfile

    from data_prep.sft.planted import plant_corpus
    from data_prep.sft.render import (
        Prompts,
        render_reader_verdict,
        render_writer_action,
        render_writer_memory,
    )
    from data_prep.synthetic import SynthConfig, generate_corpus

    prompts = Prompts(ROOT / "configs" / "prompts")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "src", Path(tmp) / "planted"
        generate_corpus(
            SynthConfig(runs=runs, policy_cases=max(1, runs // 20), seed=seed), src, progress=False
        )
        if planted:
            plant_corpus(src, dst, seed=seed)
        else:
            dst = src
        for path in sorted((dst / "runs").glob("*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    run = json.loads(line)
                    hidden = tuple(run["metadata"].get("hidden_identifiers", []))
                    entries = {e["call_id"]: e for e in run["model_ledger"] or []}
                    if all(c["call_id"] in entries for c in run["trajectory"]):
                        msgs = render_writer_action(run, entries, prompts.text["writer_action"])
                        out.append(("writer_action", msgs, hidden))
                    if run["teacher"]["verdict"]:
                        msgs = render_reader_verdict(run, prompts.text["reader_verdict"])
                        out.append(("reader_verdict", msgs, hidden))
                except (ValueError, KeyError, TypeError):
                    continue  # the planted broken records
        for path in sorted((dst / "policy_cases").glob("*.jsonl")):
            for line in path.read_text(encoding="utf-8").splitlines():
                case = json.loads(line)
                memory = (case.get("teacher") or {}).get("memory") or []
                msgs = render_writer_memory(case, memory, prompts.text["writer_memory"])
                out.append(
                    ("writer_memory", msgs, tuple(case.get("metadata", {}).get("hidden_identifiers", [])))
                )
    return out


def run_rendered(label: str, examples, warm, scrub, base) -> dict:
    mb = sum(len(m["content"].encode()) for _t, msgs, _h in examples for m in msgs) / 1e6
    for task, msgs, hidden in warm:  # other examples: RE2 builds its DFA states lazily, once per build
        scrub.messages(task, msgs, hidden)
        base.sanitize_messages(task, msgs, hidden)
    wall, cpu = time.perf_counter(), time.process_time()
    outs = [scrub.messages(task, msgs, hidden) for task, msgs, hidden in examples]
    re2_cpu, re2_wall = time.process_time() - cpu, time.perf_counter() - wall
    wall, cpu = time.perf_counter(), time.process_time()
    for task, msgs, hidden in examples:
        base.sanitize_messages(task, msgs, hidden)
    re_cpu, re_wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        **_rates(
            label,
            len(examples),
            mb,
            re2_cpu,
            re2_wall,
            re_cpu,
            re_wall,
        ),
        "findings": sum(len(f) for _m, f, _d in outs),
        "changed_records": sum(bool(f) for _m, f, _d in outs),
        "dropped_records": sum(bool(d) for _m, _f, d in outs),
        "raw_line_prefiltered": 0.0,
        "identical_output_lines": "-",
    }


def _rates(corpus: str, records: int, mb: float, re2_cpu, re2_wall, re_cpu, re_wall) -> dict:
    return {
        "corpus": corpus,
        "records": records,
        "mb": round(mb, 2),
        "re2_set_mb_s_cpu": round(mb / re2_cpu, 1),
        "re2_set_mb_s_wall": round(mb / re2_wall, 1),
        "python_re_mb_s_cpu": round(mb / re_cpu, 1),
        "python_re_mb_s_wall": round(mb / re_wall, 1),
        "speedup_cpu": round(re_cpu / re2_cpu, 2),
    }


def make_corpus(n: int, seed: int, escaped: bool) -> list[bytes]:
    recs = bench_corpus(random.Random(seed), n, plant_rate=0.03)
    lines = []
    for rec in recs:
        if escaped:
            rec["teacher"]["verdict"]["rationale"] += '\nSee the entry marked "c0001" above.'
        lines.append(json.dumps(rec, ensure_ascii=False).encode() + b"\n")
    return lines


def run(engine, lines: list[bytes], rule_actions: dict) -> tuple[float, float, bytes, Report]:
    report = Report("apply", rule_actions)
    out = io.BytesIO()
    wall, cpu = time.perf_counter(), time.process_time()
    process_stream(lines, engine, report, out=out)
    return time.process_time() - cpu, time.perf_counter() - wall, out.getvalue(), report


def main(argv: list[str] | None = None) -> int:
    ap = strict_parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1500, help="synthetic runs rendered for the first row")
    ap.add_argument("--records", type=int, default=12000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--md", default=None, help="write the results as markdown here")
    ap.add_argument("--json", default=None, help="write the results as JSON here")
    ap.add_argument("--no-pin", action="store_true", help="do not pin the process to one CPU")
    args = ap.parse_args(argv)
    if not args.no_pin and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    t = time.perf_counter()
    san = Sanitizer.from_packs(["reasoning", "secrets", "leakage"])
    load_s = time.perf_counter() - t
    base = SequentialRe(san)
    actions = {r.id: r.action for r in san.rules}
    from data_prep.sft.config import load_build_config
    from data_prep.sft.sanitize import ExampleSanitizer

    cfg = load_build_config(ROOT / "configs" / "data" / "default.yaml")
    scrub = ExampleSanitizer([*cfg.sanitizer_packs, *cfg.writer_text_packs], b"bench-key" * 4, cfg.pii_modes)
    base_scrub = SequentialRe(scrub.san)
    warm_seed = args.seed + 1000  # warm-up text is never timed
    results = []
    for label, planted in (
        ("rendered examples, every turn (synthetic corpus: the build's workload)", False),
        ("rendered examples, every turn (planted corpus: a finding every ~600 bytes)", True),
    ):
        warm = rendered_corpus(max(20, args.runs // 4), warm_seed, planted)
        results.append(
            run_rendered(label, rendered_corpus(args.runs, args.seed, planted), warm, scrub, base_scrub)
        )
    for variant, escaped in (("ledger corpus", False), ('ledger corpus, rationales with \\" escapes', True)):
        lines = make_corpus(args.records, args.seed, escaped)
        mb = sum(map(len, lines)) / 1e6
        warm_lines = make_corpus(max(500, args.records // 4), warm_seed, escaped)
        run(san, warm_lines, actions)  # warm caches on other records
        run(base, warm_lines, actions)
        re2_cpu, re2_wall, re2_out, rep = run(san, lines, actions)
        re_cpu, re_wall, re_out, _ = run(base, lines, actions)
        a, b = re2_out.splitlines(), re_out.splitlines()
        same = sum(x == y for x, y in zip(a, b))
        prefiltered = sum(san.sanitize_json_line(x).prefiltered for x in lines[:2000]) / min(2000, len(lines))
        results.append(
            {
                **_rates(variant, len(lines), mb, re2_cpu, re2_wall, re_cpu, re_wall),
                "findings": rep.findings,
                "changed_records": rep.changed,
                "dropped_records": rep.dropped,
                "raw_line_prefiltered": round(prefiltered, 3),
                "identical_output_lines": f"{same}/{len(a)}",
            }
        )
    meta = {
        "date": date.today().isoformat(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu": _cpu_name(),
        "cores_used": 1 if not args.no_pin else os.cpu_count(),
        "packs_load_s": round(load_s, 3),
        "rules": len(san.rules),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "seed": args.seed,
    }
    md = _markdown(meta, results)
    print(md)
    if args.md:
        Path(args.md).write_text(md)
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    return 0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _markdown(meta: dict, results: list[dict]) -> str:
    rows = [
        "| corpus | records | MB | RE2 set MB/s (cpu) | RE2 set MB/s (wall) | sequential `re` MB/s (cpu) | "
        "sequential `re` MB/s (wall) | speedup (cpu) | findings | raw-line pre-filtered | identical output lines |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        rows.append(
            f"| {r['corpus']} | {r['records']} | {r['mb']} | {r['re2_set_mb_s_cpu']} | {r['re2_set_mb_s_wall']} | "
            f"{r['python_re_mb_s_cpu']} | {r['python_re_mb_s_wall']} | {r['speedup_cpu']}x | {r['findings']} | "
            f"{r['raw_line_prefiltered']:.1%} | {r['identical_output_lines']} |"
        )
    head = (
        f"# sanitizer apply throughput ({meta['date']}, CPU, {meta['cores_used']} core)\n\n"
        f"`python bench/sanitizer.py` - {meta['cpu']}, Python {meta['python']}, {meta['rules']} rules "
        f"(reasoning, secrets, leakage), packs load + self-test {meta['packs_load_s']} s, seed {meta['seed']}.\n"
        "Both engines run the same loop: parse the JSONL line, sanitize, write canonical JSON. "
        "MB/s is input bytes per CPU second of the pinned process (wall-clock figures beside it).\n\n"
    )
    return head + "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.exit(main())
