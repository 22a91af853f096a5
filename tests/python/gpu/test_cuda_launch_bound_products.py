"""Launch-bound products (Note [Launch-bound products], src/runtime/executor_matmul.cpp): in the
default mode a product of at most `launch_bound_products` multiply-adds on CUDA gets ember's
Triton template (timed against cuBLAS at its first call), with the pointwise kernel after it as
its epilogue; a larger product, reduce-overhead and `launch_bound_products=0` keep cuBLAS alone;
1x1 convolutions of that size in inference are traced as such products, and other convolutions of
one group get the template as an implicit GEMM. Results against eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ember
import ember._C as C

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def mlp(dtype):
    torch.manual_seed(0)
    lin1 = torch.nn.Linear(256, 512).cuda().to(dtype)
    lin2 = torch.nn.Linear(512, 256).cuda().to(dtype)

    def f(x):
        return lin2(F.gelu(lin1(x))) + x

    return f


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_small_products_get_templates_in_the_default_mode(dtype):
    f = mlp(dtype)
    x = torch.randn(4, 32, 256, device="cuda", dtype=dtype)
    tol = dict(atol=3e-2, rtol=3e-2) if dtype == torch.bfloat16 else dict(atol=1e-2, rtol=1e-2)
    with torch.no_grad():
        compiled = C.CompiledGraph(ember.trace(f, (x,)))
        assert compiled.num_matmul_templates == 2, compiled.describe_steps()
        assert compiled.num_fused_epilogues >= 1, compiled.describe_steps()
        for _ in range(3):
            torch.testing.assert_close(compiled(x)[0], f(x), **tol)
        # 128 x 256 x 512 multiply-adds: the device's time is well below a cuBLAS call's host
        # time, so the template's launch wins the first call's timing.
        assert compiled.num_matmul_templates_chosen >= 1, compiled.describe_steps()


def test_large_products_reduce_overhead_and_the_option_keep_cublas():
    f = mlp(torch.bfloat16)
    x = torch.randn(4, 32, 256, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        graph = ember.trace(f, (x,))
        assert C.CompiledGraph(graph, cuda_graphs=True).num_matmul_templates == 0
        with ember.config.patch(launch_bound_products=0):
            assert C.CompiledGraph(graph).num_matmul_templates == 0
        # 4096 x 4096 x 4096 multiply-adds: far above 2^29.
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        big = C.CompiledGraph(ember.trace(lambda a: torch.relu(a @ a), (a,)))
        assert big.num_matmul_templates == 0, big.describe_steps()
        torch.testing.assert_close(big(a)[0], torch.relu(a @ a), atol=0.5, rtol=2e-2)


class Bottleneck(torch.nn.Module):
    """A residual block whose sum reads two 1x1 convolutions (the block's and the shortcut's)."""

    def __init__(self, c=32, mid=16, out=64):
        super().__init__()
        self.reduce = torch.nn.Conv2d(c, mid, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(mid)
        self.conv = torch.nn.Conv2d(mid, mid, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(mid)
        self.expand = torch.nn.Conv2d(mid, out, 1, bias=False)
        self.bn3 = torch.nn.BatchNorm2d(out)
        self.shortcut = torch.nn.Conv2d(c, out, 1, bias=False)
        self.bn4 = torch.nn.BatchNorm2d(out)

    def forward(self, x):
        y = F.relu(self.bn1(self.reduce(x)))
        y = F.relu(self.bn2(self.conv(y)))
        return F.relu(self.bn3(self.expand(y)) + self.bn4(self.shortcut(x)))


def test_small_pointwise_convolutions_become_templated_products():
    torch.manual_seed(0)
    model = Bottleneck().cuda().to(torch.bfloat16).eval()
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    x = torch.randn(1, 32, 14, 14, device="cuda", dtype=torch.bfloat16)
    x = x.to(memory_format=torch.channels_last)
    with torch.no_grad():
        ops = ember.trace(model, (x,)).ops
        assert ops.count("aten::mm") == 3 and ops.count("aten::convolution") == 1, ops
        with ember.config.patch(launch_bound_products=0):
            assert "aten::mm" not in ember.trace(model, (x,)).ops
        want = model(x)
        # The three products and the 3x3 convolution (an implicit GEMM) get templates.
        graph = C.CompiledGraph(ember.trace(model, (x,)))
        assert graph.num_matmul_templates == 4, graph.describe_steps()
        torch.testing.assert_close(graph(x)[0], want, atol=3e-2, rtol=3e-2)
        torch.testing.assert_close(graph(x)[0], want, atol=3e-2, rtol=3e-2)
        compiled = ember.compile(model)
        for _ in range(3):
            torch.testing.assert_close(compiled(x), want, atol=3e-2, rtol=3e-2)
    # At 512 x 56 x 56 rows a 32 -> 64 product is 6.6e9 multiply-adds: a cuDNN convolution.
    big = torch.randn(512, 32, 56, 56, device="cuda", dtype=torch.bfloat16)
    big = big.to(memory_format=torch.channels_last)
    with torch.no_grad():
        assert "aten::mm" not in ember.trace(model, (big,)).ops


def test_grouped_and_depthwise_convolutions_get_templates():
    """A grouped 3x3 (two groups) and a depthwise 5x5 with a bias at batch 1: each a batch of
    implicit GEMMs, one per group, timed against cuDNN; the results are eager's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(32, 64, 3, padding=1, groups=2, bias=False), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 5, padding=2, groups=64), torch.nn.Hardswish(),
    ).cuda().to(torch.bfloat16).eval()
    x = torch.randn(1, 32, 28, 28, device="cuda", dtype=torch.bfloat16)
    x = x.to(memory_format=torch.channels_last)
    with torch.no_grad():
        want = model(x)
        graph = C.CompiledGraph(ember.trace(model, (x,)))
        # A convolution the tracer timed faster on NCHW keeps cuDNN (its weight is not
        # channels-last): at most the two.
        assert 1 <= graph.num_matmul_templates <= 2, graph.describe_steps()
        for _ in range(3):
            torch.testing.assert_close(graph(x)[0], want, atol=3e-2, rtol=3e-2)
