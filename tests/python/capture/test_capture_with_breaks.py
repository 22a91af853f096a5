"""Graph breaks inside with blocks (Note [Graph breaks inside with blocks]): the graph before
the break, the unsupported instruction run inside the block entered again, and a resume function
that enters it again and goes on. Differential against eager, with graph and break counts from
ember.explain, and the global state (grad mode, autocast, the handled exception) checked after
every call, including one that raises inside the block."""

from __future__ import annotations

import sys

import pytest
import torch

import ember


def r(*shape, grad=False):
    return torch.randn(*shape, requires_grad=grad)


def counts(fn, *args):
    out = ember.explain(fn)(*args)
    return out.graph_count, out.graph_break_count


def state():
    return (torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"),
            torch.get_autocast_dtype("cpu"), sys.exc_info()[0])


def same(c, f, *args, **tol):
    before = state()
    out, ref = c(*args), f(*args)
    assert state() == before
    torch.testing.assert_close(out, ref, **tol)
    assert out.dtype == ref.dtype and out.requires_grad == ref.requires_grad
    return out


def train_step_matches_eager(m, x):
    """One forward and backward of `m` eagerly, then compiled: the loss and every gradient."""
    ref = m(x)
    ref.backward()
    grads = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    out = ember.compile(m)(x)
    out.backward()
    torch.testing.assert_close(out, ref)
    for p, g in zip(m.parameters(), grads):
        torch.testing.assert_close(p.grad, g)


def test_break_inside_no_grad_keeps_both_graphs():
    def f(x):
        y = x * 2
        with torch.no_grad():
            z = y + 1
            print("inside no_grad")
            z = z * 3
        return z + y
    x = r(4, grad=True)
    assert counts(f, x) == (2, 1)
    c = ember.compile(f)
    for _ in range(2):
        same(c, f, x)


def test_break_inside_autocast_runs_the_rest_in_bfloat16():
    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
            print("inside autocast")
            z = (y @ w).relu()
        return z
    x, w = r(4, 8), r(8, 8)
    assert counts(f, x, w) == (2, 1)
    c = ember.compile(f)
    for _ in range(2):
        assert same(c, f, x, w).dtype == torch.bfloat16


def test_break_inside_nested_withs():
    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a = x @ x
            with torch.no_grad():
                b = a.sin()
                print("inner")
                b = b @ x
            c = a @ x
        return b.float() + c.float()
    x = r(4, 4, grad=True)
    assert counts(f, x) == (2, 1)
    c = ember.compile(f)
    for _ in range(2):
        same(c, f, x)


def test_break_at_a_data_dependent_branch_inside_a_block():
    def f(x):
        with torch.no_grad():
            y = x.cos()
            if y.sum() > 0:
                y = y + 1
            else:
                y = y - 1
        return y * x
    c = ember.compile(f)
    for x in (torch.full((4,), 0.5, requires_grad=True), torch.full((4,), 3.0, requires_grad=True)):
        same(c, f, x)
    assert counts(f, r(4, grad=True))[1] == 1


def test_set_grad_enabled_and_inference_mode_blocks():
    def f(x):
        with torch.set_grad_enabled(False):
            y = x * 2
            print("set_grad_enabled")
            y = y + 1
        with torch.inference_mode():
            z = y.exp()
            print("inference_mode")
            z = z - 1
        return y, z
    x = r(3, grad=True)
    c = ember.compile(f)
    for _ in range(2):
        out, ref = c(x), f(x)
        for a, b in zip(out, ref):
            torch.testing.assert_close(a, b)
            assert not a.requires_grad
        assert torch.is_grad_enabled()
    assert counts(f, x) == (3, 2)


@torch.compiler.disable
def maybe_raise(y):
    if y.shape[0] == 3:
        raise ValueError("three")
    return y


def test_an_exception_from_the_break_exits_the_blocks():
    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with torch.no_grad():
                y = x @ x.t()
                y = maybe_raise(y)
                y = y.relu()
        return y
    c = ember.compile(f)
    same(c, f, r(4, 4))
    for _ in range(2):
        before = state()
        with pytest.raises(ValueError, match="three"):
            c(r(3, 3))
        assert state() == before
    same(c, f, r(4, 4))


