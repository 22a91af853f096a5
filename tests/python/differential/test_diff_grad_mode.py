"""Differential tests: grad mode. A graph whose inputs require grad under grad mode is compiled
for training (a joint forward and backward graph, split in two: docs/design/autograd.md); its
results, gradients and input mutations (BatchNorm's running statistics) match eager's."""

from __future__ import annotations

import torch
import torch.nn as nn

import ember


def test_requires_grad_input_is_compiled_for_training(check):
    def f(x, w):
        return (x @ w).relu().sum(-1)

    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 5)
    res = check(f, (x, w), no_grad=False, expect_graphs=1, expect_fallbacks=0)
    if check.is_ember:
        assert ember.metrics.snapshot()["training_graphs"] == 1, res


def test_requires_grad_input_gradients_match(check):
    def f(x, w):
        return torch.tanh(x @ w) * 2

    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 5, requires_grad=True)
    check(f, (x, w), grad=True, expect_graphs=1, expect_fallbacks=0)


def test_module_with_trainable_params_under_grad_mode_is_compiled(check):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    check(m, (torch.randn(5, 4),), grad=True, expect_graphs=1, expect_fallbacks=0)


def test_training_batch_norm_updates_running_statistics(check):
    m = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8))
    check(m, (torch.randn(5, 4),), grad=True, expect_graphs=1, expect_fallbacks=0,
          atol=1e-5, rtol=1e-4)


def test_grad_mode_without_requires_grad_is_compiled(check):
    # Grad mode on, but nothing requires grad: nothing to differentiate, ember compiles it.
    def f(x, y):
        return (x * y).softmax(-1)

    check.captured(f, (torch.randn(3, 4), torch.randn(3, 4)), no_grad=False)


def test_frozen_module_under_grad_mode_is_compiled(check):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2)).eval().requires_grad_(False)
    check.captured(m, (torch.randn(5, 4),), no_grad=False)
