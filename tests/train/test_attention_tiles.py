"""The GPU tile ladders, run by Triton's CPU interpreter at head dims 128 and 256.

``block_size="default"`` makes the interpreter use the first configuration of each kernel's GPU ladder
(``triton_impl._CONFIGS``) instead of its own small tile. Every mask feature is on at once: GQA, packed
sequences with a padded tail, key padding and a sliding window; each precision mode is held to fp64.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton", reason="triton is not installed")

from attention_checks import rel_err  # noqa: E402

from train.attention import blockwise_attention, reference_attention, triton_interpret  # noqa: E402

if not triton_interpret():
    pytest.skip("interpreter tests (TRITON_INTERPRET=1)", allow_module_level=True)

L = 80  # two packed sequences (30 + 40) and 10 positions that belong to none
BF16_ROUNDING = 2.0**-7  # two bf16 roundings (P or dS, then the output) relative to the largest entry
# precision -> (input dtype, bound on max |err| / max |ref| over out, dq, dk, dv)
MODES = {
    "ieee": (torch.float32, 1e-6),
    "tf32": (torch.float32, 2.0**-9),
    "bf16": (torch.bfloat16, BF16_ROUNDING),
}


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("head_dim", [128, 256])
@pytest.mark.parametrize("precision", list(MODES))
def test_default_tiles_all_features_against_fp64(precision, head_dim):
    dtype, bound = MODES[precision]
    g = torch.Generator().manual_seed(head_dim)
    q = torch.randn(1, 4, L, head_dim, generator=g).to(dtype).requires_grad_(True)
    k = torch.randn(1, 2, L, head_dim, generator=g).to(dtype).requires_grad_(True)
    v = torch.randn(1, 2, L, head_dim, generator=g).to(dtype).requires_grad_(True)
    do = torch.randn(1, 4, L, head_dim, generator=g).to(dtype)
    kpm = torch.ones(1, L, dtype=torch.bool)
    kpm[0, :3] = False  # left padding of the first sequence
    sem = dict(
        cu_seqlens=torch.tensor([0, 30, 70], dtype=torch.int32), sliding_window=24, key_padding_mask=kpm
    )

    out = blockwise_attention(q, k, v, backend="triton", block_size="default", precision=precision, **sem)
    got = (out, *torch.autograd.grad(out, (q, k, v), do))
    qd, kd, vd = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    ref = reference_attention(qd, kd, vd, **sem)
    want = (ref, *torch.autograd.grad(ref, (qd, kd, vd), do.double()))

    assert out.dtype == dtype
    errs = [rel_err(a, b) for a, b in zip(got, want)]
    assert max(errs) < bound, f"{precision} D={head_dim}: errors out/dq/dk/dv {errs}"
    assert torch.equal(out[0, :, 70:], torch.zeros_like(out[0, :, 70:]))  # the padded tail
