"""1x1 convolutions as matrix products on CUDA (src/rewrite/conv_as_product.h, EMBER_CONV1X1_AS_MM=1) against eager:
an inverted-residual block at batch 1 and 8, bf16 and f16, bias and none."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


class Block(torch.nn.Module):
    def __init__(self, c=24, e=96):
        super().__init__()
        self.expand = torch.nn.Conv2d(c, e, 1)
        self.bn1 = torch.nn.BatchNorm2d(e)
        self.dw = torch.nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False)
        self.project = torch.nn.Conv2d(e, c, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(c)

    def forward(self, x):
        y = F.relu6(self.bn1(self.expand(x)))
        return x + self.bn2(self.project(F.relu6(self.dw(y))))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n", [1, 8])
def test_inverted_residual_block_matches_eager(dtype, n, monkeypatch):
    monkeypatch.setenv("EMBER_CONV1X1_AS_MM", "1")
    torch.manual_seed(0)
    model = Block().cuda().to(dtype).eval()
    x = torch.randn(n, 24, 28, 28, device="cuda", dtype=dtype)
    with torch.no_grad():
        assert "aten::mm" in ember.trace(model, (x,)).ops
        want = model(x)
        got = ember.compile(model)(x)
    tol = 3e-2 if dtype == torch.bfloat16 else 5e-3
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
