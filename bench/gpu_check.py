"""One prepared device check of the GPU path: peaks, kernel correctness, kernel speed, QLoRA steps.

Runs on a bare GPU machine (torch, triton, transformers, peft, accelerate; no network) in at most
``--budget-s`` seconds (default 450), most important measurements first, and writes its JSON after every
section, so a run cut short still leaves what it measured. One line per measurement on stdout.

    python bench/gpu_check.py --stage-wheels          # here, once: copy the trimmed wheels (below)
    python bench/gpu_check.py --dry-run               # CPU: imports, shapes, wheel list, code paths
    python bench/gpu_check.py --out "$OUT"            # on the GPU (carry bench/wheels)

Sections, in order:
1. environment: GPU, driver, versions, which optional packages are missing (flash-attn missing is
   reported, never silently dropped), the wheel list;
2. measured matmul peaks: bf16 and fp32 (TF32 off: the FMA peak ``ieee`` runs on);
3. key kernel checks: ieee and bf16 error vs fp64 (Gemma 3 global layer 16/8/256), and fwd+bwd time at
   hd 256, L 8192 vs SDPA's flash backend, in ms, TFLOPS and % of the measured peak;
4. QLoRA steps of a 12B-shaped, randomly initialised ``Gemma3ForConditionalGeneration`` (full width,
   ``--layers`` text layers) through ``train.modeling.load_base_model``: custom attention vs sdpa,
   seconds per step and peak GiB at ``--tokens`` tokens, and a 48-layer extrapolation;
5. the full correctness matrix: every precision mode x {Gemma 3 global, sliding window 1024 + packing +
   padding, Mistral-Nemo 32/8/128, decode} x {default tiles, shared memory capped at 101,376 B (the
   sm86/89 tiles)}, with each kernel's tiles, registers and spills;
6. the speed sweep: fwd and fwd+bwd at L 2k-16k, hd 128 and 256, ours (bf16, ieee) vs SDPA flash,
   cuDNN and efficient backends pinned one at a time, and the flash-attn package when installed.

FLOPs follow FlashAttention's convention: causal forward 2 * 2 * B * Hq * L^2 * D / 2, backward 2.5x
the forward. Wheels beyond the image (``--stage-wheels`` copies them into bench/wheels/, git-ignored,
about 5 MB): bitsandbytes 0.50.2 trimmed to its Python files and ``libbitsandbytes_cuda130.so``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gemma3_shape import GEMMA3_12B_TEXT  # noqa: E402  (bench/, the script's folder)

WHEELS_DIR = ROOT / "bench" / "wheels"
REQUIRED = ("torch", "triton", "transformers", "peft", "accelerate", "safetensors", "yaml")
OPTIONAL = ("bitsandbytes", "flash_attn", "trl", "datasets", "rfc8785", "re2")
# what travels with the working tree: (import name, version, files kept from the installed package)
WHEELS = [
    (
        "bitsandbytes",
        "0.50.2",
        "the Python files and libbitsandbytes_cuda130.so (CUDA 13, torch cu130) plus the CPU library",
    ),
]
KEEP_LIBS = {"libbitsandbytes_cuda130.so", "libbitsandbytes_cpu.so"}
SHARED_CAP_SM86 = 101376


# ---------------------------------------------------------------------------------------------------
# problems
# ---------------------------------------------------------------------------------------------------


def correctness_cases(scale: int = 1) -> list[dict]:
    """The correctness problems; ``scale`` divides lengths (and windows) for the CPU dry run."""
    L = 4096 // scale
    w = max(4, 1024 // scale)
    cu = [0, L * 3 // 8, L * 6 // 8, L - L // 32]  # three sequences and a padded tail
    return [
        dict(name="gemma3-global", heads=(16, 8), head_dim=256, len_q=2048 // scale, len_k=2048 // scale),
        dict(
            name="sliding1024-packed-padded",
            heads=(16, 8),
            head_dim=256,
            len_q=L,
            len_k=L,
            window=w,
            cu_seqlens=cu,
            left_pad=L // 64,
        ),
        dict(name="mistral-nemo", heads=(32, 8), head_dim=128, len_q=2048 // scale, len_k=2048 // scale),
        dict(name="decode", heads=(16, 8), head_dim=256, len_q=4, len_k=L, left_pad=L // 64),
    ]


def attn_flops(B: int, Hq: int, Lq: int, Lk: int, D: int, causal: bool, backward: bool) -> float:
    """FlashAttention's count: 4 * B * Hq * Lq * Lk * D for the forward (half when causal and square),
    backward 2.5x the forward."""
    f = 4.0 * B * Hq * Lq * Lk * D
    if causal and Lq == Lk:
        f /= 2
    return f * (3.5 if backward else 1.0)


def make_inputs(case: dict, dtype, device, seed: int = 0):
    import torch

    Hq, Hkv = case["heads"]
    D, Lq, Lk = case["head_dim"], case["len_q"], case["len_k"]
    g = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.randn(1, Hq, Lq, D, generator=g).to(device=device, dtype=dtype).requires_grad_(True)
    k = torch.randn(1, Hkv, Lk, D, generator=g).to(device=device, dtype=dtype).requires_grad_(True)
    v = torch.randn(1, Hkv, Lk, D, generator=g).to(device=device, dtype=dtype).requires_grad_(True)
    do = torch.randn(1, Hq, Lq, D, generator=g).to(device=device, dtype=dtype)
    sem = {"causal": True}
    if case.get("window"):
        sem["sliding_window"] = case["window"]
    if case.get("cu_seqlens"):
        sem["cu_seqlens"] = torch.tensor(case["cu_seqlens"], dtype=torch.int32, device=device)
    if case.get("left_pad"):
        kpm = torch.ones(1, Lk, dtype=torch.bool, device=device)
        kpm[0, : case["left_pad"]] = False
        sem["key_padding_mask"] = kpm
    return q, k, v, do, sem


# ---------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------


class Report:
    """Collects measurements, prints one line each, rewrites the JSON after every section."""

    def __init__(self, path: Path | None, budget_s: float):
        self.path = path
        self.data: dict = {
            "started": datetime.datetime.now(datetime.UTC).isoformat(),
            "sections": {},
        }
        self.t0 = time.time()
        self.budget_s = budget_s

    def left(self) -> float:
        return self.budget_s - (time.time() - self.t0)

    def add(self, section: str, record: dict) -> None:
        self.data["sections"].setdefault(section, []).append(record)
        print(f"[{section}] " + json.dumps(record, default=str), flush=True)

    def save(self) -> None:
        self.data["elapsed_s"] = round(time.time() - self.t0, 1)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(self.data, indent=1, default=str) + "\n")


def rel_err(x, ref) -> float:
    x, ref = x.detach().double(), ref.detach().double()
    scale = float(ref.abs().max())
    return float((x - ref).abs().max()) / (scale if scale > 0 else 1.0)


def timed(fn, reps: int, device) -> float:
    """Median milliseconds of ``fn()`` after one warm-up call."""
    import torch

    fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        else:
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
    return sorted(times)[len(times) // 2]


def use_wheels(wheels_dir: Path) -> list[str]:
    """Put each staged package directory under ``wheels_dir`` first on sys.path; names added."""
    added = []
    if wheels_dir.is_dir():
        for sub in sorted(wheels_dir.iterdir()):
            if sub.is_dir() and any(sub.iterdir()):
                sys.path.insert(0, str(sub))
                added.append(sub.name)
    return added


def stage_wheels(wheels_dir: Path) -> None:
    """Copy the trimmed packages of WHEELS from this environment into ``wheels_dir``."""
    wheels_dir.mkdir(parents=True, exist_ok=True)
    (wheels_dir / ".gitignore").write_text("*\n")
    for name, version, _ in WHEELS:
        mod = importlib.import_module(name)
        if getattr(mod, "__version__", None) != version:
            raise SystemExit(f"{name} {getattr(mod, '__version__', '?')} installed, {version} expected")
        src = Path(mod.__file__).parent
        dst = wheels_dir / f"{name}-{version}" / name
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(
            src,
            dst,
            ignore=lambda d, names: (
                [n for n in names if n.endswith(".so") and n not in KEEP_LIBS]
                + [n for n in names if n == "__pycache__"]
            ),
        )
        size = sum(f.stat().st_size for f in dst.rglob("*") if f.is_file())
        print(f"staged {name} {version}: {dst} ({size / 2**20:.1f} MiB)")


def wheel_list(wheels_dir: Path) -> list[dict]:
    out = []
    for name, version, what in WHEELS:
        d = wheels_dir / f"{name}-{version}" / name
        files = [f for f in d.rglob("*") if f.is_file()] if d.is_dir() else []
        out.append(
            {
                "package": name,
                "version": version,
                "contents": what,
                "staged": bool(files),
                "mib": round(sum(f.stat().st_size for f in files) / 2**20, 2),
                "cuda130_library": any(f.name == "libbitsandbytes_cuda130.so" for f in files),
            }
        )
    return out


# ---------------------------------------------------------------------------------------------------
# sections
# ---------------------------------------------------------------------------------------------------


def section_environment(rep: Report, device, wheels_added: list[str]) -> None:
    import torch

    env: dict = {"python": platform.python_version(), "device": str(device), "wheels_on_path": wheels_added}
    for name in REQUIRED + OPTIONAL:
        spec = importlib.util.find_spec(name)
        if spec is None:
            env[name] = "missing"
            continue
        try:
            env[name] = getattr(importlib.import_module(name), "__version__", "present")
        except Exception as err:  # noqa: BLE001 - a package that is there but does not import
            env[name] = f"import failed: {type(err).__name__}: {str(err)[:120]}"
    missing = [n for n in REQUIRED if env[n] == "missing"]
    env["missing_required"] = missing
    env["missing_optional"] = [n for n in OPTIONAL if not str(env[n])[:1].isdigit() and env[n] != "present"]
    env["flash_attn_2"] = (
        env["flash_attn"]
        if env["flash_attn"] not in ("missing",)
        else "not installed: the FA2 package "
        "comparison is not measured; SDPA's flash backend (FlashAttention-2 kernels in PyTorch) stands in"
    )
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(0)
        env.update(
            gpu=p.name,
            capability=f"sm{p.major}{p.minor}",
            sms=p.multi_processor_count,
            memory_gib=round(p.total_memory / 2**30, 1),
            cuda=torch.version.cuda,
        )
        try:
            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError) as err:
            env["driver"] = f"nvidia-smi failed: {err}"
    rep.data["environment"] = env
    rep.add("environment", env)
    if missing:
        raise SystemExit(f"required packages missing: {missing}")


def section_peaks(rep: Report, device, n: int) -> None:
    import torch

    peaks = {}
    for label, dtype, tf32 in (("bf16", torch.bfloat16, False), ("fp32", torch.float32, False)):
        before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            a = torch.randn(n, n, device=device, dtype=dtype)
            b = torch.randn(n, n, device=device, dtype=dtype)
            ms = timed(lambda a=a, b=b: a @ b, 5, device)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = before
        peaks[label] = 2.0 * n**3 / (ms * 1e-3) / 1e12
        rep.add("peaks", {"dtype": label, "n": n, "ms": round(ms, 3), "tflops": round(peaks[label], 1)})
    rep.data["peaks_tflops"] = peaks
    rep.save()


def check_correctness(rep: Report, case: dict, precision: str, device, capped: bool, backend: str) -> None:
    import torch

    from train.attention import blockwise_attention, reference_forward_backward
    from train.attention import triton_impl as ti

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    q, k, v, do, sem = make_inputs(case, dtype, device)
    key = (case["name"], case["len_q"], case["len_k"])
    refs = rep.__dict__.setdefault("_refs", {})
    if (key, dtype) not in refs:
        refs.clear()  # one reference at a time: fp64 copies of long problems are large
        refs[(key, dtype)] = reference_forward_backward(q, k, v, do, **sem)
    ref = refs[(key, dtype)]
    if backend == "triton":
        ti.SHARED_CAP = SHARED_CAP_SM86 if capped else None
        ti.LAUNCHED.clear()
    try:
        out = blockwise_attention(q, k, v, backend=backend, precision=precision, **sem)
        got = (out, *torch.autograd.grad(out, (q, k, v), do))
    finally:
        if backend == "triton":
            ti.SHARED_CAP = None
    errs = [rel_err(a, b) for a, b in zip(got, ref)]
    rec = {
        "case": case["name"],
        "heads": case["heads"],
        "head_dim": case["head_dim"],
        "len_q": case["len_q"],
        "len_k": case["len_k"],
        "precision": precision,
        "inputs": str(dtype).replace("torch.", ""),
        "tiles": "capped at 101376 B (sm86/89)" if capped else "default",
        "err_out_dq_dk_dv": [f"{e:.2e}" for e in errs],
        "max_err": max(errs),
    }
    if backend == "triton":
        rec["kernels"] = {"/".join(map(str, k)): v for k, v in ti.LAUNCHED.items()}
    if precision == "ieee":
        rec["target"] = "<= 1e-6"
        rec["met"] = max(errs) <= 1e-6
    rep.add("correctness", rec)


def time_attention(rep: Report, impl: str, D: int, L: int, heads: tuple, device, peaks: dict, reps: int):
    """fwd and fwd+bwd of one implementation; returns the fwd+bwd ms (None on failure)."""
    import torch
    import torch.nn.functional as F

    from train.attention import blockwise_attention

    Hq, Hkv = heads
    dtype = torch.float32 if impl == "ours-ieee" else torch.bfloat16
    case = dict(heads=heads, head_dim=D, len_q=L, len_k=L)
    q, k, v, do, _ = make_inputs(case, dtype, device)
    if impl.startswith("ours"):
        prec = impl.split("-")[1]

        def f():
            return blockwise_attention(q, k, v, causal=True, precision=prec)

    elif impl == "flash-attn":
        from flash_attn import flash_attn_func

        qt, kt, vt = (t.detach().transpose(1, 2).contiguous().requires_grad_(True) for t in (q, k, v))
        q, k, v, do = qt, kt, vt, do.transpose(1, 2).contiguous()

        def f():
            return flash_attn_func(q, k, v, causal=True)

    else:  # sdpa-<backend>: K/V expanded to Hq heads once, outside the timing
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = {
            "sdpa-flash": SDPBackend.FLASH_ATTENTION,
            "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
            "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION,
            "sdpa-math": SDPBackend.MATH,
        }[impl]
        k = k.detach().repeat_interleave(Hq // Hkv, 1).requires_grad_(True)
        v = v.detach().repeat_interleave(Hq // Hkv, 1).requires_grad_(True)

        def f():
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fwd():
        with torch.no_grad():
            f()

    def fwd_bwd():
        out = f()
        torch.autograd.grad(out, (q, k, v), do)

    peak = peaks.get("fp32" if impl == "ours-ieee" else "bf16")
    rec: dict = {
        "impl": impl,
        "head_dim": D,
        "heads": heads,
        "L": L,
        "inputs": str(dtype).replace("torch.", ""),
    }
    try:
        for label, fn, bwd in (("fwd", fwd, False), ("fwd_bwd", fwd_bwd, True)):
            ms = timed(fn, reps, device)
            tflops = attn_flops(1, Hq, L, L, D, True, bwd) / (ms * 1e-3) / 1e12
            rec[f"{label}_ms"] = round(ms, 3)
            rec[f"{label}_tflops"] = round(tflops, 1)
            if peak:
                rec[f"{label}_pct_of_peak"] = round(100 * tflops / peak, 1)
    except Exception as err:  # noqa: BLE001 - an unsupported backend/shape is a result
        rec["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
    rep.add("speed", rec)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rec.get("fwd_bwd_ms")


def gemma3_12b_shaped(layers: int, shrink: bool):
    """A Gemma3ForConditionalGeneration config: the 12B text width with ``layers`` layers (5 sliding :
    1 global, the last one global), a one-layer vision tower; ``shrink`` makes it tiny (CPU dry run)."""
    from transformers import Gemma3Config, Gemma3TextConfig, SiglipVisionConfig

    kw = dict(GEMMA3_12B_TEXT)
    if shrink:
        kw.update(vocab_size=512, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16, sliding_window=32)  # fmt: skip
    kw["num_hidden_layers"] = layers
    types_ = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)]
    types_[-1] = "full_attention"
    text = Gemma3TextConfig(pad_token_id=0, eos_token_id=1, bos_token_id=2, layer_types=types_, **kw)
    vision = SiglipVisionConfig(
        hidden_size=64 if shrink else 1152,
        intermediate_size=128 if shrink else 4304,
        num_hidden_layers=1,
        num_attention_heads=4 if shrink else 16,
        image_size=896 if not shrink else 64,
        patch_size=14 if not shrink else 16,
        vision_use_head=False,
    )
    return Gemma3Config(
        text_config=text.to_dict(), vision_config=vision.to_dict(), mm_tokens_per_image=16 if shrink else 256
    )


def section_qlora(
    rep: Report, device, layers: int, tokens: int, steps: int, shrink: bool, work: Path
) -> None:
    """QLoRA steps through train.modeling.load_base_model, custom attention vs sdpa."""
    import torch

    from train.config import load_preset

    have_bnb = importlib.util.find_spec("bitsandbytes") is not None
    cfg0 = load_preset(ROOT / "configs/train/gemma-3-12b.yaml").resolved()
    mcfg = gemma3_12b_shaped(layers, shrink)
    model_dir = work / "gemma3-12b-shaped"
    t0 = time.time()
    _save_shaped_model(mcfg, model_dir, device)
    build_s = time.time() - t0
    ids, position_ids = _packed_row(mcfg.text_config.vocab_size, tokens)
    for attn in ("blockwise_fp32_global", "sdpa"):
        if rep.left() < 60:
            rep.add("qlora", {"attn": attn, "skipped": f"time budget ({rep.left():.0f} s left)"})
            continue
        cfg = type(cfg0)(**{**cfg0.__dict__})
        cfg.attn_implementation = attn
        cfg.load_in_4bit = have_bnb
        if device.type != "cuda":
            cfg.compute_dtype = "float32"
        rec: dict = {
            "attn": attn,
            "text_layers": layers,
            "tokens": tokens,
            "base": "4-bit nf4 (bitsandbytes)" if have_bnb else "bf16 (bitsandbytes missing: NOT QLoRA)",
            "build_s": round(build_s, 1),
        }
        try:
            _qlora_steps(rep, rec, cfg, model_dir, (ids, position_ids), steps, device)
            if device.type == "cuda":
                rec.update(_qlora_memory(mcfg.text_config, layers, tokens))
        except Exception as err:  # noqa: BLE001
            rec["error"] = f"{type(err).__name__}: {str(err)[:300]}"
            rec["traceback"] = traceback.format_exc()[-1500:]
        rep.add("qlora", rec)
        rep.save()
        if device.type == "cuda":
            torch.cuda.empty_cache()


def _save_shaped_model(mcfg, model_dir: Path, device) -> None:
    """Random weights of the shaped model, saved once (a later run reuses them)."""
    import torch

    if (model_dir / "config.json").is_file():
        return
    from transformers import Gemma3ForConditionalGeneration

    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16 if device.type == "cuda" else torch.float32)
    try:
        with torch.device(device):
            m = Gemma3ForConditionalGeneration(mcfg)
    finally:
        torch.set_default_dtype(default)
    m.save_pretrained(model_dir)
    del m
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _packed_row(vocab_size: int, tokens: int):
    """A padding-free packed row: documents of 256..1024 tokens, positions restart per document."""
    import torch

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, vocab_size, (1, tokens), generator=g)
    pos, n = [], 0
    while n < tokens:
        d = min(int(torch.randint(256, 1025, (1,), generator=g)), tokens - n)
        pos += list(range(d))
        n += d
    return ids, torch.tensor([pos])


def _qlora_steps(rep: Report, rec: dict, cfg, model_dir: Path, row, steps: int, device) -> None:
    """Load the base as training does, add LoRA, time ``steps`` optimizer steps; fills ``rec``."""
    import torch
    from peft import get_peft_model

    from train.modeling import load_base_model, lora_config

    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    t1 = time.time()
    model, used = load_base_model(str(model_dir), cfg)
    model = get_peft_model(model, lora_config(cfg))
    rec["load_s"] = round(time.time() - t1, 1)
    rec["attn_used"] = used
    rec["embedding_dtype"] = str(model.get_input_embeddings().weight.dtype)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    ids, position_ids = row
    batch = dict(input_ids=ids.to(device), labels=ids.to(device), position_ids=position_ids.to(device))
    times = []
    for _ in range(steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        loss = model(**batch, use_cache=False).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        if rep.left() < 30:
            break
    rec["loss"] = round(float(loss), 4)
    timed = times[1:] or times
    rec["s_per_step"] = round(sorted(timed)[len(timed) // 2], 3)
    rec["steps_timed"] = len(timed)


def _qlora_memory(full, layers: int, tokens: int) -> dict:
    """Peak GPU memory of the steps, extrapolated from ``layers`` to the 12B's 48 layers."""
    import torch

    peak = torch.cuda.max_memory_allocated() / 2**30
    per_layer_4bit = (  # nf4 weights of one more layer (~0.53 B/param with double quant)
        2 * full.hidden_size * full.num_attention_heads * full.head_dim
        + 2 * full.hidden_size * full.num_key_value_heads * full.head_dim
        + 3 * full.hidden_size * full.intermediate_size
    ) * 0.53
    per_layer_ckpt = tokens * full.hidden_size * 2  # one checkpointed bf16 hidden state
    extra = (GEMMA3_12B_TEXT["num_hidden_layers"] - layers) * (per_layer_4bit + per_layer_ckpt)
    extrapolated = round(peak + extra / 2**30, 2)
    return {
        "peak_gib": round(peak, 2),
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2),
        "peak_gib_extrapolated_48_layers": extrapolated,
        "target": "peak < 46 GiB at 4096 tokens (48 layers)",
        "met": extrapolated < 46 and tokens >= 4096,
    }


