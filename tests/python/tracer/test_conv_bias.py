"""A CUDA convolution's bias is recorded apart from it (src/rewrite/conv_bias.h): the convolution
without its bias, then an add of the bias viewed [1, C, 1, ...], which fuses into the next
kernel. Traced here for a cuda:0 the inputs only claim (nothing runs); tests/python/gpu runs
such models against eager."""

import pytest
import torch
import torch.nn.functional as F

import ember


def _ops(graph):
    return [ln.split("= ")[1].split("(")[0] for ln in str(graph).splitlines() if "= aten::" in ln]


def _conv_line(graph):
    return next(ln for ln in str(graph).splitlines() if "aten::convolution(" in ln)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_bias_of_a_cuda_convolution_is_an_add_after_it(dtype):
    x, w, b = torch.randn(2, 3, 16, 16), torch.randn(8, 3, 3, 3), torch.randn(8)
    g = ember.trace(lambda x, w, b: F.relu(F.conv2d(x, w, b, padding=1)),
                    [t.to(dtype) for t in (x, w, b)], device="cuda:0")
    conv = _conv_line(g)
    assert ", None, [1, 1]" in conv, conv  # recorded with no bias
    ops = _ops(g)
    i = ops.index("aten::convolution")
    assert "aten::add.Tensor" in ops[i:], g
    assert any("aten::view" in ln and "[1, 8, 1, 1]" in ln for ln in str(g).splitlines()), g


def test_one_and_three_dims_and_transposed():
    g1 = ember.trace(lambda x, w, b: F.conv1d(x, w, b), [torch.randn(2, 4, 32), torch.randn(8, 4, 3),
                                                          torch.randn(8)], device="cuda:0")
    assert ", None, [1]" in _conv_line(g1) and "[1, 8, 1]" in str(g1)
    gt = ember.trace(lambda x, w, b: F.conv_transpose2d(x, w, b, groups=2),
                     [torch.randn(2, 4, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(6)],
                     device="cuda:0")
    assert "None" in _conv_line(gt) and "[1, 6, 1, 1]" in str(gt)


@pytest.mark.parametrize("case", ["cpu", "f64"])
def test_left_alone(case):
    dtype = torch.float64 if case == "f64" else torch.float32
    args = [torch.randn(2, 3, 8, 8, dtype=dtype), torch.randn(4, 3, 3, 3, dtype=dtype),
            torch.randn(4, dtype=dtype)]
    g = ember.trace(lambda x, w, b: F.conv2d(x, w, b), args,
                    device=None if case == "cpu" else "cuda:0")
    assert ", None, [1, 1]" not in _conv_line(g), g
    assert "aten::add" not in str(g), g
