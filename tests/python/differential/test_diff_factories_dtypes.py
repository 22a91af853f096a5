"""Differential tests: factory ops (incl. seeded random ops) and dtypes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F


def test_zeros_ones_full(check):
    def f(x):
        a = torch.zeros(2, 3) + x
        b = torch.ones(3, dtype=torch.int64)
        c = torch.full((2, 2), 3.5, dtype=torch.float64)
        d = torch.full((4,), 7)  # int64 from an int fill value
        return a, b, c, d, torch.zeros_like(x, dtype=torch.bool), torch.ones_like(x)

    check.captured(f, (torch.randn(2, 3),))


def test_arange_linspace_eye(check):
    def f(x):
        return (x + torch.arange(x.shape[-1]),
                torch.arange(2, 11, 3),
                torch.arange(0.0, 1.0, 0.25, dtype=torch.float64),
                torch.linspace(-1, 1, 5),
                torch.eye(3, 4))

    check.captured(f, (torch.randn(2, 5),))


def test_tensor_constant(check):
    def f(x):
        return x * torch.tensor([1.0, 2.0, 3.0]) + torch.tensor(0.5)

    check.captured(f, (torch.randn(2, 3),))


def test_empty_metadata_only(check):
    def f(x):
        e = torch.empty(3, 4, dtype=torch.float16)
        el = torch.empty_like(x)
        es = torch.empty_strided((2, 3), (1, 2))
        return e, el, es, x + 1

    # Values of empty tensors are uninitialized: compare dtype/shape/strides only there.
    check.captured(f, (torch.randn(2, 5),), metadata_only={"out[0]", "out[1]", "out[2]"})


@pytest.mark.parametrize("op", ["rand", "randn", "randint", "rand_like", "randn_like",
                                "normal_", "uniform_", "bernoulli"])
def test_random_factories_seeded(check, op):
    def f(x):
        if op == "rand":
            r = torch.rand(3, 4)
        elif op == "randn":
            r = torch.randn(3, 4, dtype=torch.float64)
        elif op == "randint":
            r = torch.randint(0, 10, (3, 4))
        elif op == "rand_like":
            r = torch.rand_like(x)
        elif op == "randn_like":
            r = torch.randn_like(x)
        elif op == "normal_":
            r = torch.empty(3, 4).normal_(2.0, 0.5)
        elif op == "uniform_":
            r = torch.empty(3, 4).uniform_(-2, 2)
        else:
            r = torch.bernoulli(torch.full((3, 4), 0.3))
        return r, x * 2

    check.captured(f, (torch.randn(3, 4),))


def test_two_random_ops_in_order(check):
    def f(x):
        return torch.rand(4) + x, torch.randn(4) * x

    check.captured(f, (torch.randn(4),))


def test_dropout_train_seeded(check):
    def f(x):
        return F.dropout(x, 0.5, training=True), F.dropout(x * 2, 0.2, training=True)

    check.captured(f, (torch.randn(8, 8),))


def test_dropout_eval_module(check):
    m = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Dropout(0.5), torch.nn.ReLU()).eval()
    check.captured(m, (torch.randn(3, 6),))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_float_dtypes(check, dtype):
    def f(x, y):
        return (x * y + 1).exp().log1p().sum(-1), (x @ y.t()).tanh(), x.to(torch.float32) + 1

    x = torch.randn(4, 8).to(dtype)
    y = torch.randn(4, 8).to(dtype)
    check.captured(f, (x, y))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_integer_dtypes(check, dtype):
    def f(x, y):
        return (x + y, x * y, torch.div(x, y, rounding_mode="floor"), x % y, x // y,
                x.sum(), x.max(), (x > y), x & y, x | 3, x.to(torch.float32) / 2)

    torch.manual_seed(0)
    x = torch.randint(1, 50, (3, 5)).to(dtype)
    y = torch.randint(1, 7, (3, 5)).to(dtype)
    check.captured(f, (x, y))


def test_bool_ops(check):
    def f(a, b):
        return a & b, a | b, a ^ b, ~a, a.any(), a.all(dim=1), torch.where(a, 1.0, -1.0), a.sum()

    check.captured(f, (torch.rand(3, 4) > 0.5, torch.rand(3, 4) > 0.5))


def test_type_promotion(check):
    def f(i, fl, d, b):
        return i + fl, i * 2.5, i + b, fl + d, b + b, i / 2, fl.to(torch.bfloat16) + fl, i.float().half()

    check.captured(f, (torch.arange(6).view(2, 3), torch.randn(2, 3), torch.randn(3, dtype=torch.float64),
                       torch.tensor([True, False, True])))


def test_int64_index_math(check):
    def f(x):
        idx = torch.arange(x.shape[0]) * 2 % x.shape[0]
        return x[idx], idx.cumsum(0), idx.argsort(stable=True)

    check.captured(f, (torch.randn(6, 3),))
