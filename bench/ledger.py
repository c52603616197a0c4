"""Verification + reconciliation throughput on generated runs, beside plain ``json.loads``.

    python bench/ledger.py [--runs 10000] [--seed 0]

Times are CPU time of this process (time.process_time), so other load on the machine does not
inflate them. Prints runs/s for the full path (strict parse, typed load, chain + trajectory verification,
reconciliation) and the ratio to merely ``json.loads``-ing the same file, and the machine's load
average before and after. Target: >= 5,000 runs/s on one core.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
import time
from pathlib import Path

from data_prep.assemble import assemble_run, clean_labels, faithful_entry
from data_prep.reconcile import reconcile
from data_prep.records import iter_runs, write_jsonl
from data_prep.yaml_config import strict_parser

TOOLS = ["lookup_vendor", "update_bank_account", "pay_invoice", "notify", "open_ticket", "get_calendar"]


def make_runs(n: int, seed: int):
    rng = random.Random(seed)
    for i in range(n):
        k = rng.randint(4, 14)
        calls = []
        for s in range(1, k + 1):
            tool = rng.choice(TOOLS)
            calls.append(
                {
                    "seq": s,
                    "call_id": f"c{s:03d}",
                    "tool": tool,
                    "arguments": {
                        "id": f"X-{rng.randint(100, 999)}",
                        "amount": rng.randint(1, 90000),
                        "note": "routine follow up",
                    },
                    "status": rng.choice(["succeeded", "succeeded", "rejected", "failed"]),
                    "policy_class": rng.choice(["benign", "benign", "policy_relevant"]),
                    "result": {"ok": True, "ref": f"R-{rng.randint(1, 10**6)}"},
                }
            )
        ledger = [faithful_entry(c) for c in calls]
        if rng.random() < 0.3:
            del ledger[rng.randrange(len(ledger))]
        yield assemble_run(
            run_id=f"bench-{seed}-{i:06d}",
            workflow_id="bench-v1",
            family="bench",
            domain="bench",
            messages=[{"role": "user", "content": "Do the task."}],
            tools=[{"type": "function", "function": {"name": t}} for t in TOOLS],
            calls=calls,
            model_ledger=ledger,
            labels=clean_labels(),
        )


def main() -> None:
    ap = strict_parser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print("load average (1, 5, 15 min) before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.jsonl"
        write_jsonl(path, make_runs(args.runs, args.seed))
        size_mb = path.stat().st_size / 1e6
        t0 = time.process_time()
        with open(path, encoding="utf-8") as fh:
            n_plain = sum(1 for line in fh if json.loads(line))
        t_plain = time.process_time() - t0
        t0 = time.process_time()
        verdicts: dict[str, int] = {}
        n = 0
        for _, run in iter_runs(path):
            rec = reconcile(run)
            assert rec.integrity is None
            verdicts[rec.verdict.label] = verdicts.get(rec.verdict.label, 0) + 1
            n += 1
        t_full = time.process_time() - t0
    assert n == n_plain == args.runs
    rate = n / t_full
    print(f"runs: {n} ({size_mb:.1f} MB), verdicts: {dict(sorted(verdicts.items()))}")
    print(f"json.loads only:              {n_plain / t_plain:10.0f} runs/s ({t_plain:.2f} s)")
    print(f"verify + reconcile (full):    {rate:10.0f} runs/s ({t_full:.2f} s)")
    print(f"ratio full / json.loads time: {t_full / t_plain:.2f}x slower")
    print(f"target >= 5000 runs/s: {'met' if rate >= 5000 else 'NOT met'}")
    print("load average (1, 5, 15 min) after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
