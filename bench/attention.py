"""Benchmark of the blockwise fp32 attention: time, peak memory and error against fp64.

Forward + backward of causal GQA attention at the Gemma-3-12B global-layer shape (head_dim 256, 2 query
heads per key/value head), scaled to fit: on CPU 4 query / 2 KV heads by default (the full 16 / 8 on
CUDA), batch 1, L in {1k, 2k, 4k, 8k}.

Implementations:
  CPU:  blockwise (torch backend, fp32), eager (transformers' eager: matmul, fp32 softmax, matmul with
        repeated K/V and an additive causal mask), sdpa (fp32), sdpa-bf16, and blockwise-tf32 /
        blockwise-bf16 (the Triton operand precisions, emulated bit-exactly by the torch backend; their
        times are not meaningful, their errors are).
  CUDA: triton (ieee), triton-tf32, triton-bf16, sdpa (fp32), sdpa-bf16, eager, flash-attn (bf16, if
        installed).

Method (stated in the results file too):
  * every (implementation, L) runs in its own subprocess;
  * memory: CPU: peak resident set (``getrusage(RUSAGE_SELF).ru_maxrss``) after the first forward +
    backward minus the resident set (VmRSS) just before it, when the inputs (and eager's causal mask,
    which transformers builds once per model forward) exist; CUDA: ``torch.cuda.max_memory_allocated`` over the same window;
  * time: best of ``--reps`` forward + backward runs after that first one;
  * error: max |x - ref| / max |ref| over the output and dq, dk, dv, where ref is an fp64 computation on
    the same fp32 inputs (``train.attention.reference_forward_backward``: exact softmax, one panel of 512
    query rows at a time). bf16 implementations get the fp32 inputs rounded to bf16.

Usage:
  python bench/attention.py                      # CPU, writes bench/results/attention-<tag>-cpu.{csv,png,md}
  python bench/attention.py --device cuda        # see bench/gpu_attention.sh
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

KERNELS = ("fwd", "dkdv", "dq")
CPU_IMPLS = ["blockwise", "eager", "sdpa", "sdpa-bf16", "blockwise-tf32", "blockwise-bf16"]
CUDA_IMPLS = ["triton", "triton-tf32", "triton-bf16", "sdpa", "sdpa-bf16", "eager", "flash-attn"]
ERROR_ONLY = {"blockwise-tf32", "blockwise-bf16"}  # emulated precisions: one run, error is the point
FIELDS = [
    "device",
    "impl",
    "dtype",
    "precision",
    "L",
    "batch",
    "heads_q",
    "heads_kv",
    "head_dim",
    "causal",
    "fwd_s",
    "bwd_s",
    "fwdbwd_s",
    "peak_mb",
    "rss_peak_mb",
    "err_out",
    "err_dq",
    "err_dk",
    "err_dv",
    "err_max",
    "loadavg_1m",
    "status",
]


# --------------------------------------------------------------------------------------------------
# worker side (one implementation, one length, fresh process)
# --------------------------------------------------------------------------------------------------


def _inputs(args, device):
    import torch

    g = torch.Generator().manual_seed(1234 + args.length)
    B, Hq, Hkv, L, D = args.batch, args.heads, args.kv_heads, args.length, args.head_dim
    q = torch.randn(B, Hq, L, D, generator=g)
    k = torch.randn(B, Hkv, L, D, generator=g)
    v = torch.randn(B, Hkv, L, D, generator=g)
    do = torch.randn(B, Hq, L, D, generator=g)
    return [t.to(device) for t in (q, k, v, do)]


def _maxrss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _rss_mb() -> float:
    """Current resident set size (the baseline: memory freed earlier must not hide new growth)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return float(line.split()[1]) / 1024.0
    return _maxrss_mb()


