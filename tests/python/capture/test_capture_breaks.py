"""Graph breaks in frames with cell variables: the graph before the break, the unsupported
instruction in CPython, and a resume function that makes the cells again. Differential against
eager, with graph and break counts from ember.explain."""

from __future__ import annotations

import torch

import ember


def r(*shape):
    return torch.randn(*shape)


def counts(fn, *args):
    out = ember.explain(fn)(*args)
    return out.graph_count, out.graph_break_count


def test_break_in_frame_with_a_cell_argument():
    def f(x, pad):
        y = x * 2
        print("break")
        ys = [y[i] + pad for i in range(2)]  # the comprehension closes over pad
        return sum(ys) + (lambda: pad * 3)()
    x = r(2, 3)
    assert counts(f, x, 1.5) == (2, 1)
    c = ember.compile(f)
    for _ in range(2):
        torch.testing.assert_close(c(x, 1.5), f(x, 1.5))


def test_break_with_an_unbound_cell_assigned_after():
    def f(x):
        y = x + 1
        print("break")
        k = 4
        return (lambda: y * k)()
    x = r(3)
    assert counts(f, x) == (2, 1)
    torch.testing.assert_close(ember.compile(f)(x), f(x))


def test_closure_made_before_the_break_keeps_the_frame_whole():
    """A function made before the break shares the frame's cell: no graph break there, the
    frame runs eagerly with the reason recorded (the lambda's own frame is captured)."""
    def f(x):
        k = 2
        g = lambda: k
        print("break")
        k = 5
        return x * g()
    x = r(3)
    out = ember.explain(f)(x)
    assert out.graph_break_count == 1 and "runs eagerly" in out.break_reasons[0]
    assert "print" in out.break_reasons[0]
    torch.testing.assert_close(ember.compile(f)(x), x * 5)
