"""Layout and indexing ops as index functions inside generated kernels (src/sched/index_ops.h):
cat, stack, flip, roll, constant_pad_nd, im2col, repeat, tril/triu, the scatters of in-place setitem,
index_select, gather, embedding and index. Differential against eager, with kernel counts.

Index tensors are checked before a kernel's loops: an out-of-range index makes the call run the
ATen ops, which raise eager's error."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from test_views import DTYPES, LAYOUTS, make, rand


def kernels_only(stats, kernels):
    assert stats["kernels"] == kernels, stats
    assert stats["extern_steps"] == 0, stats


# ---- layout ---------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_cat_in_a_chain(check, dtype, layout):
    def f(x, y):
        a = torch.cat([x + 1, y * 2, x], dim=0) - 1
        b = torch.cat([x.t(), y.t()], dim=-1) * 2
        return a, b

    x, y = make((3, 4), dtype, layout), make((2, 4), dtype, layout, seed=1)
    kernels_only(check.captured(f, (x, y)), 1)  # a nest per output, one combo (sched/combo.h)


def test_cat_promotes_dtypes_and_skips_legacy_empty_tensors(check):
    def f(x, i, e):
        return torch.cat([x, i, e], dim=1) * 2, torch.cat([e.view(0), x.flatten(), e.view(0)])

    x = torch.randn(2, 3, dtype=torch.float64)
    i = torch.randint(-5, 5, (2, 4), dtype=torch.int32)
    check.captured(f, (x, i, torch.zeros(2, 0)))


def test_cat_of_one_tensor_and_of_empty_parts(check):
    def f(x):
        return torch.cat([x * 2]), torch.cat([x[:0], x + 1, x[:, :0].reshape(0, 5)], dim=0)

    check.captured(f, (torch.randn(3, 5),))


@pytest.mark.parametrize("dtype", DTYPES)
def test_stack(check, dtype):
    def f(x, y):
        return torch.stack([x, y + 1, x * y], dim=1) + 1, torch.stack([x.t(), y.t()], dim=-1)

    kernels_only(check.captured(f, (rand((3, 4), dtype), rand((3, 4), dtype, 1))), 1)  # a combo


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_flip_and_roll(check, dtype, layout):
    def f(x):
        a = (x * 2).flip(0, -1) + x
        b = x.roll(2, 1) - x.roll(-7, 0)  # a shift past the size wraps
        c = (x + 1).roll(5) * 2  # no dims: the flattened tensor is rolled
        d = x.roll((1, -1), (0, 1)).fliplr()
        return a, b, c, d

    kernels_only(check.captured(f, (make((3, 4), dtype, layout),)), 1)  # one shape: one kernel


@pytest.mark.parametrize("dtype", DTYPES)
def test_constant_pad(check, dtype):
    value = 2.5 if dtype.is_floating_point else 7

    def f(x):
        a = F.pad(x + 1, (1, 2)) * 2
        b = F.pad(x, (0, 0, 2, 1), value=value)
        c = F.pad(x, (-1, 1, 1, -1)) + 1  # negative pads crop
        d = F.pad(x.unsqueeze(0), (1, 1, 1, 1, 1, 0))
        return a, b, c, d

    kernels_only(check.captured(f, (rand((3, 4), dtype),)), 1)  # four nests, one combo kernel


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d.is_floating_point])
def test_im2col(check, dtype):
    """F.unfold (aten::im2col) as an index function: windows with padding (0 outside), dilation
    and stride, batched and not, fused with what follows (ConvBERT's span convolution)."""
    def f(x, w):
        a = F.unfold(x + 1, kernel_size=(3, 1), padding=(1, 0)) * 2
        b = F.unfold(x, kernel_size=(2, 3), dilation=(2, 1), padding=(1, 2), stride=(1, 2))
        c = torch.ops.aten.im2col(x[0], [2, 2], [1, 1], [0, 0], [2, 1])
        d = (F.unfold(x, kernel_size=(3, 1), padding=(1, 0)).view(2, 3, 3, 5 * 4) * w).sum(2)
        return a, b, c, d

    stats = check.captured(f, (rand((2, 3, 5, 4), dtype), rand((3, 1, 1), dtype, 1)))
    assert stats["extern_steps"] == 0, stats


@pytest.mark.parametrize("dtype", DTYPES)
def test_repeat_tril_triu(check, dtype):
    def f(x):
        return x.repeat(2, 1, 3) + 1, (x * 2).tril(), x.triu(1) - x.tril(-1), x.t().triu(-2)

    # A loop nest per output shape, the three one combo kernel (sched/combo.h).
    kernels_only(check.captured(f, (rand((3, 4), dtype),)), 1)


def test_causal_mask_pattern(check):
    def f(scores, n):
        mask = torch.ones(n, n, dtype=torch.bool).tril()
        return scores.masked_fill(~mask, float("-inf")) * 0.5

    check.captured(f, (torch.randn(2, 5, 5), 5))


@pytest.mark.parametrize("dtype", DTYPES)
def test_setitem_scatters_fuse(check, dtype):
    def f(x, y):
        t = x * 2
        t[:, 1] = y
        t[1:, ::2] += 1
        t[0] = 3
        return t + 1

    stats = check.captured(f, (rand((3, 4), dtype), rand((3,), dtype, 1)))
    assert stats["kernels"] == 1, stats


# ---- indexing by index tensors ----------------------------------------------------------------


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("dtype", DTYPES)
def test_index_select(check, dtype, index_dtype):
    def f(x, i):
        return x.index_select(0, i) * 2, (x + 1).index_select(1, i[:2]), x.index_select(-1, i[0])

    i = torch.tensor([2, 0, 2, 1], dtype=index_dtype)
    kernels_only(check.captured(f, (rand((3, 4), dtype), i)), 3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_and_take_along_dim(check, dtype):
    def f(x, i):
        return torch.gather(x * 2, 1, i) + 1, torch.gather(x, 0, i[:2, :1].expand(2, 4))

    i = torch.tensor([[0, 3], [1, 1], [2, 0]])
    kernels_only(check.captured(f, (rand((3, 4), dtype), i)), 2)
    # take_along_dim wraps indices with remainder, an ATen call
    check.captured(lambda x, i: torch.take_along_dim(x, i[:2, :1], dim=0) * 2,
                   (rand((3, 4), dtype), i))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_embeddings_and_sum_are_one_kernel(check, dtype):
    word = torch.nn.Embedding(20, 8, dtype=dtype)
    pos = torch.nn.Embedding(6, 8, dtype=dtype, padding_idx=0)

    def f(ids, positions):
        return word(ids) + pos(positions) * 2

    ids = torch.randint(0, 20, (2, 6))
    stats = check.captured(f, (ids, torch.arange(6).expand(2, 6)))
    kernels_only(stats, 1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_advanced_indexing(check, dtype):
    def f(x, i, j):
        a = x[i] + 1
        b = x[:, i] * 2
        c = x[i, j]  # broadcast index tensors
        d = x[:, j.view(2, 1)]  # a 2-d index inside
        e = x[-1:, i, ...]
        return a, b, c, d, e

    i = torch.tensor([0, -1, 2, 1])  # negative indices wrap
    j = torch.tensor([1, 3])
    check.captured(f, (rand((3, 4, 2), dtype), i, j.view(2, 1)))


def test_index_tensors_computed_in_the_graph_are_realized_first(check):
    def f(x, i):
        j = (i * 2 + 1).clamp(0, 3)
        return x[j] * 2, torch.gather(x, 1, j.view(-1, 1).expand(4, 2))

    stats = check.captured(f, (torch.randn(4, 4), torch.tensor([0, 2, 1, 2])))
    assert stats["extern_steps"] == 0, stats


_OUT_OF_RANGE = {
    "embedding": (lambda w, i: F.embedding(i, w) * 2, [0, 4, 2], [0, 5, 2]),
    "index_select": (lambda w, i: w.index_select(0, i) + 1, [0, 4, 2], [0, 5, 2]),
    "gather": (lambda w, i: torch.gather(w, 0, i.view(-1, 1).expand(-1, 3)) + 1, [0, 4, 2],
               [0, 5, 2]),
    "index": (lambda w, i: w[i] * 2, [0, -5, 4], [0, -6, 2]),
    "computed": (lambda w, i: F.embedding(i - 10, w) * 2, [10, 14, 12], [10, 9, 12]),
}


@pytest.mark.parametrize("case", list(_OUT_OF_RANGE))
def test_out_of_range_indices_raise_eagers_error(case):
    fn, good, bad = _OUT_OF_RANGE[case]
    w = torch.randn(5, 3)
    good, bad = torch.tensor(good), torch.tensor(bad)
    compiled = torch.compile(fn, backend="ember")
    torch.testing.assert_close(compiled(w, good), fn(w, good))
    with pytest.raises(Exception) as eager_error:
        fn(w, bad)
    with pytest.raises(type(eager_error.value)) as compiled_error:
        compiled(w, bad)
    assert str(compiled_error.value) == str(eager_error.value)
    torch.testing.assert_close(compiled(w, good), fn(w, good))  # and it keeps working


# ---- factories ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32])
def test_factories_are_index_functions(check, dtype):
    def f(x):
        pos = torch.arange(2, 14, 3, dtype=dtype)  # start, end, step
        a = x + pos + torch.arange(4, dtype=dtype).flip(0)
        b = torch.full((3, 4), 7, dtype=dtype) * x - torch.ones_like(x)
        c = torch.where(x > 0, torch.scalar_tensor(1, dtype=dtype), torch.zeros(1, dtype=dtype))
        return a, b, c, x.new_ones(4) + x.new_zeros(3, 1)

    kernels_only(check.captured(f, (rand((3, 4), dtype),)), 1)


def test_attention_mask_from_factories_is_one_kernel(check):
    def f(scores, valid):
        n = scores.shape[-1]
        i = torch.arange(n)
        causal = i[None, :] <= i[:, None]
        keep = torch.logical_and(causal, valid[:, None, None, :])  # bitwise_and is an ATen call
        mask = torch.where(keep, torch.scalar_tensor(0.0),
                           torch.scalar_tensor(float("-inf")))
        return scores + mask

    stats = check.captured(f, (torch.randn(2, 3, 5, 5), torch.rand(2, 5) > 0.3))
    kernels_only(stats, 1)


def test_float_arange_of_large_values_stays_an_aten_call(check):
    # start + i * step is exact in f32 only below 2**24: not an index function. It depends on no
    # input, so constant folding computes it once (with ATen) instead.
    stats = check.captured(lambda x: x + torch.arange(2 ** 25, 2 ** 25 + 4, dtype=torch.float32),
                           (torch.randn(4),))
    assert stats["folded_nodes"] == 1 and stats["extern_steps"] == 0, stats
