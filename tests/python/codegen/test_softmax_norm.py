"""softmax, log_softmax, layer_norm and group_norm as generated kernels: each one kernel (kernel
counters), differential against eager over dims, dtypes, strided inputs, masking and NaN."""

import pytest
import torch
import torch.nn.functional as F

from kernel_check import run

FLOATS = [torch.float32, torch.float64, torch.bfloat16]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_last_dim_is_one_kernel(dtype, log):
    op = F.log_softmax if log else F.softmax
    stats = run(lambda x: op(x, -1), (torch.randn(6, 37) * 4).to(dtype), kernels=1)
    assert stats["fused_nodes"] == 1


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape,dim", [((9, 5), 0), ((3, 5, 7), 1), ((3, 5, 7), 0),
                                       ((4, 1, 3), 1), ((2, 3, 300), 1)])
def test_softmax_other_dims(shape, dim, log, dtype):
    op = F.log_softmax if log else F.softmax
    run(lambda x: op(x, dim), (torch.randn(*shape) * 3).to(dtype), kernels=1)


@pytest.mark.parametrize("s", [32, 64, 128, 512])
def test_attention_shaped_softmax(s):
    run(lambda x: F.softmax(x, -1), torch.randn(2, 4, s, s) * 3, kernels=1)


def test_softmax_of_non_contiguous_inputs():
    run(lambda x: F.softmax(x, -1), torch.randn(37, 6).t(), kernels=1)
    run(lambda x: F.softmax(x.transpose(0, 1), -1) + 0, torch.randn(37, 6), kernels=1)
    run(lambda x: F.log_softmax(x, 1), torch.randn(6, 40, 3)[:, ::3], kernels=1)


def test_softmax_masking_and_nan_like_eager():
    x = torch.randn(4, 80)
    x[0, 3:] = -float("inf")
    x[1, 2] = float("nan")
    x[2, :] = -float("inf")  # a fully masked row: NaN, as eager
    x[3, 1] = float("inf")
    run(lambda x: (F.softmax(x, -1), F.log_softmax(x, -1), F.softmax(x, 0)), x, kernels=3)


@pytest.mark.parametrize("dtype", FLOATS)
def test_safe_softmax_zeroes_fully_masked_rows(dtype):
    """aten::_safe_softmax (SDPA's math path, T5's position-biased attention): one kernel with
    the bias add before it; a row of -inf only is 0, a row with a NaN stays NaN, as eager."""
    x = torch.randn(3, 5, 40)
    x[0, 1] = -float("inf")
    x[1, 2, 7:] = -float("inf")
    x[2, 0, 3] = float("nan")
    safe = torch.ops.aten._safe_softmax
    run(lambda x, b: safe(x + b, -1), x.to(dtype), torch.randn(40).to(dtype), kernels=1)
    run(lambda x: safe(x, 1), x.to(dtype), kernels=1)
    if dtype == torch.bfloat16:  # in f32 from bf16: exact, one kernel too
        run(lambda x: safe(x, -1, dtype=torch.float32), x.to(dtype), kernels=1)


def test_softmax_size0_size1_and_0dim():
    run(lambda x: (F.softmax(x, -1), F.softmax(x, 0)), torch.randn(0, 5), kernels=2)
    run(lambda x: (F.softmax(x, 0), F.log_softmax(x, -1)), torch.tensor(1.5), kernels=2)
    run(lambda x: (F.softmax(x, -1), F.log_softmax(x, 1)), torch.randn(5, 1), kernels=2)


def test_softmax_epilogue_is_fused():
    run(lambda x, m: F.softmax(x, -1) * m + 1, torch.randn(5, 16), torch.rand(5, 16), kernels=1)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_module_is_one_kernel(dtype, affine):
    ln = torch.nn.LayerNorm(48, elementwise_affine=affine).to(dtype).eval()
    if affine:
        with torch.no_grad():
            ln.weight.normal_()
            ln.bias.normal_()
    stats = run(ln, (torch.randn(3, 7, 48) * 2 + 1).to(dtype), kernels=1)
    assert stats["fused_nodes"] == 1


@pytest.mark.parametrize("hidden", [64, 256, 768, 1024])
def test_layer_norm_transformer_shapes(hidden):
    ln = torch.nn.LayerNorm(hidden).eval()
    run(ln, torch.randn(2, 33, hidden) * 3 + 0.5, kernels=1)


def test_layer_norm_two_normalized_dims_weight_only():
    w = torch.randn(5, 6)
    run(lambda x: F.layer_norm(x, (5, 6), w, None, 1e-3), torch.randn(4, 5, 6), kernels=1)


def test_layer_norm_bias_only_and_mixed_dtypes():
    b = torch.randn(16)
    run(lambda x: F.layer_norm(x, (16,), None, b), torch.randn(4, 16), kernels=1)
    # bf16 input with f32 weight and bias (mixed-type layer_norm); mean and rstd are f32.
    w, b = torch.randn(16), torch.randn(16)
    run(lambda x: torch.native_layer_norm(x, [16], w, b, 1e-5), torch.randn(4, 16).bfloat16(),
        kernels=1)


def test_native_layer_norm_writes_mean_and_rstd():
    w, b = torch.randn(20), torch.randn(20)
    run(lambda x: torch.native_layer_norm(x, [20], w, b, 1e-5), torch.randn(2, 3, 20) * 10 + 3,
        kernels=1)


def test_layer_norm_only_statistics_used():
    def f(x):
        _, mean, rstd = torch.native_layer_norm(x, [16], None, None, 1e-5)
        return mean, rstd

    run(f, torch.randn(8, 16), kernels=1)


def test_layer_norm_of_non_contiguous_input():
    ln = torch.nn.LayerNorm(12).eval()
    run(ln, torch.randn(12, 9).t(), kernels=1)
    run(ln, torch.randn(4, 30)[:, ::2][:, :12], kernels=1)


def test_layer_norm_constant_rows():
    # Zero variance: the output is exactly the bias (no fused multiply-add residue).
    ln = torch.nn.LayerNorm(8).eval()
    with torch.no_grad():
        ln.bias.normal_()
    run(ln, torch.full((3, 8), 1.7), kernels=1)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape,groups", [((2, 6, 5, 4), 3), ((3, 8, 10), 8), ((2, 4), 2),
                                          ((1, 32, 7, 7), 1)])
def test_group_norm_is_one_kernel(shape, groups, affine, dtype):
    c = shape[1]
    w = torch.randn(c).to(dtype) if affine else None
    b = torch.randn(c).to(dtype) if affine else None
    run(lambda x: F.group_norm(x, groups, w, b), (torch.randn(shape) * 2 + 1).to(dtype),
        kernels=1)


def test_group_norm_module_and_channels_last():
    gn = torch.nn.GroupNorm(4, 8).eval()
    with torch.no_grad():
        gn.weight.normal_()
        gn.bias.normal_()
    run(gn, torch.randn(2, 8, 6, 6), kernels=1)
    run(gn, torch.randn(2, 8, 6, 6).to(memory_format=torch.channels_last), kernels=1)


def test_native_group_norm_statistics():
    run(lambda x: torch.native_group_norm(x, None, None, 2, 6, 20, 3, 1e-5),
        torch.randn(2, 6, 4, 5) * 3, kernels=1)
