"""Synthetic-corpus throughput on one core: runs generated per second, side by side with the target.

    python bench/synth.py [--runs 2000] [--policy-cases 200] [--seed 0] [--write bench/results/synth-DATE-cpu.md]

Measures, pinned to one CPU where the OS allows it:
  build   runs built in memory (simulate, seal, teacher ledger, sabotage, gold verdict, reader)
  corpus  generate_corpus end to end (the above + canonical JSONL shards + sha256 + manifest)
  cases   policy cases built in memory
and prints each rate with its ratio to the 300 runs/s target (the default corpus must build in seconds).
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from data_prep.synthetic import SynthConfig, generate_corpus, iter_policy_cases, iter_runs_generated
from data_prep.yaml_config import strict_parser

TARGET_RUNS_PER_S = 300.0


def _pin_one_core() -> str:
    if hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        return f"pinned to cpu {cpu}"
    return "not pinned (no sched_setaffinity)"


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    ap = strict_parser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--policy-cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="take the best of this many timings")
    ap.add_argument("--write", type=Path, help="also write the table as markdown here")
    args = ap.parse_args(argv)
    pinned = _pin_one_core()
    cfg = SynthConfig(runs=args.runs, policy_cases=args.policy_cases, seed=args.seed)
    build = _best(lambda: sum(1 for _ in iter_runs_generated(cfg)), args.repeat)
    cases = _best(lambda: sum(1 for _ in iter_policy_cases(cfg)), args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        runs_only = SynthConfig(runs=args.runs, policy_cases=0, seed=args.seed)
        corpus = _best(lambda: generate_corpus(runs_only, Path(tmp) / "c"), args.repeat)
        full = _best(lambda: generate_corpus(cfg, Path(tmp) / "d"), 1)
        size = sum(p.stat().st_size for p in (Path(tmp) / "d").rglob("*.jsonl"))
    rows = [
        ("build (in memory)", args.runs / build, "runs/s"),
        ("corpus (shards + manifest)", args.runs / corpus, "runs/s"),
        ("policy cases (in memory)", args.policy_cases / cases, "cases/s"),
    ]
    lines = [
        f"# bench/synth.py: {args.runs} runs, {args.policy_cases} policy cases, seed {args.seed}",
        "",
        f"host: {platform.machine()}, {os.cpu_count()} CPUs visible, {pinned}; Python {platform.python_version()}",
        "",
        "| measure | rate | vs 300 runs/s target |",
        "|---|---:|---:|",
    ]
    for name, rate, unit in rows:
        ratio = f"{rate / TARGET_RUNS_PER_S:.2f}x" if unit == "runs/s" else "-"
        lines.append(f"| {name} | {rate:,.0f} {unit} | {ratio} |")
    lines += [
        "",
        f"default corpus ({args.runs} runs + {args.policy_cases} cases) end to end: {full:.2f} s, {size / 1e6:.1f} MB of JSONL",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        args.write.write_text(text + "\n")
    return 0 if args.runs / corpus >= TARGET_RUNS_PER_S else 1


if __name__ == "__main__":
    sys.exit(main())
