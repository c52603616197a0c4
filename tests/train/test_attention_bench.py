"""Smoke test of bench/attention.py (in-process, tiny shapes): CSV, PNG and MD are written."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_attention", ROOT / "bench" / "attention.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_attention_smoke(tmp_path):
    threads = torch.get_num_threads()
    try:
        _bench_module().main(
            [
                "--inprocess",
                "--lengths", "48", "80",
                "--heads", "2", "--kv-heads", "1", "--head-dim", "16",
                "--impls", "blockwise", "eager", "sdpa", "sdpa-bf16", "blockwise-tf32",
                "--reps", "1", "--threads", "1",
                "--out", str(tmp_path), "--tag", "smoke",
            ]
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    stem = tmp_path / "attention-smoke-cpu"
    rows = list(csv.DictReader(open(f"{stem}.csv")))
    assert len(rows) == 10 and all(r["status"].startswith("ok") for r in rows), rows
    err = {(r["impl"], r["L"]): float(r["err_max"]) for r in rows}
    for L in ("48", "80"):
        assert err[("blockwise", L)] < 1e-5
        assert err[("sdpa-bf16", L)] > 100 * err[("blockwise", L)]
        assert 1e-5 < err[("blockwise-tf32", L)] < 3e-3
    assert Path(f"{stem}.png").stat().st_size > 10_000
    md = Path(f"{stem}.md").read_text()
    assert "| L | peak memory ours / eager |" in md and "getrusage" in md
