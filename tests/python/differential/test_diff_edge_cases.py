"""Differential tests: unusual inputs and outputs (0-dim, empty, expanded, aliased outputs)."""

from __future__ import annotations

import torch
import torch.nn as nn


def test_zero_dim_inputs_and_outputs(check):
    def f(s, x):
        return s * x, (s + 1).exp(), x.sum() / s

    check.captured(f, (torch.tensor(2.5), torch.randn(3)))


def test_empty_tensors(check):
    def f(x, y):
        return x * 2, torch.cat([x, y]), y.sum(0), x.new_zeros(0, 3) + 1

    check.captured(f, (torch.randn(0, 3), torch.randn(2, 3)))


def test_expanded_input(check):
    # A stride-0 input.
    def f(x):
        return x * 2, x.sum(0), x.contiguous()

    check.captured(f, (torch.randn(4).expand(3, 4),))


def test_output_returned_twice_and_view_of_output(check):
    # Outputs that alias each other must alias each other when compiled.
    def f(x):
        y = x.cos() + 1
        return y, y, y.view(-1), y[0]

    check.captured(f, (torch.randn(3, 4),))


def test_input_returned_with_computation(check):
    def f(x, y):
        return x, x + y, y

    res = check(f, (torch.randn(3), torch.randn(3)), expect_fallbacks=0)
    if check.is_ember:
        assert res["graphs"] == 1, res


def test_parameter_used_as_output(check):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 4))

        def forward(self, x):
            return x @ self.w, self.w.t()

    check(M(), (torch.randn(2, 4),), expect_fallbacks=0, check_aliasing=False)


def test_kwargs_and_defaults(check):
    def f(x, *, scale=1.0, bias=None, flag=False):
        y = x * scale
        if bias is not None:
            y = y + bias
        return y.relu() if flag else y

    check.captured(f, (torch.randn(3),), {"scale": 2.0, "bias": torch.randn(3), "flag": True})


def test_long_chain_of_small_ops(check):
    def f(x):
        for i in range(30):
            x = (x * 1.01 + i * 0.001).tanh()
        return x

    check.captured(f, (torch.randn(5),), min_nodes=30)


def test_matmul_variants(check):
    def f(a, b, c, v):
        return (a @ b, torch.bmm(c, c.transpose(1, 2)), torch.matmul(c, b), a @ v, v @ b, b.t() @ v,
                torch.einsum("bij,bkj->bik", c, c), torch.baddbmm(c[:, :, :4], c, c.transpose(1, 2)))

    check.captured(f, (torch.randn(3, 5), torch.randn(5, 4), torch.randn(2, 4, 5), torch.randn(5)), atol=1e-5,
                   rtol=1e-5)
