"""On the CPU, ``auto`` sends fp32 causal global attention to PyTorch's fused kernel: the same
function as the blockwise torch backend (outputs and gradients), packed sequences kept apart."""

import pytest
import torch

from train.attention.api import blockwise_attention


def _qkv(length, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(1, 4, length, 32), (1, 2, length, 32), (1, 2, length, 32)]
    return [torch.randn(s, generator=g).requires_grad_(True) for s in shapes]


def _run(backend, cu=None, **kw):
    q, k, v = _qkv(300)
    out = blockwise_attention(q, k, v, cu_seqlens=cu, scale=0.2, backend=backend, **kw)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return out.detach(), q.grad, k.grad, v.grad


@pytest.mark.parametrize(
    "cu", [None, torch.tensor([0, 120, 121, 250], dtype=torch.int32)], ids=["one-sequence", "packed+tail"]
)
def test_fused_equals_the_blockwise_kernel(cu):
    fused, ref = _run("auto", cu), _run("torch", cu)
    for a, b in zip(fused, ref):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
    if cu is not None:
        assert fused[0][:, :, 250:].abs().max() == 0  # past the last boundary: attends nothing


def test_the_fused_path_is_taken_only_where_it_is_exact(monkeypatch):
    from train.attention import cpu_fused

    calls = []
    real = cpu_fused.fused_attention
    monkeypatch.setattr(cpu_fused, "fused_attention", lambda *a: calls.append(1) or real(*a))
    _run("auto")
    assert calls == [1]
    for kw in ({"sliding_window": 64}, {"softcap": 30.0}):  # these stay on the blockwise kernel
        a, b = _run("auto", **kw), _run("torch", **kw)
        assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert calls == [1]
