"""batch_norm in training mode as a reduction kernel (docs/design/scheduler.md, "Batch norm"):
outputs and running statistics against eager after compiled calls (check_model compares module
buffers), over ranks, dtypes, affine or not, layouts; its epilogue and prologue fusion; the
direct ATen forms; what stays an ATen call. Modules run in train mode under torch.no_grad()
(compiling with grad mode on and grad-requiring parameters falls back to eager)."""

import pytest
import torch
import torch.nn.functional as F

from kernel_check import run

FLOATS = [torch.float32, torch.float64, torch.bfloat16]


def randomized(bn):
    """`bn` in train mode with random affine parameters and running statistics."""
    with torch.no_grad():
        if bn.weight is not None:
            bn.weight.normal_()
            bn.bias.normal_()
        if bn.running_mean is not None:
            bn.running_mean.normal_()
            bn.running_var.uniform_(0.3, 3.0)
    return bn.train()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("module,shape", [(torch.nn.BatchNorm1d, (4, 6)),
                                          (torch.nn.BatchNorm1d, (3, 6, 9)),
                                          (torch.nn.BatchNorm2d, (2, 6, 5, 7)),
                                          (torch.nn.BatchNorm3d, (2, 6, 3, 4, 5))])
def test_batch_norm_alone_is_one_kernel(module, shape, affine, dtype):
    bn = randomized(module(6, affine=affine)).to(dtype)
    # The batch norm, and num_batches_tracked += 1; a bf16 module also converts the new running
    # statistics (f32 in the traced graph, bf16 values) back to bf16 in a [C] kernel.
    stats = run(bn, (torch.randn(shape) * 2 + 1).to(dtype), externs=0,
                kernels=3 if dtype == torch.bfloat16 else 2)
    assert stats["nodes"] == (4 if dtype == torch.bfloat16 else 2)


def test_bf16_input_with_f32_module():
    # Eager's mixed type: bf16 input, f32 weight, bias and running statistics (and statistics).
    run(randomized(torch.nn.BatchNorm2d(6)), torch.randn(2, 6, 5, 5).bfloat16(), kernels=2)


@pytest.mark.parametrize("momentum", [0.1, 0.5])
def test_conv_bn_relu_is_conv_and_one_kernel(momentum):
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3),
                            randomized(torch.nn.BatchNorm2d(8, momentum=momentum)),
                            torch.nn.ReLU()).train()
    # (Under no_grad: the convolution runs channels-last, its input and weight copied by two
    # kernels, rewrite/conv_layout.h.) bn + relu in one kernel with the result's copy back to
    # contiguous, and num_batches_tracked += 1.
    stats = run(m, torch.randn(4, 3, 10, 10), kernels=4, externs=1)
    assert stats["fused_nodes"] == 6


def test_residual_prologue_and_epilogue():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = randomized(torch.nn.BatchNorm2d(8))

        def forward(self, x, y):
            return torch.relu(self.bn(x + y) + x)

    stats = run(Block().train(), torch.randn(2, 8, 5, 5), torch.randn(2, 8, 5, 5), kernels=2)
    assert stats["fused_nodes"] == 5


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_channels_last(dtype):
    run(randomized(torch.nn.BatchNorm2d(8)).to(dtype),
        torch.randn(3, 8, 6, 6).to(dtype).to(memory_format=torch.channels_last), externs=0)
    run(randomized(torch.nn.BatchNorm3d(4)),
        torch.randn(2, 4, 3, 3, 3).to(memory_format=torch.channels_last_3d), kernels=2)


def test_larger_shapes_both_layouts():
    x = torch.randn(8, 64, 28, 28) * 3 + 2
    run(randomized(torch.nn.BatchNorm2d(64)), x, kernels=2)
    run(randomized(torch.nn.BatchNorm2d(64)), x.to(memory_format=torch.channels_last), kernels=2)


def test_without_running_stats_is_one_kernel():
    run(randomized(torch.nn.BatchNorm2d(6, track_running_stats=False)), torch.randn(2, 6, 5, 5),
        kernels=1, externs=0)
    run(randomized(torch.nn.BatchNorm1d(6, affine=False, track_running_stats=False)),
        torch.randn(5, 6), kernels=1, externs=0)


def test_same_module_twice():
    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = randomized(torch.nn.BatchNorm2d(5))

        def forward(self, x):
            return self.bn(self.bn(x) * 2)

    run(Twice().train(), torch.randn(2, 5, 4, 4), externs=0)


def test_cumulative_average_breaks_the_graph_and_matches():
    # momentum=None: the module divides by float(num_batches_tracked), a graph break in Dynamo.
    bn = randomized(torch.nn.BatchNorm2d(4, momentum=None))
    run(bn, torch.randn(2, 4, 3, 3), graphs=None)


def test_one_value_per_channel_raises_as_eager():
    # Eager's module raises before any op; Dynamo raises while running the graph on fake tensors
    # (with any backend), so ember never sees it.
    bn = torch.nn.BatchNorm2d(6).train()
    x = torch.randn(1, 6, 1, 1)
    with torch.no_grad():
        with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
            bn(x)
        with pytest.raises(Exception, match="Expected more than 1 value per channel"):
            torch.compile(bn, backend="ember")(x)


def test_non_contiguous_input_stays_aten():
    class Transposed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = randomized(torch.nn.BatchNorm2d(8))

        def forward(self, x):
            return self.bn(x.transpose(1, 3))

    run(Transposed().train(), torch.randn(2, 6, 6, 8), externs=1)


W, B = torch.randn(5), torch.randn(5)


def test_native_batch_norm_legit_and_statistics():
    def f(x, rm, rv):
        return torch.ops.aten._native_batch_norm_legit(x, W, B, rm, rv, True, 0.3, 1e-5)

    run(f, torch.randn(3, 5, 4), torch.randn(5), torch.rand(5) + 0.5, kernels=1, externs=0)


def test_native_batch_norm_with_input_running_stats():
    def f(x, rm, rv):
        return torch.native_batch_norm(x, W, B, rm, rv, True, 0.2, 1e-5)

    run(f, torch.randn(3, 5, 4), torch.randn(5), torch.rand(5) + 0.5, kernels=1, externs=0)
    run(f, torch.randn(2, 5), torch.randn(5), torch.rand(5) + 0.5, kernels=1, externs=0)


def test_functional_batch_norm_bf16_with_f32_stats():
    def f(x, rm, rv):
        return F.batch_norm(x, rm, rv, W, B, True, 0.1, 1e-5) * 2

    run(f, torch.randn(3, 5, 4).bfloat16(), torch.randn(5), torch.rand(5) + 0.5, kernels=1)


def test_forms_without_running_stats():
    run(lambda x: torch.ops.aten._native_batch_norm_legit(x, W, B, True, 0.3, 1e-5),
        torch.randn(3, 5, 4), kernels=1)
    run(lambda x: torch.native_batch_norm(x, W, B, None, None, True, 0.2, 1e-5),
        torch.randn(3, 5, 4), kernels=1)


def test_zero_variance_with_zero_eps():
    # Eager's save_invstd is 0 where var and eps are both 0 (not inf).
    def f(x, rm, rv):
        return torch.native_batch_norm(x, None, None, rm, rv, True, 0.2, 0.0)

    x = torch.randn(3, 5, 4)
    x[:, 2] = 1.5
    run(f, x, torch.randn(5), torch.rand(5) + 0.5, kernels=1, vary_inputs=False)
