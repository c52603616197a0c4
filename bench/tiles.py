"""Offline tile table of the Triton attention kernels for sm86 / sm89 / sm90 (no GPU needed).

Compiles each kernel with Triton's bundled ptxas for every (architecture, head dim, kernel, precision,
input dtype) and walks the candidate tiles in order, the way the launcher walks its ladder at run time:
the first candidate with zero register spills that fits the architecture's shared memory per block
(sm86/89: 101,376 B; sm90: 232,448 B) is chosen. Every compiled candidate is recorded (registers, spill
bytes, shared memory), so the table also shows why larger tiles were rejected.

    nice -n 19 python bench/tiles.py --jobs 2            # writes bench/results/attention-tiles-<date>.md/.json
    python bench/tiles.py --archs 86 --tag sm86 ...; python bench/tiles.py --merge a.json b.json  # in parts

The candidates are ``triton_impl``'s own ladders (``default_configs``); this script does not choose
tiles of its own, it checks them. Compiled with the Triton of this environment: the GPU's Triton may
allocate registers differently.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KINDS = ("fwd", "dkdv", "dq")
# (precision, input dtype): what training runs (bf16 operands from bf16 inputs), the exact mode from fp32
# and from bf16 inputs (the loads are upcast), and tf32
MODES = (("bf16", "bf16"), ("ieee", "fp32"), ("ieee", "bf16"), ("tf32", "fp32"))
ARCHS = (86, 89, 90)
HEAD_DIMS = (128, 256)


def walk(job: tuple) -> list[dict]:
    """Compile the ladder of one job until a candidate has no spills and fits; all compiled rows."""
    os.environ["TRITON_INTERPRET"] = "0"
    import warnings

    warnings.filterwarnings("ignore")
    from train.attention import triton_impl as ti

    arch, head_dim, kind, precision, input_dtype = job
    rows = []
    for rank, (bm, bn, warps, stages) in enumerate(ti.default_configs(kind, head_dim, precision)):
        try:
            r = ti.compile_offline(
                kind, head_dim, precision, bm, bn, warps, stages, arch=arch, input_dtype=input_dtype
            )
        except Exception as err:  # noqa: BLE001 - recorded in the table
            r = {"kind": kind, "arch": arch, "head_dim": head_dim, "precision": precision,
                 "input_dtype": input_dtype, "block_m": bm, "block_n": bn, "num_warps": warps,
                 "num_stages": stages, "error": str(err)[:120]}  # fmt: skip
        r["ladder_index"] = rank
        r["ok"] = bool(r.get("fits")) and r.get("spill_stores") == 0
        rows.append(r)
        if r["ok"]:
            break
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1, help="parallel compiler processes")
    ap.add_argument("--archs", type=int, nargs="+", default=list(ARCHS))
    ap.add_argument("--head-dims", type=int, nargs="+", default=list(HEAD_DIMS))
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--tag", default=time.strftime("%Y-%m-%d"))
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="merge the JSON of earlier sweeps instead")
    args = ap.parse_args(argv)
    if args.merge:
        merge(args.merge, Path(args.out), args.tag)
        return
    import triton

    jobs = [(a, d, k, p, dt) for a in args.archs for d in args.head_dims for k in KINDS for p, dt in MODES]
    results: list[list[dict]] = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for rows in pool.map(walk, jobs):
            results.append(rows)
            last = rows[-1]
            print(
                f"sm{last['arch']} D{last['head_dim']} {last['kind']:4s} {last['precision']:4s} "
                f"in={last['input_dtype']}: {last['block_m']}x{last['block_n']} w{last['num_warps']} "
                f"s{last['num_stages']} regs={last.get('n_regs')} spills={last.get('spill_stores')} "
                f"shared={last.get('shared')} {'ok' if last['ok'] else 'NO CONFIG OK'}",
                flush=True,
            )
    write_report(results, Path(args.out), args.tag, triton.__version__)


def write_report(results: list[list[dict]], out: Path, tag: str, triton_version: str) -> None:
    """The table (markdown) and every compiled row (JSON) of a sweep."""
    out.mkdir(parents=True, exist_ok=True)
    flat = [r for rows in results for r in rows]
    (out / f"attention-tiles-{tag}.json").write_text(
        json.dumps({"triton": triton_version, "rows": flat}, indent=1) + "\n"
    )
    lines = [
        f"# Triton attention tiles for sm86 / sm89 / sm90, compiled offline, {tag}",
        "",
        f"`nice -n 19 python bench/tiles.py --jobs 2` with Triton {triton_version} and its bundled ptxas, "
        "no GPU. For each kernel the launcher's ladder (`triton_impl._CONFIGS`) is walked until a tile has "
        "0 spill bytes and fits the shared memory per block (sm86/89 101,376 B, sm90 232,448 B); the "
        "launcher applies the same two rules on the GPU. Chosen rows are marked **chosen**; rows above "
        "them in the same group were compiled and rejected. Registers and spills come from this Triton; "
        "a different Triton on the GPU may allocate differently (bench/gpu_check.py reports what ran).",
        "",
        "| sm | D | kernel | precision | inputs | block_m x block_n | warps | stages | regs | spill st/ld B "
        "| shared B | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for rows in results:
        for r in rows:
            verdict = (
                "**chosen**"
                if r["ok"]
                else (r.get("error") or ("spills" if r.get("spill_stores") else "over shared memory"))
            )
            if not r["ok"] and r is rows[-1]:
                verdict += "; nothing in the ladder passes"
            lines.append(
                f"| {r['arch']} | {r['head_dim']} | {r['kind']} | {r['precision']} | {r['input_dtype']} | "
                f"{r['block_m']}x{r['block_n']} | {r['num_warps']} | {r['num_stages']} | {r.get('n_regs', '')} | "
                f"{r.get('spill_stores', '')}/{r.get('spill_loads', '')} | {r.get('shared', '')} | {verdict} |"
            )
    bad = sum(not rows[-1]["ok"] for rows in results)
    lines += ["", f"{len(results) - bad} of {len(results)} kernel variants have a chosen tile."]
    (out / f"attention-tiles-{tag}.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out}/attention-tiles-{tag}.md ({bad} variants without a passing tile)")


def merge(paths: list[str], out: Path, tag: str) -> None:
    """One report from the JSON of several sweeps (e.g. one per ``--archs``)."""
    results: dict[tuple, list[dict]] = {}
    version = None
    for path in paths:
        data = json.loads(Path(path).read_text())
        version = version or data["triton"]
        for r in data["rows"]:
            key = (r["arch"], r["head_dim"], r["kind"], r["precision"], r["input_dtype"])
            results.setdefault(key, []).append(r)
    write_report([results[k] for k in sorted(results)], out, tag, version)


if __name__ == "__main__":
    main()