# ---------------------------------------------------------------------------------------------------


def run(args) -> int:
    wheels_added = use_wheels(Path(args.wheels))
    import torch

    dry = args.dry_run
    if not dry and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: use --dry-run on a CPU machine")
    device = torch.device("cuda" if not dry else "cpu")
    if dry:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    gpu_tag = "cpu-dry-run"
    if not dry:
        gpu_tag = torch.cuda.get_device_name(0).replace("NVIDIA ", "").replace(" ", "-").lower()
    out = None
    if args.out:
        out = Path(args.out) / f"gpu-check-{args.tag}-{gpu_tag}.json"
    rep = Report(out, args.budget_s)
    rep.data["wheels"] = wheel_list(Path(args.wheels))
    for w in rep.data["wheels"]:
        rep.add("wheels", w)
    section_environment(rep, device, wheels_added)
    rep.save()
    scale = 64 if dry else 1
    if dry:
        _dry_shapes(rep)
    torch.manual_seed(0)
    peaks = {}
    try:
        section_peaks(rep, device, 256 if dry else 8192)
        peaks = rep.data["peaks_tflops"]
    except Exception as err:  # noqa: BLE001
        rep.add("peaks", {"error": str(err)})
    key_case = correctness_cases(scale)[0]
    _key_checks(rep, key_case, device, peaks, dry, scale)
    # 4. QLoRA steps
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="gpu-check-"))
    try:
        section_qlora(rep, device, args.layers if not dry else 2, args.tokens // scale, 2 if dry else args.steps,
                      dry, work)  # fmt: skip
    except Exception as err:  # noqa: BLE001
        rep.add("qlora", {"error": repr(err)[:300], "traceback": traceback.format_exc()[-1500:]})
    rep.save()
    _correctness_matrix(rep, key_case, device, dry, scale)
    rep.__dict__.pop("_refs", None)
    _speed_sweep(rep, device, peaks, dry, scale)
    rep.save()
    print(f"done in {time.time() - rep.t0:.0f} s" + (f"; wrote {out}" if out else ""))
    return 0


