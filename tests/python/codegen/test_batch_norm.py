"""batch_norm in inference mode as an index function fused with its producers and consumers
(kernel counters), differential against eager over ranks, dtypes, weight/bias None, layouts and
size-1 batches. Training mode: test_batch_norm_training.py."""

import pytest
import torch
import torch.nn.functional as F

from kernel_check import run

FLOATS = [torch.float32, torch.float64, torch.bfloat16]


def randomized(bn):
    """`bn` with random affine parameters and running statistics (eval mode)."""
    with torch.no_grad():
        if bn.weight is not None:
            bn.weight.normal_()
            bn.bias.normal_()
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.3, 3.0)
    return bn.eval()


def test_conv_bn_relu_is_conv_and_one_kernel():
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), randomized(torch.nn.BatchNorm2d(8)),
                            torch.nn.ReLU()).eval()
    # On the CPU the convolution runs channels-last (rewrite/conv_layout.h): one kernel copies
    # the input and one the weight to that layout, and batch norm and relu are one kernel with
    # the copy of the result back to contiguous.
    stats = run(m, torch.randn(2, 3, 16, 16), kernels=3, externs=1)
    assert stats["fused_nodes"] == 5


def test_residual_block_fuses_bn_add_relu():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
            self.bn = randomized(torch.nn.BatchNorm2d(8))

        def forward(self, x):
            return torch.relu(self.bn(self.conv(x)) + x)

    # The input and the weight copied channels-last (two kernels), then bn + add + relu in one,
    # with the result's copy back to contiguous.
    stats = run(Block().eval(), torch.randn(2, 8, 10, 10), kernels=3, externs=1)
    assert stats["fused_nodes"] == 6


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("module,shape", [(torch.nn.BatchNorm1d, (4, 6)),
                                          (torch.nn.BatchNorm1d, (3, 6, 9)),
                                          (torch.nn.BatchNorm2d, (2, 6, 5, 7)),
                                          (torch.nn.BatchNorm3d, (2, 6, 3, 4, 5))])
def test_batch_norm_alone_is_one_kernel(module, shape, affine, dtype):
    bn = randomized(module(6, affine=affine)).to(dtype)
    stats = run(bn, (torch.randn(shape) * 2 + 1).to(dtype), kernels=1, externs=0)
    assert stats["fused_nodes"] == 1


def test_channels_last_and_non_contiguous_inputs():
    bn = randomized(torch.nn.BatchNorm2d(8))
    run(bn, torch.randn(2, 8, 6, 6).to(memory_format=torch.channels_last), kernels=1)
    # Inputs that are neither contiguous nor channels-last: eager's TensorIterator path (another
    # output layout and formula) stays an ATen call.
    run(lambda x: bn(x.transpose(1, 3)), torch.randn(2, 6, 6, 8), kernels=0)
    run(lambda x: bn(x[:, :, ::2]) + 1, torch.randn(2, 8, 8, 3), kernels=1, externs=1)
    bn3 = randomized(torch.nn.BatchNorm3d(4))
    run(bn3, torch.randn(2, 4, 3, 3, 3).to(memory_format=torch.channels_last_3d), kernels=1)


def test_size_one_and_empty_batch_and_channels():
    run(randomized(torch.nn.BatchNorm2d(5)), torch.randn(1, 5, 4, 4), kernels=1)
    run(randomized(torch.nn.BatchNorm1d(1)), torch.randn(1, 1, 7), kernels=1)
    run(randomized(torch.nn.BatchNorm1d(3)), torch.randn(1, 3), kernels=1)
    run(randomized(torch.nn.BatchNorm2d(4)), torch.randn(0, 4, 3, 3), kernels=1)


def test_functional_weight_or_bias_only_and_eps():
    rm, rv = torch.randn(5), torch.rand(5) + 0.5
    w, b = torch.randn(5), torch.randn(5)
    x = torch.randn(3, 5, 4)
    run(lambda x: F.batch_norm(x, rm, rv, w, None, False, 0.1, 1e-3), x, kernels=1)
    run(lambda x: F.batch_norm(x, rm, rv, None, b, False, 0.1, 0.5), x, kernels=1)


def test_bf16_input_with_f32_parameters():
    # Eager's mixed type: a bf16 input with f32 weight, bias and running statistics.
    rm, rv = torch.randn(6), torch.rand(6) + 0.5
    w, b = torch.randn(6), torch.randn(6)
    run(lambda x: torch.relu(F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5)),
        torch.randn(2, 6, 5, 5).bfloat16(), kernels=1)


def test_zero_variance_channel_gives_bias():
    # var + eps with var = 0: eager's alpha/beta form, exactly.
    rm, rv = torch.randn(4), torch.zeros(4)
    run(lambda x: F.batch_norm(x, rm, rv, None, None, False, 0.1, 1e-5),
        torch.randn(2, 4, 3), kernels=1)


def test_native_batch_norm_statistics_stay_aten():
    # In eval mode eager returns empty save_mean/save_invstd (its meta function says [C]): a graph
    # that reads them keeps the ATen call.
    rm, rv = torch.randn(4), torch.rand(4) + 0.5

    def f(x):
        y, mean, invstd = torch.native_batch_norm(x, None, None, rm, rv, False, 0.1, 1e-5)
        return y + 1, mean, invstd

    run(f, torch.randn(2, 4, 3), kernels=1, externs=1)


def test_legit_no_training_overload():
    rm, rv = torch.randn(4), torch.rand(4) + 0.5
    w, b = torch.randn(4), torch.randn(4)
    run(lambda x: torch.ops.aten._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.1,
                                                                     1e-5)[0].relu(),
        torch.randn(2, 4, 3), kernels=1)


def test_batch_norm_read_at_two_indices_is_realized():
    # Note [Recompute or realize]: its per-element terms (a sqrt, a division, ...) cost more than
    # recomputing allows, so a kernel of its own stores it and the flip reads it back.
    bn = randomized(torch.nn.BatchNorm1d(4))
    run(lambda x: (lambda y: y + y.flip(-1))(bn(x)), torch.randn(2, 4, 9), kernels=2)


def test_legit_training_overload_mutates_running_stats():
    # _native_batch_norm_legit (mutation annotations) traces as _native_batch_norm_legit_functional
    # plus input mutations; an ATen call, the running statistics updated as eager's.
    def f(x, rm, rv):
        return torch.ops.aten._native_batch_norm_legit(x, None, None, rm, rv, True, 0.1,
                                                       1e-5)[0].relu()

    run(f, torch.randn(4, 3, 5), torch.randn(3), torch.rand(3) + 0.5, kernels=1)


def test_legit_training_bf16_statistics_of_another_dtype_than_traced():
    # The meta function of bf16 _native_batch_norm_legit_functional traces f32 statistics, the CPU
    # kernel returns bf16 ones: the kernel that converts them for the mutation reads a copy in the
    # traced dtype, not the bf16 bytes as f32.
    def f(x, w, b, rm, rv):
        return torch.ops.aten._native_batch_norm_legit(x, w, b, rm, rv, True, 0.5, 1e-5)

    c = 3
    run(f, torch.randn(4, c, 5).bfloat16(), torch.randn(c).bfloat16(), torch.randn(c).bfloat16(),
        torch.randn(c).bfloat16(), (torch.rand(c) + 0.5).bfloat16())
