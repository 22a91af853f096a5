"""Differential tests: grad mode. ember is inference-only for now: a graph whose inputs require
grad under grad mode runs eagerly (a fallback with a logged reason); the results, including
gradients, must still match eager."""

from __future__ import annotations

import torch
import torch.nn as nn


def test_requires_grad_input_falls_back(check):
    def f(x, w):
        return (x @ w).relu().sum(-1)

    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 5)
    res = check(f, (x, w), no_grad=False)
    if check.is_ember:
        assert res["graphs"] == 0, res
        assert res["fallbacks"] >= 1, res
        assert len(res["fallback_reasons"]) == res["fallbacks"], res
        assert all(isinstance(r, str) and "grad" in r.lower() for r in res["fallback_reasons"]), res


def test_requires_grad_input_gradients_match(check):
    def f(x, w):
        return torch.tanh(x @ w) * 2

    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 5, requires_grad=True)
    res = check(f, (x, w), grad=True)
    if check.is_ember:
        assert res["graphs"] == 0 and res["fallbacks"] >= 1, res
        assert all(r.strip() for r in res["fallback_reasons"]), res


def test_module_with_trainable_params_under_grad_mode_falls_back(check):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    res = check(m, (torch.randn(5, 4),), grad=True)
    if check.is_ember:
        assert res["graphs"] == 0 and res["fallbacks"] >= 1, res


def test_grad_mode_without_requires_grad_is_compiled(check):
    # Grad mode on, but nothing requires grad: nothing to differentiate, ember compiles it.
    def f(x, y):
        return (x * y).softmax(-1)

    check.captured(f, (torch.randn(3, 4), torch.randn(3, 4)), no_grad=False)


def test_frozen_module_under_grad_mode_is_compiled(check):
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2)).eval().requires_grad_(False)
    check.captured(m, (torch.randn(5, 4),), no_grad=False)
