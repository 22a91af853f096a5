"""Control flow on Python values, closures, nested functions, lambdas, default/star/keyword-only
arguments and functools.partial: each program is captured as one graph."""

from __future__ import annotations

import functools

import pytest
import torch

from capture_check import check, expect_frames, same

import ember


def r(*shape):
    return torch.randn(*shape)


def test_if_else_on_int():
    def f(x, n):
        if n > 2:
            y = x * 2
        elif n == 2:
            y = x + 2
        else:
            y = x - 2
        return y
    check(f, r(3), 3)
    check(f, r(3), 2)
    check(f, r(3), 0)


def test_if_on_bool_flag():
    def f(x, flag):
        return x.relu() if flag else x.sigmoid()
    check(f, r(4), True)
    check(f, r(4), False)


def test_if_on_none():
    def f(x, bias=None):
        if bias is not None:
            x = x + bias
        if bias is None:
            x = x * 2
        return x
    check(f, r(3), None)
    check(f, r(3), r(3))


def test_for_over_range():
    def f(x):
        for i in range(4):
            x = x * 0.5 + i
        return x
    check(f, r(3))


def test_for_over_list():
    def f(x, scales):
        for s in scales:
            x = x * s
        return x
    check(f, r(3), [1.0, 2.0, 0.5])


def test_for_over_list_of_tensors():
    def f(xs):
        acc = torch.zeros(3)
        for t in xs:
            acc = acc + t
        return acc
    check(f, [r(3), r(3), r(3)])


def test_while_loop_with_counter():
    def f(x):
        i = 0
        while i < 5:
            x = x + i
            i += 1
        return x, i
    check(f, r(3))


def test_nested_loops():
    def f(x):
        out = x
        for i in range(3):
            for j in range(2):
                out = out + i * j
        return out
    check(f, r(3))


def test_early_return():
    def f(x, n):
        for i in range(10):
            if i == n:
                return x * i
        return x
    check(f, r(3), 4)


def test_break_and_continue():
    def f(x):
        for i in range(10):
            if i % 2 == 0:
                continue
            if i > 6:
                break
            x = x + i
        return x
    check(f, r(3))


def test_for_else():
    def f(x, n):
        for i in range(n):
            if i == 10:
                break
        else:
            x = x * 3
        return x
    check(f, r(3), 4)


def test_while_true_break():
    def f(x):
        k = 0
        while True:
            k += 1
            x = x * 2
            if k >= 3:
                break
        return x
    check(f, r(3))


def test_loop_over_tensor_shape():
    def f(x):
        out = x
        for d in x.shape:
            out = out + d
        return out
    check(f, r(2, 3))


def test_closure_reads_outer_variable():
    def f(x, k):
        scale = k * 2

        def inner(v):
            return v * scale + k
        return inner(x) + inner(x + 1)
    check(f, r(3), 3)


def test_closure_over_tensor():
    def f(x, y):
        def add_y(v):
            return v + y
        return add_y(x) * add_y(y)
    check(f, r(3), r(3))


def test_nonlocal_counter():
    def f(x):
        count = 0

        def bump(v):
            nonlocal count
            count += 1
            return v + count
        y = bump(bump(x))
        return y, count
    check(f, r(3))


def test_closure_from_outside_the_frame():
    k = 4
    w = torch.randn(3)

    def f(x):
        return x * k + w
    check(f, r(3))


def test_nested_function_returned_and_called():
    def f(x):
        def make(a):
            def g(v):
                return v * a
            return g
        return make(2)(x) + make(3)(x)
    check(f, r(3))


def test_lambda():
    def f(x):
        act = lambda v: v.relu() * 2  # noqa: E731
        return act(x) + (lambda v, w=1: v - w)(x)
    check(f, r(4))


def test_lambda_argument():
    def f(x, fn):
        return fn(x) + 1
    check(f, r(4), lambda v: v * 3)


def test_default_arguments():
    def helper(v, scale=2, bias=0.5):
        return v * scale + bias

    def f(x):
        return helper(x), helper(x, 3), helper(x, bias=1.0)
    check(f, r(3))


def test_default_arguments_of_top_function():
    def f(x, scale=3, shift=None):
        return x * scale if shift is None else x * scale + shift
    check(f, r(3))


def test_star_args():
    def helper(*args):
        out = args[0]
        for a in args[1:]:
            out = out + a
        return out, len(args)

    def f(x, y):
        parts = (x, y, x * y)
        return helper(*parts), helper(x)
    check(f, r(3), r(3))


def test_star_kwargs():
    def helper(x, **kwargs):
        return x * kwargs["scale"] + kwargs.get("bias", 0), sorted(kwargs)

    def f(x):
        opts = {"scale": 2}
        return helper(x, **opts), helper(x, scale=3, bias=1)
    check(f, r(3))


def test_top_function_with_star_args_and_kwargs():
    def f(*xs, **kw):
        return sum(xs) * kw["k"]
    check(f, r(3), r(3), k=2)


def test_keyword_only_args():
    def helper(x, *, alpha, beta=1.0):
        return x * alpha + beta

    def f(x, *, alpha=2.0):
        return helper(x, alpha=alpha), helper(x, beta=0.0, alpha=3)
    check(f, r(3))
    check(f, r(3), alpha=5.0)


def test_functools_partial():
    def scale(x, k, bias=0.0):
        return x * k + bias

    def f(x):
        double = functools.partial(scale, k=2)
        return double(x), functools.partial(scale, bias=1.0)(x, 3)
    check(f, r(3))


def test_partial_passed_in():
    def scale(x, k):
        return x * k

    def f(x, fn):
        return fn(x)
    check(f, r(3), functools.partial(scale, k=5))


def test_ternary_and_boolean_short_circuit():
    def f(x, a, b):
        c = a or b
        d = a and b
        return x * (3 if c else 4) + (1 if d else 0)
    check(f, r(3), 0, 5)


def test_is_and_is_not():
    def f(x, y):
        return x * 2 if y is x else x - 1
    check(f, r(3), r(3))


def test_python_exception_handled_internally_not_required():
    """Control flow with no exceptions: a loop that builds an index map."""
    def f(x, names):
        index = {}
        for i, n in enumerate(names):
            if n not in index:
                index[n] = i
        return x * index["b"], index
    check(f, r(2), ["a", "b", "a", "c"])


def test_same_compiled_function_many_int_values_each_correct():
    def f(x, n):
        acc = x
        for _ in range(n):
            acc = acc * 2
        return acc

    c = ember.compile(f)
    ember.metrics.reset()
    for n in (1, 2, 3, 1, 2):
        same(c, f, r(3), n)
    expect_frames(3, 0)