def test_a_try_block_inside_the_with_keeps_the_frame_eager():
    def f(x):
        with torch.no_grad():
            try:
                y = x * 2
                print("in a try")
            except ValueError:
                y = x
        return y + 1
    c = ember.compile(f)
    for _ in range(2):
        same(c, f, r(3))
    assert counts(f, r(3)) == (0, 0)


def test_break_inside_a_block_inside_a_loop():
    def f(x, n):
        for i in range(n):
            with torch.no_grad():
                x = x * 2
                print("iteration", i)
                x = x + i
        return x
    c = ember.compile(f)
    for _ in range(2):
        same(c, f, r(3), 3)


def test_training_through_a_break_inside_autocast():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)
            self.b = torch.nn.Linear(8, 8)

        def forward(self, x):
            h = self.a(x)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                h = self.b(h)
                print("inside")
                h = self.a(h).relu()
            return h.float().sum()

    torch.manual_seed(0)
    m = M()
    x = r(4, 8)
    train_step_matches_eager(m, x)
    assert counts(m, x) == (2, 1)


def test_a_block_that_keeps_grad_mode_after_parameters_are_read_is_captured():
    # Parameters (inputs that require grad) read before an autocast block in a training
    # forward: the block does not enable grad mode (it was on), so the frame is one graph.
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = torch.nn.Linear(4, 4)

        def forward(self, x):
            y = self.a(x)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = self.b(y)
            with torch.enable_grad():
                y = y.float() * 2
            return y.sum()

    m = M()
    x = r(2, 4)
    assert counts(m, x) == (1, 0)
    c = ember.compile(m)
    out, ref = c(x), m(x)
    torch.testing.assert_close(out, ref)
    out.backward()


# Nested breaks: the break inside an inlined call, with blocks in the callee or around the call.

def _helper_in_no_grad(y):
    with torch.no_grad():
        z = y * 2
        print("inside the callee's block")
        z = z + 1
    return z


def test_nested_break_inside_the_callees_block():
    def f(x):
        a = x.sin()
        b = _helper_in_no_grad(a)
        return a + b
    x = r(4, grad=True)
    # One graph up to the print (sin and the product), the callee's rest, the caller's rest.
    assert counts(f, x) == (3, 1)
    c = ember.compile(f)
    for _ in range(2):
        same(c, f, x)


def _helper_prints(y):
    y = y * 2
    print("inside the callee")
    return y + 1


def test_nested_break_under_the_callers_block():
    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = x @ x
            h = _helper_prints(h)
            h = h @ x
        return h
    x = r(4, 4)
    assert counts(f, x) == (3, 1)
    c = ember.compile(f)
    for _ in range(2):
        assert same(c, f, x, atol=1e-2, rtol=1e-2).dtype == torch.bfloat16


def _helper_may_raise(y):
    with torch.no_grad():
        y = y @ y.t()
        y = maybe_raise(y)
    return y.relu()


def test_an_exception_from_a_nested_break_exits_every_block():
    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = x * 2
            h = _helper_may_raise(h)
        return h
    c = ember.compile(f)
    same(c, f, r(4, 4), atol=1e-2, rtol=1e-2)
    for _ in range(2):
        before = state()
        with pytest.raises(ValueError, match="three"):
            c(r(3, 3))
        assert state() == before
    same(c, f, r(4, 4), atol=1e-2, rtol=1e-2)


def test_training_through_a_nested_break_under_autocast():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            x = self.lin(x)
            print("inside the block")
            return x.relu()

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(8, 8)
            self.block = Block()

        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                h = self.block(self.a(x))
            return h.float().sum()

    torch.manual_seed(0)
    m = M()
    x = r(4, 8)
    train_step_matches_eager(m, x)
    assert counts(m, x)[1] == 1


def test_a_manager_from_outside_the_frame_is_guarded():
    # The block's manager is an argument, a new one per call: a break inside it must not replay
    # the first call's autocast state for a later manager of another state.
    def f(x, ctx):
        with ctx:
            y = x @ x
            print("inside the argument's block")
            y = y @ x
        return y
    c = ember.compile(f)
    x = r(4, 4)
    for ctx in (lambda: torch.autocast("cpu", dtype=torch.bfloat16),
                lambda: torch.autocast("cpu", enabled=False),
                lambda: torch.autocast("cpu", dtype=torch.bfloat16)):
        same(c, f, x, ctx(), atol=1e-2, rtol=1e-2)
