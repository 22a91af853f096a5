"""Reductions as generated kernels: softmax, log_softmax, layer_norm, sum/mean/amax/amin, each one
kernel, asserted by kernel counters, differential against eager (ember.testing.check_model)."""

import pytest
import torch
import torch.nn.functional as F

from ember.testing import check_model

FLOATS = [torch.float32, torch.float64]


@pytest.fixture(autouse=True)
def _seed(monkeypatch):
    torch.manual_seed(0)  # inputs do not depend on which tests ran before
    monkeypatch.setenv("EMBER_REDUCTION_KERNELS", "1")  # off by default (not yet vectorized)


def run(fn, *args, **kw):
    with torch.no_grad():
        return check_model(fn, args, expect_graphs=1, expect_fallbacks=0, **kw)


@pytest.mark.parametrize("dtype", FLOATS + [torch.bfloat16])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_last_dim_is_one_kernel(dtype, log):
    op = F.log_softmax if log else F.softmax
    stats = run(lambda x: op(x, -1), torch.randn(6, 37, dtype=dtype) * 4)
    assert stats["kernels"] == 1 and stats["fused_nodes"] == 1


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape,dim", [((9, 5), 0), ((3, 5, 7), 1), ((3, 5, 7), 0), ((4, 1, 3), 1)])
def test_softmax_other_dims(shape, dim, log):
    op = F.log_softmax if log else F.softmax
    stats = run(lambda x: op(x, dim), torch.randn(*shape) * 3)
    assert stats["kernels"] == 1


@pytest.mark.parametrize("log", [False, True])
def test_softmax_large_rows_parallel(log):
    op = F.log_softmax if log else F.softmax
    stats = run(lambda x: op(x, -1), torch.randn(64, 1024) * 5)
    assert stats["kernels"] == 1


def test_softmax_of_non_contiguous_input():
    stats = run(lambda x: F.softmax(x, -1), torch.randn(37, 6).t())
    assert stats["kernels"] == 1
    stats = run(lambda x: F.softmax(x.transpose(0, 1), -1) + 0, torch.randn(37, 6))
    assert stats["kernels"] == 2  # softmax, then the add (no epilogue fusion yet)


def test_softmax_masking_and_nan_like_eager():
    x = torch.randn(4, 8)
    x[0, 3:] = -float("inf")
    x[1, 2] = float("nan")
    x[2, :] = -float("inf")  # a fully masked row: NaN, as eager
    x[3, 1] = float("inf")
    run(lambda x: (F.softmax(x, -1), F.log_softmax(x, -1)), x)


def test_softmax_epilogue_stays_correct():
    def f(x, m):
        return F.softmax(x, -1) * m + 1

    stats = run(f, torch.randn(5, 16), torch.rand(5, 16))
    assert stats["kernels"] == 2


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_module_is_one_kernel(dtype, affine):
    ln = torch.nn.LayerNorm(48, elementwise_affine=affine).to(dtype).eval()
    if affine:
        with torch.no_grad():
            ln.weight.normal_()
            ln.bias.normal_()
    stats = run(ln, torch.randn(3, 7, 48, dtype=dtype) * 2 + 1)
    assert stats["kernels"] == 1 and stats["fused_nodes"] == 1


def test_layer_norm_large_rows():
    ln = torch.nn.LayerNorm(1024).eval()
    stats = run(ln, torch.randn(64, 1024) * 3 + 0.5)
    assert stats["kernels"] == 1


def test_layer_norm_two_normalized_dims_weight_only():
    w = torch.randn(5, 6)
    stats = run(lambda x: F.layer_norm(x, (5, 6), w, None, 1e-3), torch.randn(4, 5, 6))
    assert stats["kernels"] == 1


def test_native_layer_norm_writes_mean_and_rstd():
    w, b = torch.randn(20), torch.randn(20)

    def f(x):
        return torch.native_layer_norm(x, [20], w, b, 1e-5)

    stats = run(f, torch.randn(2, 3, 20) * 10 + 3)
    assert stats["kernels"] == 1


def test_layer_norm_only_statistics_used():
    def f(x):
        _, mean, rstd = torch.native_layer_norm(x, [16], None, None, 1e-5)
        return mean, rstd

    stats = run(f, torch.randn(8, 16))
    assert stats["kernels"] == 1


def test_layer_norm_of_non_contiguous_input():
    ln = torch.nn.LayerNorm(12).eval()
    run(ln, torch.randn(12, 9).t())


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("keepdim", [False, True])
def test_reductions_over_last_dim_are_one_kernel(dtype, op, keepdim):
    def f(x):
        return getattr(torch, op)(x, -1, keepdim=keepdim)

    stats = run(f, torch.randn(7, 5, 33, dtype=dtype))
    assert stats["kernels"] == 1


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin"])
def test_reductions_over_trailing_dims_and_all(op):
    def f(x):
        return getattr(torch, op)(x, (1, 2)), getattr(torch, op)(x, (-2, -1), keepdim=True)

    stats = run(f, torch.randn(4, 6, 9))
    assert stats["kernels"] == 2
    stats = run(lambda x: x.sum() if op == "sum" else getattr(torch, op)(x, (0, 1)),
                torch.randn(300, 200))
    assert stats["kernels"] == 1


def test_large_sum_and_mean_rows():
    stats = run(lambda x: (x.sum(-1), x.mean(-1)), torch.randn(128, 2048))
    assert stats["kernels"] == 2


def test_reduction_over_leading_dim_runs_as_aten_and_is_correct():
    stats = run(lambda x: (x.sum(0), x.amax(0)), torch.randn(6, 7))
    assert stats["kernels"] == 0


def test_amax_nan_propagates():
    x = torch.randn(3, 5)
    x[1, 2] = float("nan")
    x[2, :] = -float("inf")
    run(lambda x: (x.amax(-1), x.amin(-1), x.sum(-1)), x)


def test_sum_with_dtype_argument_equal_to_output():
    stats = run(lambda x: torch.sum(x, -1, dtype=torch.float32), torch.randn(4, 9))
    assert stats["kernels"] == 1


def test_integer_sum_stays_aten():
    stats = run(lambda x: x.sum(-1), torch.randint(-5, 5, (4, 9)))
    assert stats["kernels"] == 0


def test_reductions_between_pointwise_groups():
    def f(x, w, b):
        y = F.gelu(x * 2)
        z = F.layer_norm(y, (32,), w, b)
        return F.softmax(z + 1, -1).sum(-1, keepdim=True) * x

    stats = run(f, torch.randn(6, 32), torch.randn(32), torch.randn(32))
    assert stats["kernels"] == 6  # gelu | layer_norm | add | softmax | sum | mul
