"""Whole-pipeline build throughput (runs/s) and peak memory, beside merely reading the corpus.

    python bench/build.py [--runs 20000] [--seed 0]

Times are CPU time of the measured process (time.process_time), so other load does not inflate
them. Generates a synthetic corpus, then in separate processes (so each peak RSS is its own): (1) read and
``json.loads`` every line, (2) the full build. Prints runs/s, the ratio, and peak RSS; a second build
on a quarter of the corpus (``--small``) shows whether memory grows with corpus size: the ratio of
the two peaks and the growth per 1,000 runs. Targets: >= 1,000 runs/s; peak RSS flat in corpus size
(big / small <= 1.10). The machine's load average is printed before and after.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from data_prep.yaml_config import strict_parser

CHILD_READ = """
import json, resource, sys, time
from pathlib import Path
t = time.process_time(); n = 0
for p in sorted(Path(sys.argv[1]).glob('runs/*.jsonl')):
    with open(p, encoding='utf-8') as fh:
        for line in fh:
            json.loads(line); n += 1
print(json.dumps({'runs': n, 'seconds': time.process_time() - t, 'peak_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

CHILD_BUILD = """
import json, resource, sys, time
from pathlib import Path
from data_prep.sft.config import load_build_config
from data_prep.sft.pipeline import build
import datasets  # imported before timing: a fixed cost, not per-run work
cfg = load_build_config(sys.argv[3])
t = time.process_time()
m = build(Path(sys.argv[1]), Path(sys.argv[2]), cfg, progress=False)
runs = m['counts']['writer_action']['input']
print(json.dumps({'runs': runs, 'seconds': time.process_time() - t, 'peak_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = strict_parser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20000)
    ap.add_argument("--small", type=int, default=None, help="runs of the second build (default: --runs / 4)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    small_runs = args.small if args.small is not None else args.runs // 4
    from data_prep.synthetic import SynthConfig, generate_corpus

    print("load average (1, 5, 15 min) before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))

    config = str(Path(__file__).resolve().parents[1] / "configs" / "data" / "default.yaml")
    with tempfile.TemporaryDirectory() as tmp:
        big, small = Path(tmp) / "big", Path(tmp) / "small"
        t = time.perf_counter()
        generate_corpus(SynthConfig(runs=args.runs, policy_cases=0, seed=args.seed), big)
        generate_corpus(SynthConfig(runs=small_runs, policy_cases=0, seed=args.seed), small)
        print(f"generated corpora in {time.perf_counter() - t:.1f} s")
        read = child(CHILD_READ, str(big))
        full = child(CHILD_BUILD, str(big), str(Path(tmp) / "out-big"), config)
        quarter = child(CHILD_BUILD, str(small), str(Path(tmp) / "out-small"), config)
    rate = full["runs"] / full["seconds"]
    print(f"read + json.loads: {read['runs'] / read['seconds']:10.0f} runs/s  peak {read['peak_mb']:.0f} MB")
    print(
        f"full build:        {rate:10.0f} runs/s  peak {full['peak_mb']:.0f} MB  ({full['runs']} runs, {full['seconds']:.1f} s)"
    )
    print(
        f"small build:       {quarter['runs'] / quarter['seconds']:10.0f} runs/s  peak {quarter['peak_mb']:.0f} MB"
        f"  ({quarter['runs']} runs, {quarter['seconds']:.1f} s)"
    )
    print(f"ratio build / read time: {full['seconds'] / read['seconds']:.1f}x")
    growth = full["peak_mb"] / quarter["peak_mb"]
    per_1k = (full["peak_mb"] - quarter["peak_mb"]) / ((full["runs"] - quarter["runs"]) / 1000)
    print(
        f"memory vs corpus size: {quarter['runs']} runs -> {quarter['peak_mb']:.0f} MB, "
        f"{full['runs']} runs -> {full['peak_mb']:.0f} MB (x{growth:.2f} for x{full['runs'] / quarter['runs']:.0f} runs, "
        f"{per_1k:+.2f} MB per 1,000 runs)"
    )
    print(f"target >= 1000 runs/s: {'met' if rate >= 1000 else 'NOT met'}")
    print(f"target peak RSS flat (x{growth:.2f} <= x1.10): {'met' if growth <= 1.10 else 'NOT met'}")
    print("load average (1, 5, 15 min) after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
