"""Triton backend of the blockwise fp32 attention, run by Triton's CPU interpreter in CI.

``TRITON_INTERPRET=1`` is set before triton is imported (unless the caller chose otherwise: on a CUDA
machine ``TRITON_INTERPRET=0`` runs the same tests compiled for the GPU, see bench/gpu_attention.sh).
Shapes are tiny: the interpreter executes every program instance in numpy.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed (pip install triton==3.9.0)")

from attention_checks import rel_err  # noqa: E402

from train.attention import blockwise_attention, reference_attention, triton_interpret  # noqa: E402

if triton_interpret():
    DEVICE = "cpu"
elif torch.cuda.is_available():
    DEVICE = "cuda"
else:
    pytest.skip("TRITON_INTERPRET is off and there is no CUDA device", allow_module_level=True)

TOL = 1e-5
BLOCK = 16  # several tiles at L = 37


pytestmark = pytest.mark.usefixtures("one_thread")


def make(B, Hq, Hkv, Lq, Lk, D, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    ts = [
        torch.randn(B, Hq, Lq, D, generator=g),
        torch.randn(B, Hkv, Lk, D, generator=g),
        torch.randn(B, Hkv, Lk, D, generator=g),
        torch.randn(B, Hq, Lq, D, generator=g),
    ]
    ts = [t.to(device=DEVICE, dtype=dtype) for t in ts]
    return [t.requires_grad_(i < 3) for i, t in enumerate(ts)]


def run(q, k, v, do, backend, block=BLOCK, **kw):
    out = blockwise_attention(q, k, v, backend=backend, block_size=block, **kw)
    return (out, *torch.autograd.grad(out, (q, k, v), do))


def errors(q, k, v, do, **kw):
    """Errors of the Triton backend against fp64, and its distance to the torch backend."""
    tri = run(q, k, v, do, "triton", **kw)
    ref_kw = {key: val for key, val in kw.items() if key not in ("precision", "block")}
    qd, kd, vd = (t.detach().double().cpu().requires_grad_(True) for t in (q, k, v))
    cpu_kw = {key: (val.cpu() if isinstance(val, torch.Tensor) else val) for key, val in ref_kw.items()}
    ref = reference_attention(qd, kd, vd, **cpu_kw)
    ref_all = (ref, *torch.autograd.grad(ref, (qd, kd, vd), do.double().cpu()))
    assert tri[0].dtype == q.dtype and tri[0].shape == q.shape
    return [rel_err(a, b) for a, b in zip(tri, ref_all)]


def assert_close(errs, tol=TOL):
    assert max(errs) < tol, f"errors out/dq/dk/dv = {errs}"


@pytest.mark.parametrize("D", [16, 64, 128, 256])
@pytest.mark.parametrize("causal", [True, False])
def test_head_dims(causal, D):
    q, k, v, do = make(1, 2, 1, 37, 37, D, seed=D)
    assert_close(errors(q, k, v, do, causal=causal))


@pytest.mark.parametrize("groups", [1, 2, 8])
def test_gqa_ratios(groups):
    q, k, v, do = make(2, groups, 1, 37, 37, 32, seed=groups)
    assert_close(errors(q, k, v, do))


@pytest.mark.parametrize("causal", [True, False])
def test_packed_varlen(causal):
    cu = torch.tensor([0, 7, 20, 37], dtype=torch.int32, device=DEVICE)  # lengths 7, 13, 17
    q, k, v, do = make(1, 4, 2, 40, 40, 32, seed=3)  # positions 37..39 belong to no sequence
    assert_close(errors(q, k, v, do, causal=causal, cu_seqlens=cu))


@pytest.mark.parametrize("causal", [True, False])
def test_sliding_window_and_softcap(causal):
    q, k, v, do = make(1, 4, 2, 37, 37, 32, seed=4)
    assert_close(errors(q, k, v, do, causal=causal, sliding_window=6))
    assert_close(errors(q, k, v, do, causal=causal, softcap=3.0, scale=0.4))


def test_varlen_window_softcap_together():
    cu = torch.tensor([0, 7, 20, 37], dtype=torch.int32, device=DEVICE)
    q, k, v, do = make(1, 4, 2, 37, 37, 32, seed=5)
    assert_close(errors(q, k, v, do, cu_seqlens=cu, sliding_window=5, softcap=4.0))


def test_decode_against_a_cache():
    q, k, v, do = make(2, 4, 2, 3, 37, 32, seed=6)
    assert_close(errors(q, k, v, do))
    assert_close(errors(q, k, v, do, sliding_window=8))


def test_padding_vector_dense_masks_and_empty_rows():
    q, k, v, do = make(2, 4, 2, 37, 37, 32, seed=7)
    kpm = torch.ones(2, 37, dtype=torch.bool, device=DEVICE)
    kpm[0, :9] = False
    kpm[1, 30:] = False
    assert_close(errors(q, k, v, do, key_padding_mask=kpm))
    out = blockwise_attention(q, k, v, key_padding_mask=kpm, backend="triton", block_size=BLOCK)
    assert torch.equal(out[0, :, :9], torch.zeros_like(out[0, :, :9]))
    g = torch.Generator().manual_seed(1)
    bool_mask = (torch.rand(2, 1, 37, 37, generator=g) > 0.4).to(DEVICE)
    assert_close(errors(q, k, v, do, causal=False, attn_mask=bool_mask))
    bias = torch.randn(1, 4, 37, 37, generator=g).to(DEVICE)
    assert_close(errors(q, k, v, do, causal=True, attn_mask=bias))


def test_bf16_inputs():
    q, k, v, do = make(1, 4, 2, 37, 37, 64, dtype=torch.bfloat16, seed=8)
    errs = errors(q, k, v, do)
    assert max(errs) < 1e-2  # reference sees the same bf16 values; only output rounding remains
    tor = run(q, k, v, do, "torch")
    tri = run(q, k, v, do, "triton")
    assert all(rel_err(a, b) < 1e-2 for a, b in zip(tri, tor))


def test_default_tiles():
    q, k, v, do = make(1, 2, 1, 70, 70, 16, seed=9)
    assert_close(errors(q, k, v, do, block=None))


@pytest.mark.parametrize("precision,low,high", [("tf32", 1e-5, 3e-3), ("bf16", 5e-4, 2e-2)])
def test_operand_precisions(precision, low, high):
    """tf32 / bf16 operands: errors of the expected size, and the torch emulation agrees."""
    q, k, v, do = make(1, 4, 2, 37, 37, 64, seed=10)
    errs = errors(q, k, v, do, precision=precision)
    assert low < max(errs) < high, errs
    tor = run(q, k, v, do, "torch", precision=precision)
    tri = run(q, k, v, do, "triton", precision=precision)
    assert all(rel_err(a, b) < high for a, b in zip(tri, tor))
    assert max(errors(q, k, v, do, precision="ieee")) < TOL


def test_matches_torch_backend_exactly_enough():
    """The torch backend is the reference the Triton backend is held to."""
    q, k, v, do = make(2, 4, 2, 37, 37, 64, seed=11)
    tor = run(q, k, v, do, "torch", block=(16, 16), sliding_window=9, softcap=6.0)
    tri = run(q, k, v, do, "triton", sliding_window=9, softcap=6.0)
    assert all(rel_err(a, b) < 1e-6 for a, b in zip(tri, tor))
