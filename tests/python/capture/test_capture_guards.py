"""Guards and recompiles: a call whose inputs differ from what a graph was compiled for (shape,
dtype, strides, Python values, None vs tensor, grad mode) must give eager's result; a call that
matches an earlier graph reuses it."""

from __future__ import annotations

import torch

from capture_check import expect_frames, same

import ember


def r(*shape):
    return torch.randn(*shape)


def compiled(fn, **kwargs):
    c = ember.compile(fn, **kwargs)
    ember.metrics.reset()
    return c


def test_shape_change_recompiles():
    def f(x):
        return x.sum(0) * 2 + x.shape[0]
    c = compiled(f)
    same(c, f, r(3, 4))
    same(c, f, r(5, 4))
    same(c, f, r(3, 4))
    expect_frames(2, 0)


def test_rank_change_recompiles():
    def f(x):
        return x.reshape(-1) + 1
    c = compiled(f)
    same(c, f, r(6))
    same(c, f, r(2, 3))
    expect_frames(2, 0)


def test_dtype_change_recompiles():
    def f(x):
        return x * 2 + 1
    c = compiled(f)
    same(c, f, r(4))
    same(c, f, r(4).double())
    same(c, f, torch.arange(4))
    same(c, f, r(4))
    expect_frames(3, 0)


def test_non_contiguous_input_recompiles():
    def f(x):
        return x + torch.arange(4.0)
    c = compiled(f)
    same(c, f, r(4, 4))
    same(c, f, r(4, 4).t())
    same(c, f, r(4, 8)[:, ::2])
    assert frames_ok(min_captured=2)


def frames_ok(min_captured):
    snap = ember.metrics.snapshot()
    assert snap["eager_frames"] == 0, ember.metrics.fallback_reasons
    assert snap["captured_frames"] >= min_captured
    return True


def test_transposed_input_values_correct():
    def f(x):
        return (x @ x.t()).view(-1)[:3] if x.is_contiguous() else x.reshape(-1)[:3] * 10
    c = compiled(f)
    base = r(3, 3)
    same(c, f, base)
    same(c, f, base.t())
    expect_frames(2, 0)


def test_storage_offset_view_input():
    def f(x):
        return x * 2
    c = compiled(f)
    base = r(10)
    same(c, f, base[:4])
    out = c(base[3:7])
    torch.testing.assert_close(out, base[3:7] * 2)
    assert ember.metrics.snapshot()["eager_frames"] == 0


def test_python_int_argument_change():
    def f(x, n):
        return x * n + n
    c = compiled(f)
    same(c, f, r(3), 2)
    same(c, f, r(3), 5)
    same(c, f, r(3), 2)
    expect_frames(2, 0)


def test_python_float_argument_change():
    def f(x, a):
        return x * a
    c = compiled(f)
    same(c, f, r(3), 0.5)
    same(c, f, r(3), 1.5)
    expect_frames(2, 0)


def test_int_vs_float_argument():
    def f(x, a):
        return x * a, isinstance(a, float)
    c = compiled(f)
    same(c, f, r(3), 2)
    same(c, f, r(3), 2.0)
    expect_frames(2, 0)


def test_none_vs_tensor_argument():
    def f(x, mask=None):
        if mask is None:
            return x * 2
        return x.masked_fill(mask, 0.0)
    c = compiled(f)
    same(c, f, r(4), None)
    same(c, f, r(4), torch.tensor([True, False, True, False]))
    same(c, f, r(4))
    expect_frames(2, 0)


def test_bool_flag_argument():
    def f(x, flag):
        return x.relu() if flag else x.neg()
    c = compiled(f)
    same(c, f, r(4), True)
    same(c, f, r(4), False)
    same(c, f, r(4), True)
    expect_frames(2, 0)


def test_string_argument_change():
    def f(x, mode):
        return x.sum() if mode == "sum" else x.mean()
    c = compiled(f)
    same(c, f, r(4), "sum")
    same(c, f, r(4), "mean")
    expect_frames(2, 0)