def _dry_shapes(rep: Report) -> None:
    """The shapes of the real run, without running them."""
    import torch
    from transformers import Gemma3ForConditionalGeneration

    for case in correctness_cases():
        rep.add("shapes", {**case, "flops_fwd_bwd": attn_flops(1, case["heads"][0], case["len_q"],
                                                               case["len_k"], case["head_dim"], True, True)})  # fmt: skip
    with torch.device("meta"):
        meta = Gemma3ForConditionalGeneration(gemma3_12b_shaped(48, shrink=False))
    n = sum(p.numel() for p in meta.parameters())
    rep.add("shapes", {"model": "Gemma3ForConditionalGeneration, 12B text width, 48 layers", "params": n})


def _key_checks(rep: Report, key_case: dict, device, peaks: dict, dry: bool, scale: int) -> None:
    """3. the key checks: correctness of the key case, then ours vs SDPA at head dim 256, L 8192."""
    backend = "torch" if dry else "triton"
    reps = 1 if dry else 5
    for prec in ("ieee", "bf16"):
        try:
            check_correctness(rep, key_case, prec, device, capped=False, backend=backend)
        except Exception as err:  # noqa: BLE001
            rep.add("correctness", {"case": key_case["name"], "precision": prec, "error": repr(err)[:300]})
    rep.save()
    L_key = 8192 // scale
    ours_b = time_attention(
        rep, "ours-bf16" if not dry else "ours-ieee", 256, L_key, (16, 8), device, peaks, reps
    )
    ref_b = time_attention(
        rep, "sdpa-flash" if not dry else "sdpa-math", 256, L_key, (16, 8), device, peaks, reps
    )
    if ours_b and ref_b:
        rep.add("speed", {"target": "ours bf16 fwd+bwd <= 1.5x SDPA flash, hd 256, L 8192",
                          "ratio": round(ours_b / ref_b, 2), "met": ours_b <= 1.5 * ref_b})  # fmt: skip
    time_attention(rep, "ours-ieee", 256, L_key, (16, 8), device, peaks, reps)
    rep.save()