def _make_impl(name: str, args, device):
    """Returns (callable(q, k, v) -> out, input dtype, precision label, setup objects)."""
    import torch
    import torch.nn.functional as F

    from train.attention import blockwise_attention

    scale = args.head_dim**-0.5
    G = args.heads // args.kv_heads
    if name.startswith("blockwise") or name.startswith("triton"):
        backend = "torch" if name.startswith("blockwise") else "triton"
        prec = name.split("-")[1] if "-" in name else "ieee"
        return (
            lambda q, k, v: blockwise_attention(
                q, k, v, causal=True, scale=scale, backend=backend, precision=prec
            ),
            torch.float32,
            prec,
        )
    if name in ("sdpa", "sdpa-bf16"):
        dtype = torch.bfloat16 if name == "sdpa-bf16" else torch.float32
        return (
            lambda q, k, v: F.scaled_dot_product_attention(
                q, k, v, is_causal=True, scale=scale, enable_gqa=True
            ),
            dtype,
            "bf16" if dtype == torch.bfloat16 else "fp32",
        )
    if name == "eager":
        L = args.length
        mask = torch.full((L, L), torch.finfo(torch.float32).min, device=device).triu_(1)[None, None]

        def eager(q, k, v):
            kr = k.repeat_interleave(G, dim=1)
            vr = v.repeat_interleave(G, dim=1)
            w = torch.matmul(q, kr.transpose(2, 3)) * scale
            w = w + mask
            w = torch.nn.functional.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
            return torch.matmul(w, vr)

        return eager, torch.float32, "fp32"
    if name == "flash-attn":
        from flash_attn import flash_attn_func

        def fa(q, k, v):
            o = flash_attn_func(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), softmax_scale=scale, causal=True
            )
            return o.transpose(1, 2)

        return fa, torch.bfloat16, "bf16"
    raise ValueError(name)


def _rel_err(x, ref) -> float:
    x = x.double()
    return float((x - ref).abs().max() / ref.abs().max())


def _timed_pass(fn, q, k, v, do, sync):
    """One forward and backward: ``(out, grads, forward seconds, backward seconds)``."""
    import torch

    t0 = time.perf_counter()
    out = fn(q, k, v)
    sync()
    t1 = time.perf_counter()
    grads = torch.autograd.grad(out, (q, k, v), do)
    sync()
    return out, grads, t1 - t0, time.perf_counter() - t1


def worker(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    q32, k32, v32, do32 = _inputs(args, device)
    if args.impl == "reference":
        from train.attention import reference_forward_backward

        out, dq, dk, dv = reference_forward_backward(q32, k32, v32, do32, causal=True, panel=512)
        torch.save({"out": out.cpu(), "dq": dq.cpu(), "dk": dk.cpu(), "dv": dv.cpu()}, args.ref_file)
        return {"status": "ok"}
    fn, dtype, prec = _make_impl(args.impl, args, device)
    q, k, v, do = (t.to(dtype).requires_grad_(i < 3) for i, t in enumerate((q32, k32, v32, do32)))
    del q32, k32, v32, do32
    if cuda:
        sync()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        import gc

        gc.collect()
        base = _rss_mb()
    out, grads, fwd, bwd = _timed_pass(fn, q, k, v, do, sync)
    if cuda:
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        rss = torch.cuda.max_memory_allocated() / 2**20
    else:
        rss = _maxrss_mb()
        peak = rss - base
    reps = 0 if args.impl in ERROR_ONLY else args.reps
    for _ in range(reps):  # the fastest pass counts
        del out, grads
        out, grads, f, b = _timed_pass(fn, q, k, v, do, sync)
        if f + b < fwd + bwd:
            fwd, bwd = f, b
    res = {
        "impl": args.impl,
        "dtype": str(dtype).replace("torch.", ""),
        "precision": prec,
        "fwd_s": fwd,
        "bwd_s": bwd,
        "fwdbwd_s": fwd + bwd,
        "peak_mb": peak,
        "rss_peak_mb": rss,
        "status": "ok" if args.impl not in ERROR_ONLY else "ok (emulated precision: time not meaningful)",
        "loadavg_1m": os.getloadavg()[0],
    }
    if args.ref_file and os.path.exists(args.ref_file):
        ref = torch.load(args.ref_file)
        errs = {}
        for name, x in zip(("out", "dq", "dk", "dv"), (out, *grads)):
            errs[f"err_{name}"] = _rel_err(x.detach().cpu(), ref[name])
        res.update(errs)
        res["err_max"] = max(errs.values())
    return res


# --------------------------------------------------------------------------------------------------
# driver side
# --------------------------------------------------------------------------------------------------


def _run_worker(args, impl: str, length: int, ref_file: str | None, timeout: float) -> dict:
    if args.inprocess:  # smoke tests only: memory figures are not isolated
        wargs = argparse.Namespace(**{**vars(args), "impl": impl, "length": length, "ref_file": ref_file})
        try:
            return worker(wargs)
        except Exception as err:  # noqa: BLE001
            return {"status": f"failed: {type(err).__name__}: {err}"[:200]}
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "--impl",
        impl,
        "--length",
        str(length),
        "--device",
        args.device,
        "--heads",
        str(args.heads),
        "--kv-heads",
        str(args.kv_heads),
        "--head-dim",
        str(args.head_dim),
        "--batch",
        str(args.batch),
        "--reps",
        str(args.reps),
        "--threads",
        str(args.threads),
    ]
    if ref_file:
        cmd += ["--ref-file", ref_file]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"status": f"timeout after {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        return {"status": f"failed: {tail[0][:200]}"}
    return json.loads(lines[-1])


