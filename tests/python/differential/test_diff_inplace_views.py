"""Differential tests: in-place ops, views and aliasing.

check_model compares the inputs after the runs (mutations) and which outputs share storage
with which inputs (a returned view of an input must stay a view of that input)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import ember
from ember.testing import compare


def test_add_inplace_on_intermediate(check):
    def f(x, y):
        t = x * 2
        t.add_(y)
        t.mul_(0.5).relu_()
        return t

    check.captured(f, (torch.randn(4, 5), torch.randn(4, 5)))


def test_add_inplace_on_input(check):
    def f(x, y):
        x.add_(y)
        return x.sum(0)

    check.captured(f, (torch.randn(4, 5), torch.randn(5)))


def test_inplace_on_input_returned(check):
    def f(x, y):
        return x.mul_(y).sub_(1)  # returns the (mutated) input itself

    check.captured(f, (torch.randn(3, 4), torch.randn(3, 4)))


def test_setitem_on_input(check):
    def f(x, y):
        x[:, 1] = y
        return x * 2

    check.captured(f, (torch.randn(3, 4), torch.randn(3)))


def test_setitem_on_intermediate(check):
    def f(x, y):
        t = x.clone()
        t[:, 1] = y
        t[0] = 0.0
        t[1:, 2:] += 1
        return t

    check.captured(f, (torch.randn(3, 4), torch.randn(3)))


def test_mutation_through_view_of_input(check):
    def f(x):
        v = x[1]
        v.mul_(3)
        x.t()[0].zero_()
        return x.sum()

    check.captured(f, (torch.randn(3, 4),))


def test_mutation_of_noncontiguous_input(check):
    base = torch.randn(4, 6)

    def f(x):
        x.add_(1)
        return x.exp()

    check.captured(f, (base.t(),))
    check.captured(f, (base[:, ::2],))


def test_transpose_contiguous(check):
    def f(x):
        y = x.transpose(1, 2).contiguous()
        return y, y.view(x.shape[0], -1)

    check.captured(f, (torch.randn(2, 3, 4),))


def test_view_reshape_permute(check):
    def f(x):
        a = x.view(6, 4)
        b = x.permute(2, 0, 1).reshape(4, -1)  # reshape of a non-contiguous tensor copies
        c = x.unsqueeze(0).expand(2, 2, 3, 4).reshape(-1, 4)
        d = x.flatten().unflatten(0, (4, 6)).squeeze()
        return a + 1, b * 2, c - 1, d

    check.captured(f, (torch.randn(2, 3, 4),))


@pytest.mark.parametrize("kind", ["t", "slice", "view", "diagonal", "unsqueeze", "expand",
                                  "select", "as_strided"])
def test_return_view_of_input(check, kind):
    def f(x):
        if kind == "t":
            return x.t()
        if kind == "slice":
            return x[1:, ::2]
        if kind == "view":
            return x.view(-1)
        if kind == "diagonal":
            return x.diagonal()
        if kind == "unsqueeze":
            return x.unsqueeze(1)
        if kind == "expand":
            return x[:1].expand(3, 4)
        if kind == "select":
            return x[2]
        return x.as_strided((2, 2), (1, 4), 1)

    # A view only: Dynamo may return it without a graph; ember is asserted not to fall back.
    res = check(f, (torch.randn(4, 4)[:, :4],), expect_fallbacks=0)
    assert res["graphs"] <= 1


def test_return_view_of_input_and_compute(check):
    def f(x):
        return x.t(), x.sin()

    check.captured(f, (torch.randn(3, 5),))


def _mutate_a_read_b(a, b):
    a.add_(1)
    return b * 2


def test_aliased_inputs(check):
    # Two arguments that are views of one storage; mutating one is visible through the other.
    # ember may compile this or fall back (naming the aliasing), but the result must be right.
    base = torch.randn(4, 4)
    res = check(_mutate_a_read_b, (base[0], base[0:2]))
    if check.is_ember:
        assert res["graphs"] + res["fallbacks"] == 1, res
        for r in res["fallback_reasons"]:
            assert "alias" in r or "shares memory" in r or "overlap" in r, res


def test_aliased_inputs_only_at_the_second_call():
    # Compiled for distinct inputs, then called with inputs that alias: the cached graph must
    # still give the eager result (a guard, a runtime check or a fallback).
    compiled = torch.compile(_mutate_a_read_b, backend="ember")
    with torch.no_grad():
        a, b = torch.randn(4), torch.randn(2, 4)
        compare(_mutate_a_read_b(a.clone(), b.clone()), compiled(a.clone(), b.clone()))
        base = torch.randn(4, 4)
        eb, cb = base.clone(), base.clone()
        expected = _mutate_a_read_b(eb[0], eb[0:2])
        actual = compiled(cb[0], cb[0:2])
    compare(expected, actual)
    compare(eb, cb, "base")


def test_inplace_ops_on_input(check):
    def f(x, idx, src):
        x.masked_fill_(x > 1.0, 0.0)
        x.index_add_(0, idx, src)
        x.clamp_(-1, 1)
        return x.abs()

    check.captured(f, (torch.randn(5, 3), torch.tensor([0, 2, 2]), torch.randn(3, 3)))


def test_copy_into_input(check):
    def f(x, y):
        x.copy_(y.t())
        x[0].fill_(7)
        return None

    check.captured(f, (torch.randn(3, 3), torch.randn(3, 3)))


def test_module_buffer_mutation(check):
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros((), dtype=torch.int64))
            self.register_buffer("ema", torch.zeros(4))
            self.register_buffer("scratch", torch.zeros(4), persistent=False)

        def forward(self, x):
            self.count += 1
            self.ema.mul_(0.9).add_(x.mean(0), alpha=0.1)
            self.scratch.copy_(x[0])
            return x - self.ema

    check.captured(Counter(), (torch.randn(3, 4),))


def test_identity_returns_input(check):
    # No operation at all: Dynamo makes no graph; the input itself comes back.
    res = check(lambda x: x, (torch.randn(3),), expect_fallbacks=0)
    assert res["graphs"] == 0


def test_inplace_on_a_dtype_conversion_result(check):
    # T5's relative position buckets: `buckets = (rp > 0).to(torch.long) * n; buckets += ...`.
    # `_to_copy`'s functionalization kernel wraps its result only with Functionalize in the TLS
    # include set; without it the in-place add failed to trace and the whole graph ran eagerly.
    def f(rp):
        buckets = (rp > 0).to(torch.long)
        buckets += torch.where(rp.abs() < 3, rp.abs(), torch.full_like(rp, 3))
        widened = rp.float()
        widened.mul_(2.0)
        return buckets, widened

    check.captured(f, (torch.arange(-5, 6).view(1, -1) - torch.arange(0, 4).view(-1, 1),))
    assert ember.metrics.counters["fallbacks"] == 0


def test_boolean_mask_assignment_is_a_where(check):
    # `x[mask] = value` with a boolean mask over leading dims and a one-element value needs no
    # data-dependent nonzero: the tracer records where(mask, value, x) (Longformer's attention
    # mask). Other index_put forms stay data-dependent (a graph break).
    def f(m, x):
        e = x.clone()
        e[m == 2] = 3.4028234663852886e38
        e[m[:, 0] > 0] = -1.0
        e[m.bool()] = torch.tensor(7, dtype=torch.int64)
        return e

    check.captured(f, (torch.randint(0, 3, (4, 5)), torch.randn(4, 5)))
    assert ember.metrics.counters["fallbacks"] == 0

    def g(m, x):
        x = x.clone()
        x[m > 0] = torch.arange(float(int((m > 0).sum())))  # as many values as True: eager only
        return x

    m, x = torch.tensor([0, 1, 2, 0]), torch.zeros(4)
    compiled = torch.compile(g, backend="ember")
    torch.testing.assert_close(compiled(m, x), g(m, x))


def test_boolean_mask_assignment_of_a_broadcast_value_is_a_where(check):
    # The class behind T5Gemma2's and Gemma3n's `embeds[ids == token] = embedding`: a value that
    # broadcasts to the indexed shape whatever the number of true elements (a row vector, a
    # (1, D) row, per-column values), after leading full slices, in any dtype. Each is
    # where(mask, value, x): one graph, no fallback.
    def f(ids, e, row, col):
        e = e * 2
        e[ids == 3] = row.to(e.dtype)  # mask over (B, S) of (B, S, D), value (D,)
        e[ids == 1] = row[None] * 0.5  # value (1, D)
        e[:, :, 1:3][ids > 3] = 0.0  # into a view
        f = e.transpose(0, 1).clone()  # (S, B, D)
        f[:, ids[:, 0] > 0] = col[:, None, :]  # one leading slice, value (S, 1, D)
        return e, f

    ids = torch.randint(0, 6, (2, 7))
    args = (ids, torch.randn(2, 7, 5), torch.randn(5), torch.randn(7, 5))
    check.captured(f, args)
    assert ember.metrics.counters["fallbacks"] == 0

    def g(ids, e, rows):
        e = e.clone()
        e[ids == 3] = rows[: int((ids == 3).sum())]  # one row per true element: data-dependent
        return e

    ids = torch.tensor([[3, 1, 3], [0, 3, 2]])
    e, rows = torch.randn(2, 3, 4), torch.randn(6, 4)
    compiled = torch.compile(g, backend="ember")
    torch.testing.assert_close(compiled(ids, e, rows), g(ids, e, rows))