def _correctness_matrix(rep: Report, key_case: dict, device, dry: bool, scale: int) -> None:
    """5. the full correctness matrix (the key case's measured cells skipped)."""
    backend = "torch" if dry else "triton"
    for case in correctness_cases(scale):
        for prec in ("ieee", "tf32", "bf16"):
            for capped in (False, True):
                if case is key_case and not capped and prec != "tf32":
                    continue  # measured above
                if capped and dry:
                    continue
                if rep.left() < 20:
                    rep.add("correctness", {"case": case["name"], "skipped": "time budget"})
                    break
                try:
                    check_correctness(rep, case, prec, device, capped, backend)
                except Exception as err:  # noqa: BLE001
                    rep.add("correctness", {"case": case["name"], "precision": prec, "capped": capped,
                                            "error": repr(err)[:300]})  # fmt: skip
        rep.save()


def _speed_sweep(rep: Report, device, peaks: dict, dry: bool, scale: int) -> None:
    """6. the speed sweep over head dims, lengths and implementations."""
    impls = ["ours-bf16", "ours-ieee", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient"]
    if dry:
        impls = ["ours-ieee", "sdpa-math"]
    elif importlib.util.find_spec("flash_attn") is not None:
        impls.append("flash-attn")
    else:
        rep.add("speed", {"impl": "flash-attn", "error": "not installed: FA2 package not measured"})
    for D, heads in ((256, (16, 8)), (128, (32, 8))):
        for L in (2048, 4096, 8192, 16384):
            for impl in impls:
                if rep.left() < 15:
                    break
                if (impl, D, L) in (
                    ("ours-bf16", 256, 8192),
                    ("sdpa-flash", 256, 8192),
                    ("ours-ieee", 256, 8192),
                ):
                    continue  # measured in section 3
                time_attention(
                    rep, impl, D, L // scale, heads, device, peaks, 1 if dry else (3 if L >= 8192 else 5)
                )
            rep.save()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU: imports, shapes, wheel list, code paths")
    ap.add_argument("--stage-wheels", action="store_true", help="copy the trimmed wheels into --wheels")
    ap.add_argument("--wheels", default=str(WHEELS_DIR))
    ap.add_argument("--out", default=None, help="directory for the JSON (default: print only)")
    ap.add_argument("--tag", default=time.strftime("%Y-%m-%d"))
    ap.add_argument("--budget-s", type=float, default=450.0)
    ap.add_argument("--layers", type=int, default=6, help="text layers of the 12B-shaped model")
    ap.add_argument("--tokens", type=int, default=4096, help="tokens per QLoRA step (micro-batch 1)")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--work-dir", default=None)
    args = ap.parse_args(argv)
    for k, v in {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }.items():
        os.environ.setdefault(k, v)
    if args.stage_wheels:
        stage_wheels(Path(args.wheels))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