def _ratio(a, b):
    try:
        return (
            a / b
            if a is not None and b not in (None, 0) and not math.isnan(a) and not math.isnan(b)
            else None
        )
    except TypeError:
        return None


def _summary(rows: list[dict], device: str) -> list[str]:
    """Ratios the issue asks for, per L."""
    ours = "blockwise" if device == "cpu" else "triton"
    by = {(r["impl"], r["L"]): r for r in rows}
    lines = []
    for L in sorted({r["L"] for r in rows}):
        o = by.get((ours, L), {})
        e = by.get(("eager", L), {})
        s = by.get(("sdpa", L), {})
        sb = by.get(("sdpa-bf16", L), {})
        mem = _ratio(o.get("peak_mb"), e.get("peak_mb"))
        tim = _ratio(o.get("fwdbwd_s"), s.get("fwdbwd_s"))
        err = _ratio(sb.get("err_max"), o.get("err_max"))
        fmt = lambda x, f: "n/a" if x is None else format(x, f)  # noqa: E731
        lines.append(
            f"| {L} | {fmt(mem, '.4f')} (1/{fmt(None if not mem else 1 / mem, '.0f')}) | {fmt(tim, '.2f')} | "
            f"{fmt(o.get('err_max'), '.2e')} | {fmt(sb.get('err_max'), '.2e')} | {fmt(err, '.0f')} |"
        )
    return lines


def _plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    impls = list(dict.fromkeys(r["impl"] for r in rows))
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    for impl in impls:
        rs = sorted(
            (r for r in rows if r["impl"] == impl and r.get("status", "").startswith("ok")),
            key=lambda r: r["L"],
        )
        if not rs:
            continue
        Ls = [r["L"] for r in rs]
        if impl not in ERROR_ONLY:
            axes[0].plot(Ls, [r["fwdbwd_s"] for r in rs], "o-", label=impl)
            axes[1].plot(Ls, [max(r["peak_mb"], 1e-1) for r in rs], "o-", label=impl)
        if rs[0].get("err_max") not in (None, ""):
            axes[2].plot(Ls, [r["err_max"] for r in rs], "o-", label=impl)
    for ax, ylabel in zip(
        axes, ("forward + backward time (s)", "peak memory growth (MiB)", "max rel. error vs fp64")
    ):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length L")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _machine(device: str) -> str:
    import torch

    if device == "cuda" and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}"
    cpu = platform.processor() or "cpu"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores visible, torch {torch.__version__}"


def driver(args) -> None:
    impls = args.impls or (CPU_IMPLS if args.device == "cpu" else CUDA_IMPLS)
    if args.device == "cuda" and "flash-attn" in impls:
        import importlib.util

        if importlib.util.find_spec("flash_attn") is None:
            impls = [i for i in impls if i != "flash-attn"]
            print("flash-attn not installed: skipped", flush=True)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"attention-{args.tag}-{args.device}"
    rows: list[dict] = []
    t_start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for L in args.lengths:
            ref_file = os.path.join(tmp, f"ref-{L}.pt")
            ref = _run_worker(args, "reference", L, ref_file, args.timeout) if not args.no_error else {}
            if ref and ref.get("status") != "ok":
                print(f"L={L} reference: {ref.get('status')}", flush=True)
            for impl in impls:
                res = _run_worker(args, impl, L, None if args.no_error else ref_file, args.timeout)
                row = {
                    "device": args.device,
                    "impl": impl,
                    "L": L,
                    "batch": args.batch,
                    "heads_q": args.heads,
                    "heads_kv": args.kv_heads,
                    "head_dim": args.head_dim,
                    "causal": True,
                    **res,
                }
                rows.append(row)
                print(
                    f"[{time.time() - t_start:6.0f}s] L={L:5d} {impl:15s} "
                    f"t={row.get('fwdbwd_s', float('nan')):8.3f}s mem={row.get('peak_mb', float('nan')):9.1f}MiB "
                    f"err={row.get('err_max', float('nan')):.2e} {row.get('status')}",
                    flush=True,
                )
            _write_outputs(args, rows, out_dir, stem, final=False)
    _write_outputs(args, rows, out_dir, stem, final=True)


