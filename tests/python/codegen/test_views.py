"""View and layout ops inside generated kernels (src/sched/index_ops.h, src/sched/fusion.h):
differential against eager with kernel and extern-call counts.

A view inside a chain of fusible ops is an index remap of the kernel, not an ATen call; a view of
a realized buffer (graph input, ATen output) is a strided read of it; a view that a graph output or
an ATen call needs stays an ATen call, so aliasing is as in eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.int64]
LAYOUTS = ["contiguous", "transposed", "offset", "stepped"]


def rand(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-9, 10, shape, generator=g).to(dtype)


def make(shape, dtype, layout="contiguous", seed=0):
    """A tensor of `shape` whose memory is laid out as `layout` says."""
    shape = tuple(shape)
    if layout == "contiguous":
        return rand(shape, dtype, seed)
    if layout == "transposed":  # dims in reverse order in memory
        return rand(shape[::-1], dtype, seed).permute(*reversed(range(len(shape))))
    if layout == "offset":  # a nonzero storage offset
        return rand((shape[0] + 1, *shape[1:]), dtype, seed)[1:]
    if layout == "stepped":  # every other element of the last dim
        return rand((*shape[:-1], 2 * shape[-1]), dtype, seed)[..., ::2]
    raise ValueError(layout)


def kernels_only(stats, kernels):
    assert stats["kernels"] == kernels, stats
    assert stats["extern_steps"] == 0, stats


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_transpose_chain_is_one_kernel(check, dtype, layout):
    def f(x):
        return ((x + 1).reshape(2, 3, 4, 5).transpose(1, 2) * 3).flatten(2) - x.t()[:4, :1]

    kernels_only(check.captured(f, (make((6, 20), dtype, layout),)), 1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_heads_after_matmul_is_one_kernel(check, dtype):
    # The bias add and scale after the matmul, and the view/transpose between them: one kernel.
    B, S, H, D = 2, 5, 4, 8
    w, b = rand((H * D, H * D), dtype, 1), rand((H * D,), dtype, 2)
    scale = 0.125 if dtype.is_floating_point else 3

    def f(x):
        return (x @ w + b).view(B, S, H, D).transpose(1, 2) * scale

    stats = check.captured(f, (rand((B, S, H * D), dtype),))
    assert stats["kernels"] == 1, stats


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_permute_expand_squeeze_unsqueeze(check, dtype, layout):
    def f(x, y):
        a = (x * 2).permute(2, 0, 1).unsqueeze(0).expand(3, 4, 2, 3) + y[:, None, None, None]
        return a.squeeze(0) if a.shape[0] == 1 else a, x.unsqueeze(-1).squeeze(-1) - 1

    # Two loop nests (one per output shape), independent: one combo kernel (sched/combo.h).
    kernels_only(check.captured(f, (make((2, 3, 4), dtype, layout), rand((3,), dtype, 1))), 1)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_select_narrow(check, dtype, layout):
    def f(x):
        a = (x + 1)[1:, ::2] * 2
        b = x[:, -1] + x[-2, 1:]  # select with negative indices
        c = (x - 1).narrow(1, 1, 3)[:, 1:-1] * x[1:2, 2:3]
        d = x[-4:-1:2, 1::3] + 1  # negative start and end, steps
        return a, b, c, d

    kernels_only(check.captured(f, (make((5, 6), dtype, layout),)), 1)  # four nests, one combo


@pytest.mark.parametrize("dtype", DTYPES)
def test_diagonal_split_unbind_chunk(check, dtype):
    def f(x):
        d = (x + 1).diagonal(1) * x.diagonal(-1, 0, 1)[:3]
        a, b = (x * 2).split([2, 2], dim=1)
        p, q, r, s = x.unbind(0)
        u, v = x.chunk(2, dim=0)
        return d, a - b, (p + q) * (r - s), u * v

    kernels_only(check.captured(f, (rand((4, 4), dtype),)), 1)  # four nests, one combo


@pytest.mark.parametrize("dtype", DTYPES)
def test_alias_detach_and_clone(check, dtype):
    def f(x):
        return x.detach() * 2 + x.clone().t().contiguous().t()

    kernels_only(check.captured(f, (rand((3, 5), dtype),)), 1)


def test_view_of_graph_input_is_a_strided_read(check):
    def f(x, y):
        return x.t() + y.view(4, 3).t()[:, 1:2]

    x = torch.randn(8, 3)[::2]  # offset and strides
    kernels_only(check.captured(f, (x, torch.randn(12))), 1)


def test_as_strided_of_an_aten_output_is_a_strided_read(check):
    def f(x, y):
        m = x @ y
        return m.as_strided((3, 2), (1, 4), 2) * 2

    stats = check.captured(f, (torch.randn(4, 5), torch.randn(5, 4)))
    assert stats["kernels"] == 1, stats
    assert stats["extern_steps"] == 1, stats  # the matmul


def test_as_strided_of_a_graph_input_stays_an_aten_call(check):
    # Its storage offset is absolute, and an input's offset may change from call to call.
    def f(x):
        return x.as_strided((2, 2), (1, 4), 1) + 1

    stats = check.captured(f, (torch.randn(4, 4)[1:],))
    assert stats["kernels"] == 1 and stats["extern_steps"] == 1, stats


def test_views_that_are_outputs_stay_views(check):
    def f(x):
        t = x + 1
        return t, t.t(), t[1], t.view(-1)[3:7], (t * 2).unsqueeze(0)

    stats = check.captured(f, (torch.randn(3, 4),))
    # t and t * 2 are written by one kernel; each returned view is then made from t or t * 2
    # (view(-1)[3:7] as one view of t).
    assert stats["kernels"] == 1 and stats["extern_steps"] == 0, stats
    assert stats["view_steps"] == 4, stats


def test_views_read_by_aten_ops_stay_views(check):
    def f(x, w):
        h = (x * 2).view(6, 4).t().t()  # one view step for the chain
        return (h @ w).view(2, 3, 5).transpose(0, 1) + 1

    stats = check.captured(f, (torch.randn(2, 3, 4), torch.randn(4, 5)))
    assert stats["kernels"] == 2 and stats["extern_steps"] == 1, stats  # the matmul
    assert stats["view_steps"] == 1, stats


@pytest.mark.parametrize("shape", [(3, 0, 2), (0, 4), (1, 5, 1), (1, 1, 1), ()])
def test_size_zero_and_size_one_dims(check, shape):
    def f(x):
        y = (x + 1).reshape(-1)
        z = x.unsqueeze(0).transpose(0, -1) * 2
        return y * 3, z.squeeze(), x[..., :0] + 1 if x.dim() else x * 1

    check.captured(f, (torch.randn(shape),))


def test_broadcast_through_views(check):
    def f(x, y, m):
        mask = (m[:, None, None, :].float() - 1.0) * 10000.0
        return (x.view(2, 3, 4, 5) + y.view(1, 3, 1, 5)) + mask[..., :5]

    stats = check.captured(f, (torch.randn(6, 20), torch.randn(15), torch.randint(0, 2, (2, 8))))
    kernels_only(stats, 1)


def test_bool_views(check):
    def f(x):
        m = x > 0
        return m.t().logical_not(), m[1:].flip(0) & m[:-1]

    check.captured(f, (torch.randn(4, 3),))


# ---- mutations through views ---------------------------------------------------------------


def test_view_taken_before_a_mutation_sees_the_mutation(check):
    def f(x):
        v = x.view(-1)
        x.add_(1)
        return v * 2, x[0] + 1

    check.captured(f, (torch.randn(3, 4),))


def test_view_of_intermediate_mutated_in_place(check):
    def f(x):
        t = x * 2
        v = t.t()
        t.add_(1)  # v sees it
        v[0].mul_(3)  # t sees it
        return v + 0, t - 1

    check.captured(f, (torch.randn(3, 4),))


def test_setitem_through_transposed_view_of_clone(check):
    def f(x, y):
        b = x.clone()
        b.transpose(0, 1)[1] = y
        b[:, ::2] += 1
        return b * 2

    stats = check.captured(f, (torch.randn(3, 4), torch.randn(3)))
    assert stats["kernels"] == 1, stats


def test_mutation_of_input_through_view_and_read_after(check):
    def f(x, y):
        x[1:, :2] = y
        x.t()[0].mul_(2)
        return x.sum(), (x + 1).view(-1)[::3]

    check.captured(f, (torch.randn(3, 4), torch.randn(2, 2)))