def test_list_length_change():
    def f(xs):
        out = xs[0]
        for t in xs[1:]:
            out = out + t
        return out
    c = compiled(f)
    same(c, f, [r(2), r(2)])
    same(c, f, [r(2), r(2), r(2)])
    same(c, f, [r(2), r(2)])
    expect_frames(2, 0)


def test_list_int_item_change():
    def f(x, sizes):
        return x.reshape(sizes[0], sizes[1])
    c = compiled(f)
    same(c, f, r(6), [2, 3])
    same(c, f, r(6), [3, 2])
    expect_frames(2, 0)


def test_tensor_vs_number_argument():
    def f(x, y):
        return x + y
    c = compiled(f)
    same(c, f, r(3), r(3))
    same(c, f, r(3), 2)
    expect_frames(2, 0)


def test_requires_grad_false_under_grad_mode_is_captured():
    def f(x, y):
        return (x * y).sum(1)
    c = compiled(f)
    assert torch.is_grad_enabled()
    same(c, f, r(3, 3), r(3, 3))
    expect_frames(1, 0)


def test_no_grad_inference_mode_and_grad_mode():
    def f(x):
        return x.sin() * 2
    c = compiled(f)
    x = r(4)
    same(c, f, x)
    with torch.no_grad():
        same(c, f, x)
    with torch.inference_mode():
        same(c, f, x)
    same(c, f, x)
    snap = ember.metrics.snapshot()
    assert snap["eager_frames"] == 0, ember.metrics.fallback_reasons
    assert 1 <= snap["captured_frames"] <= 3


def test_inference_mode_output_is_inference_tensor():
    def f(x):
        return x.cos() + 1
    c = ember.compile(f)
    with torch.inference_mode():
        x = r(4)
        expected, actual = f(x), c(x)
    torch.testing.assert_close(actual, expected)
    assert actual.is_inference() == expected.is_inference()


def test_grad_mode_output_has_no_grad_fn_without_requires_grad():
    def f(x):
        return x * 3
    c = compiled(f)
    out = c(r(3))
    assert out.grad_fn is None and not out.requires_grad


def test_requires_grad_input_switch_falls_back_and_keeps_autograd():
    """The same function called with a requires-grad input under grad mode: the result must
    support backward as in eager."""
    def f(x):
        return (x * 2).sum()
    c = ember.compile(f)
    x = r(3).requires_grad_()
    out = c(x)
    out.backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))


def test_cache_hit_does_not_recompile_many_calls():
    def f(x, y):
        return x @ y
    c = compiled(f)
    for _ in range(5):
        same(c, f, r(2, 3), r(3, 2), atol=1e-4)
    expect_frames(1, 0)


def test_alternating_shapes_reuse_both_graphs():
    # Static shapes (the suite's EMBER_DYNAMIC=true run would compile one graph for both).
    def f(x):
        return x.softmax(-1)
    c = compiled(f, dynamic=False)
    for shape in [(2, 3), (4, 5), (2, 3), (4, 5)]:
        same(c, f, r(*shape))
    expect_frames(2, 0)


def test_module_input_shape_change():
    lin = torch.nn.Linear(4, 2)
    c = ember.compile(lin, dynamic=False)
    ember.metrics.reset()
    with torch.no_grad():
        same(c, lin, r(3, 4))
        same(c, lin, r(5, 4))
        same(c, lin, r(2, 3, 4))
    expect_frames(3, 0)


def test_new_object_with_same_attributes_reuses_or_recompiles_correctly():
    class Cfg:
        def __init__(self, k):
            self.k = k

    def f(x, cfg):
        return x * cfg.k
    c = compiled(f)
    same(c, f, r(3), Cfg(2))
    same(c, f, r(3), Cfg(3))
    same(c, f, r(3), Cfg(2))
    assert ember.metrics.snapshot()["eager_frames"] == 0
