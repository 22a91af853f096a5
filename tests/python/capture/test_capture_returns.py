"""Return values of captured frames: tensors, containers of tensors and constants, None, inputs
returned unchanged, aliases."""

from __future__ import annotations

import torch

from capture_check import check, expect_frames

import ember


def r(*shape):
    return torch.randn(*shape)


def test_return_tensor():
    def f(x):
        return x * 2
    check(f, r(3))


def test_return_tuple_of_tensors_and_constants():
    def f(x):
        return x + 1, 3, "name", 2.5, (x * 2, None)
    check(f, r(3))


def test_return_list():
    def f(x, y):
        return [x, y, x + y, 7]
    check(f, r(3), r(3))


def test_return_dict():
    def f(x):
        return {"out": x.relu(), "aux": {"n": x.shape[0], "sq": x * x}, "none": None}
    check(f, r(3))


def test_return_none():
    def f(x):
        y = x + 1  # noqa: F841
    check(f, r(3))


def test_return_constant_only():
    def f(x, n):
        return n * 2 + x.shape[0]
    check(f, r(3), 4)


def test_return_input_unchanged():
    def f(x, y):
        return x
    c = ember.compile(f)
    ember.metrics.reset()
    x = r(3)
    assert c(x, r(3)) is x
    assert c(x, r(3)) is x
    expect_frames(1, 0)


def test_return_input_and_computed():
    def f(x):
        return x, x + 1
    c = ember.compile(f)
    ember.metrics.reset()
    x = r(3)
    a, b = c(x)
    assert a is x
    torch.testing.assert_close(b, x + 1)
    expect_frames(1, 0)


def test_return_same_tensor_twice():
    def f(x):
        y = x * 2
        return y, y
    c = check(f, r(3))
    a, b = c(r(3))
    assert a is b


def test_return_view_of_input_aliases_input():
    def f(x):
        return x[1:], x.view(-1)
    c = ember.compile(f)
    x = r(3, 2)
    a, b = c(x)
    torch.testing.assert_close(a, x[1:])
    x.add_(1)  # a view of the input must see the change, as in eager
    torch.testing.assert_close(a, x[1:])
    torch.testing.assert_close(b, x.view(-1))


def test_return_output_and_its_view():
    def f(x):
        y = x + 1
        return y, y.t()
    c = check(f, r(2, 3))
    y, yt = c(r(2, 3))
    y.mul_(0)
    assert yt.abs().sum() == 0  # the view aliases the output, as in eager


def test_return_mutated_input():
    def f(x):
        x.add_(1)
        return x
    c = check(f, r(3))
    x = r(3)
    assert c(x) is x


def test_return_int_tensor_and_bool_tensor():
    def f(x):
        return x.argmax(), x > 0
    check(f, r(5))


def test_return_shape_object():
    def f(x):
        return x.shape, x.size(1)
    check(f, r(2, 3))


def test_return_dtype():
    def f(x):
        return (x * 2).dtype
    check(f, r(2))


def test_return_nested_list_of_dicts():
    def f(x):
        return [{"a": x + i} for i in range(2)]
    check(f, r(2))


def test_return_scalar_tensor():
    def f(x):
        return x.sum()
    check(f, r(4))


def test_return_empty_containers():
    def f(x):
        return [], {}, ()
    check(f, r(2))