def _write_outputs(args, rows: list[dict], out_dir: Path, stem: str, final: bool) -> None:
    """CSV, PNG and MD of the rows so far (rewritten after every L, so a timeout keeps what ran)."""
    with open(out_dir / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in FIELDS})
    title = (
        f"causal GQA attention fwd+bwd, B={args.batch}, Hq={args.heads}, Hkv={args.kv_heads}, D={args.head_dim} "
        f"({args.device}: {_machine(args.device)})"
    )
    _plot(rows, out_dir / f"{stem}.png", title)
    ours = "blockwise" if args.device == "cpu" else "triton"
    md = [
        f"# Attention benchmark, {args.device}, {args.tag}",
        "",
        f"Machine: {_machine(args.device)}; {args.threads} torch threads; generated by `bench/attention.py`.",
        f"Shape: causal, batch {args.batch}, {args.heads} query / {args.kv_heads} KV heads, head_dim {args.head_dim} "
        "(Gemma-3-12B global layer: 16 / 8 / 256"
        + (", heads scaled down to fit on CPU)." if args.device == "cpu" else ")."),
        "",
        "Method: one subprocess per (implementation, L). Memory = growth of the peak "
        + (
            "resident set size (getrusage ru_maxrss after, minus VmRSS before) "
            if args.device == "cpu"
            else "CUDA allocation (max_memory_allocated) "
        )
        + "over the first forward+backward, after the inputs exist (eager's additive causal mask is built "
        "before, as transformers builds it once per model forward). Time = best of "
        f"{args.reps} further forward+backward runs. Error = max |x - ref| / max |ref| over out, dq, dk, dv "
        "against an fp64 reference (exact softmax, 512-row panels) on the same fp32 inputs; bf16 runs get "
        "those inputs rounded to bf16. "
        + (
            "blockwise-tf32 / blockwise-bf16 emulate the Triton operand precisions in the torch backend (their time is not meaningful). "
            if args.device == "cpu"
            else ""
        ),
        "",
        f"## Ratios ({ours} vs eager memory, vs sdpa time, error of bf16 sdpa over ours)",
        "",
        "| L | peak memory ours / eager | time ours / sdpa | err ours | err sdpa-bf16 | err ratio |",
        "|---|---|---|---|---|---|",
        *_summary(rows, args.device),
        "",
        "## All rows",
        "",
        "| impl | L | fwd s | bwd s | fwd+bwd s | peak growth MiB | peak RSS MiB | err out | err dq | err dk | err dv | load 1m | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    f3 = lambda x, f: "" if x in (None, "") else format(x, f)  # noqa: E731
    for r in rows:
        md.append(
            f"| {r['impl']} | {r['L']} | {f3(r.get('fwd_s'), '.3f')} | {f3(r.get('bwd_s'), '.3f')} | "
            f"{f3(r.get('fwdbwd_s'), '.3f')} | {f3(r.get('peak_mb'), '.1f')} | {f3(r.get('rss_peak_mb'), '.0f')} | "
            f"{f3(r.get('err_out'), '.2e')} | {f3(r.get('err_dq'), '.2e')} | {f3(r.get('err_dk'), '.2e')} | "
            f"{f3(r.get('err_dv'), '.2e')} | {f3(r.get('loadavg_1m'), '.1f')} | {r.get('status', '')} |"
        )
    (out_dir / f"{stem}.md").write_text("\n".join(md) + "\n")
    print(f"wrote {out_dir / stem}.csv/.png/.md", flush=True)
    if not final:
        return
    print(
        "\n".join(
            md[
                md.index(
                    "| L | peak memory ours / eager | time ours / sdpa | err ours | err sdpa-bf16 | err ratio |"
                ) :
            ][:6]
        )
    )


def tiles_report(args) -> None:
    """Compile the Triton kernels offline for sm86 / sm89 (no GPU needed) and record shared memory use."""
    os.environ["TRITON_INTERPRET"] = "0"
    import warnings

    warnings.filterwarnings("ignore")
    from train.attention import triton_impl as ti

    jobs = [(kind, D, prec, 86, False) for D in (64, 128) for prec in ti.PRECISION_NAMES for kind in KERNELS]
    jobs += [(kind, 256, prec, arch, feats) for prec in ti.PRECISION_NAMES for kind in KERNELS
             for feats in (False, True) for arch in ((86, 89) if feats else (86,))]  # fmt: skip
    rows = []
    for kind, D, prec, arch, feats in jobs:
        fit = _first_fit(ti, kind, D, prec, arch, feats)
        row = (kind, D, prec, arch, feats, *fit) if fit else None
        rows.append(row)
        print(row, flush=True)
    out = Path(args.out) / f"attention-{args.tag}-cpu-sm86-sm89-tiles.md"
    lines = [
        f"# Triton tile configurations compiled offline for sm86 / sm89, {args.tag}",
        "",
        "Compiled on the CPU machine with Triton's bundled ptxas (`bench/attention.py --tiles`, no GPU), "
        "walking each kernel's configuration ladder (`triton_impl._CONFIGS`) the way the launcher does at "
        f"run time until one fits {ti.SM86_SHARED_LIMIT} bytes of shared memory per block (99 KiB, RTX "
        "A6000 / L40S). `all features` = sliding window + softcap + packing + key padding + float bias on "
        "at once (the largest variant). Not run on a GPU: speed and register pressure are unmeasured.",
        "",
        "| kernel | D | precision | sm | all features | block_m | block_n | warps | stages | shared bytes | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


def _first_fit(ti, kind: str, D: int, prec: str, arch: int, feats: bool) -> tuple | None:
    """``(block_m, block_n, warps, stages, shared, verdict)`` of the first ladder entry that compiles
    and fits, else of the first that fails to compile or of the last one tried."""
    tail = None
    for rank, (bm, bn, warps, stages) in enumerate(ti.default_configs(kind, D, prec)):
        try:
            r = ti.compile_offline(kind, D, prec, bm, bn, warps, stages, arch=arch, all_features=feats)
        except Exception as err:  # noqa: BLE001
            return (bm, bn, warps, stages, "", f"compile error: {str(err)[:100]}")
        if r["fits"]:
            return (bm, bn, warps, stages, r["shared"], f"fits (ladder entry {rank + 1})")
        tail = (bm, bn, warps, stages, r["shared"], "nothing in the ladder fits")
    return tail


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    ap.add_argument("--heads", type=int, default=None, help="query heads (cpu 4, cuda 16)")
    ap.add_argument("--kv-heads", type=int, default=None, help="key/value heads (cpu 2, cuda 8)")
    ap.add_argument("--head-dim", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--impls", nargs="+", default=None)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument(
        "--threads", type=int, default=int(os.environ.get("BENCH_THREADS", min(2, os.cpu_count() or 1)))
    )
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per subprocess")
    ap.add_argument("--no-error", action="store_true", help="skip the fp64 reference")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--tag", default=time.strftime("%Y-%m-%d"))
    ap.add_argument("--tiles", action="store_true", help="compile the Triton kernels offline for sm86/sm89")
    ap.add_argument(
        "--inprocess", action="store_true", help="no subprocesses (smoke tests; memory not isolated)"
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--impl", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--length", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ref-file", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.heads is None:
        args.heads = 4 if args.device == "cpu" else 16
    if args.kv_heads is None:
        args.kv_heads = 2 if args.device == "cpu" else 8
    if args.tiles:
        tiles_report(args)
    elif args.worker:
        print(json.dumps(worker(args)), flush=True)
    else:
        driver(args)


if __name__ == "__main__":
    main()
