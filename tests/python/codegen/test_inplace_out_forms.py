"""In-place and out= forms of lowered ops run as the same generated kernels as their functional
forms: the tracer functionalizes them (an in-place op on an intermediate becomes its functional
op; one on an input becomes the functional op plus a copy back into the input at the end), so
the scheduler sees pointwise ops, reductions, views and scatters. Differential against eager,
with input mutations compared, and kernel counters asserted."""

import torch
import torch.nn.functional as F

import kernel_check


def run(fn, *args, kernels=None):
    return kernel_check.run(fn, *args, kernels=kernels, externs=0)  # nothing left to ATen


def test_in_place_pointwise_chain_on_an_intermediate():
    def f(x):
        y = x * 1
        y.mul_(2).add_(1).clamp_(min=0).sigmoid_()
        return y

    run(f, torch.randn(8, 16), kernels=1)


def test_in_place_on_an_input_is_written_back():
    def f(x, y):
        x.mul_(y).add_(1)
        return x.relu()

    run(f, torch.randn(8, 16), torch.randn(16), kernels=1)


def test_out_forms_of_pointwise_ops():
    def f(x, y, out):
        torch.add(x, y, out=out)
        torch.tanh(out, out=out)
        return out * 2

    run(f, torch.randn(8, 16), torch.randn(8, 16), torch.empty(8, 16), kernels=1)


def test_out_forms_of_reductions():
    def f(x, s, m):
        torch.sum(x, -1, out=s)
        torch.amax(x, 1, out=m)
        return s + m

    run(f, torch.randn(6, 10), torch.empty(6), torch.empty(6))


def test_out_forms_of_layout_and_indexing_ops():
    def f(a, b, i, out1, out2):
        torch.cat([a, b], 0, out=out1)
        torch.index_select(a, 0, i, out=out2)
        return out1.sum(0) + out2.sum(0)

    run(f, torch.randn(3, 5), torch.randn(2, 5), torch.tensor([2, 0, 1]), torch.empty(5, 5),
        torch.empty(3, 5))


def test_in_place_softmax_layer_norm_and_scatter():
    def f(x, idx, src):
        y = F.layer_norm(x, (16,))
        y.softmax(-1)  # not in place: a new value
        z = torch.softmax(y, -1)
        z.scatter_add_(1, idx, src)
        return z

    idx = torch.randint(0, 16, (4, 3))
    run(f, torch.randn(4, 16), idx, torch.randn(4, 3))
