"""Writes at indexed positions as generated kernels (src/sched/scatter.h): scatter, scatter_add,
scatter_reduce, index_put, index_add, index_copy, index_fill. Each is a one-node kernel that
checks its indices, copies self and then stores the source elements serially, so duplicates
resolve as in CPU eager (last write wins, sums in source order). Differential against eager, with
kernel counts; an out-of-range index raises eager's error."""

from __future__ import annotations

import pytest
import torch

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64]


def rand(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-9, 10, shape, generator=g).to(dtype)


def index(shape, high, seed=0, low=0):
    """Random indices in [low, high): many duplicates when the shape is larger than the range."""
    g = torch.Generator().manual_seed(seed + 100)
    return torch.randint(low, high, shape, generator=g)


def counts(stats, kernels, externs=0):
    assert stats["kernels"] == kernels, stats
    assert stats["extern_steps"] == externs, stats


# ---- scatter family ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_src_value_and_add_with_duplicates(check, dtype, dim):
    def f(x, i, s):
        return x.scatter(dim, i, s), x.scatter(dim, i, 2.0), x.scatter_add(dim, i, s)

    x = rand((4, 5, 3), dtype)
    size = x.shape[dim]
    i = index((3, 4, 2) if dim != 0 else (6, 4, 2), size)  # duplicates along dim
    s = rand((6, 5, 3), dtype, seed=1)
    counts(check.captured(f, (x, i, s)), 3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduce", ["sum", "prod", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(check, dtype, reduce, include_self):
    def f(x, i, s):
        return x.scatter_reduce(1, i, s, reduce, include_self=include_self)

    # Index range 5 of 6 columns: column 5 (and maybe others) receives nothing and keeps self.
    x, s = rand((3, 6), dtype), rand((3, 7), dtype, seed=1)
    counts(check.captured(f, (x, index((3, 7), 5), s)), 1)


def test_scatter_reduce_of_int32_indices_and_nan(check):
    def f(x, i, s):
        return x.scatter_reduce(0, i, s, "amax", include_self=False), x.scatter(0, i, s)

    s = torch.tensor([1.0, float("nan"), -2.0, 0.5])
    i = torch.tensor([0, 0, 2, 2], dtype=torch.int32)
    counts(check.captured(f, (torch.randn(3), i, s)), 2)


def test_scatter_reduce_mean_stays_an_aten_call(check):
    def f(x, i, s):
        return x.scatter_reduce(0, i, s, "mean")

    counts(check.captured(f, (torch.randn(5), index((9,), 5), torch.randn(9))), 0, externs=1)


def test_scatter_fuses_with_its_producers_and_consumers_as_separate_kernels(check):
    def f(x, i, s):
        y = (x * 2).scatter_add(0, i, s + 1)
        return y.relu() + 1

    # x * 2 and s + 1 (independent: one combo kernel), the scatter, the relu.
    counts(check.captured(f, (torch.randn(6, 3), index((8, 3), 6), torch.randn(8, 3))), 3)


def test_scatter_of_strided_operands_and_outputs(check):
    def f(x, i, s):
        return x.t().scatter(0, i, s.t())

    x, s = torch.randn(5, 4), torch.randn(6, 4)
    counts(check.captured(f, (x, index((3, 5), 4), s)), 1)


# ---- index_put --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_with_duplicates_and_negative_indices(check, dtype, accumulate):
    def f(x, i, j, v, w):
        a = x.index_put((i,), v, accumulate=accumulate)
        b = x.index_put((i, j), w, accumulate=accumulate)  # broadcast index tensors, one value
        return a, b

    x = rand((5, 4), dtype)
    i = index((7,), 5, low=-5)
    j = index((1,), 4, seed=1, low=-4)
    v = rand((7, 4), dtype, seed=1)
    w = rand((), dtype, seed=2)
    counts(check.captured(f, (x, i, j, v, w)), 2)


def test_index_put_on_inner_dims_and_setitem(check):
    def f(x, i, j, v):
        y = x.clone()
        y[:, i] = v  # index_put_ on dim 1, functionalized to index_put
        return y, x.index_put((j[:, None], i[None, :]), v[0, 0], accumulate=True)

    x = torch.randn(3, 6, 2)
    i, j = torch.tensor([4, 0, -1, 4]), torch.tensor([2, -3])
    # The clone is a kernel of its own (a scatter's operands are realized), then two scatters.
    counts(check.captured(f, (x, i, j, torch.randn(3, 4, 2))), 3)


# ---- index_add / index_copy / index_fill ------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1])
def test_index_add_copy_fill(check, dtype, dim):
    def f(x, i, s, u):
        return (x.index_add(dim, i, s), x.index_copy(dim, u, s.narrow(dim, 0, 3)),
                x.index_fill(dim, i - 1, 5))

    x = rand((5, 6), dtype)
    i = index((7,), 5, seed=3)  # duplicates; i - 1 has negative indices (index_fill wraps)
    s = rand((7, 6) if dim == 0 else (5, 7), dtype, seed=1)
    u = torch.tensor([4, 0, 2])
    stats = check.captured(f, (x, i, s, u))
    counts(stats, 4)  # i - 1 is a kernel of its own: index tensors are realized
    assert stats["view_steps"] == 1, stats  # s.narrow, read by index_copy


def test_index_add_with_alpha_is_a_kernel_for_integers_only(check):
    def f(x, i, s, xi, si):
        return x.index_add(0, i, s, alpha=2), xi.index_add(0, i, si, alpha=-3)

    x, s = torch.randn(4, 2), torch.randn(3, 2)
    xi, si = torch.randint(-9, 9, (4, 2)), torch.randint(-9, 9, (3, 2))
    counts(check.captured(f, (x, index((3,), 4), s, xi, si)), 1, externs=1)


# ---- errors -----------------------------------------------------------------------------------

_OUT_OF_RANGE = {
    "scatter": (lambda x, i: x.scatter(0, i.view(-1, 1).expand(-1, 3), 1.0), [0, 4], [0, 5]),
    "scatter_negative": (lambda x, i: x.scatter_add(0, i.view(-1, 1), x[:2, :1]), [0, 4], [0, -1]),
    "index_put": (lambda x, i: x.index_put((i,), x[0], accumulate=True), [-5, 4], [0, -6]),
    "index_add": (lambda x, i: x.index_add(0, i, x[:2]), [0, 4], [0, -1]),
    "index_copy": (lambda x, i: x.index_copy(0, i, x[:2]), [0, 4], [5, 1]),
    "index_fill": (lambda x, i: x.index_fill(1, i, -1.0), [0, -3], [0, 3]),
}


@pytest.mark.parametrize("case", list(_OUT_OF_RANGE))
def test_out_of_range_indices_raise_eagers_error(case):
    fn, good, bad = _OUT_OF_RANGE[case]
    x = torch.randn(5, 3)
    good, bad = torch.tensor(good), torch.tensor(bad)
    compiled = torch.compile(fn, backend="ember")
    torch.testing.assert_close(compiled(x, good), fn(x, good))
    with pytest.raises(Exception) as eager_error:
        fn(x, bad)
    with pytest.raises(type(eager_error.value)) as compiled_error:
        compiled(x, bad)
    assert str(compiled_error.value) == str(eager_error.value)
    torch.testing.assert_close(compiled(x, good), fn(x, good))  # and it keeps working


def test_in_place_writes_into_an_input(check):
    def f(x, i, v):
        x.index_put_((i,), v, accumulate=True)
        x.scatter_(1, i[:2, None].clamp(0, 2), 7.0)
        return x * 2

    x = torch.randn(5, 3)
    stats = check.captured(f, (x, torch.tensor([4, 0, 4, -1]), torch.randn(4, 3)))
    assert stats["extern_steps"] == 0, stats
