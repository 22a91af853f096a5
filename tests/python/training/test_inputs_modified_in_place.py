"""Note [Traced inputs modified in place] (tracer/grad_inputs.h): a graph input that requires grad
and stands for a tensor autograd computed (an activation handed over a graph break, or between
DDPOptimizer's pieces) may be modified in place, as eager allows for a non-leaf. Both entry
points compile such graphs; the caller's tensor gets its new value and the compiled backward as
its history, so gradients through later uses of it are eager's. A leaf modified in place raises
as in eager, before anything changes."""

from __future__ import annotations

import pytest
import torch

import ember


def brk():
    print(end="")  # a graph break under ember.compile and under Dynamo


def compiled(fn, entry):
    torch._dynamo.reset()
    return ember.compile(fn) if entry == "ember" else torch.compile(fn, backend="ember")


def grads_of(fn, make_inputs):
    """fn's loss and the gradients of the leaves make_inputs returns (the first is a weight)."""
    leaves, args = make_inputs()
    loss = fn(*args)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in leaves]


def residual_add(x, w, b):
    out = x @ w
    brk()
    out += b  # the graph after the break starts with the activation modified in place
    out.mul_(2)
    return out.relu().sum()


def used_after(x, w, b):
    y = x @ w
    z = stage(y, b)  # modifies y in place, in a graph of its own
    return (z + y * 3).sum()  # y's new value, and a gradient through its new history


def stage(y, b):
    y.add_(b)
    return y.sin()


def view_modified(x, w, b):
    base = x @ w
    brk()
    base[:, :2] += b[:, :2]  # an in-place op on a view: the base's history is rebased
    return (base * base).sum()


def leaves():
    torch.manual_seed(0)
    w = torch.randn(8, 8, requires_grad=True)
    b = torch.randn(4, 8, requires_grad=True)
    return [w, b], (torch.randn(4, 8), w, b)


@pytest.mark.parametrize("entry", ["ember", "torch"])
@pytest.mark.parametrize("fn", [residual_add, used_after, view_modified])
def test_gradients_match_eager(fn, entry):
    want_loss, want = grads_of(fn, leaves)
    ember.metrics.reset()
    c = compiled(fn, entry)
    for _ in range(2):  # the first call compiles, the second runs what it compiled
        got_loss, got = grads_of(c, leaves)
        torch.testing.assert_close(got_loss, want_loss)
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e)
    m = ember.metrics.snapshot()
    assert m["training_graphs"] >= 1 and m.get("fallbacks", 0) == 0, (m, ember.metrics.fallback_reasons)
    assert not any("in-place" in r or "modifies in place" in r for r in ember.metrics.fallback_reasons)


def test_the_callers_tensor_holds_the_new_value_and_history():
    def f(y, b):
        y.add_(b)
        return y.exp()

    c = ember.compile(f)
    w = torch.randn(3, 3, requires_grad=True)
    b = torch.randn(3, 3, requires_grad=True)
    for _ in range(2):
        y = w * 2
        out = c(y, b)
        y_want = w.detach() * 2 + b.detach()
        torch.testing.assert_close(y.detach(), y_want)
        torch.testing.assert_close(out.detach(), y_want.exp())
        assert y.grad_fn is not None and y._version > 0
        w.grad = b.grad = None
        (out.sum() + y.sum()).backward()  # through the compiled backward and y's new history
        torch.testing.assert_close(w.grad, 2 * (y_want.exp() + 1))
        torch.testing.assert_close(b.grad, y_want.exp() + 1)


@pytest.mark.parametrize("entry", ["ember", "torch"])
def test_a_leaf_modified_in_place_raises_as_in_eager(entry):
    def f(y, b):
        y.add_(b)
        return y.sum()

    y = torch.randn(3, requires_grad=True)
    b = torch.randn(3)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        f(y, b)
    before = y.detach().clone()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        compiled(f, entry)(y, b)
    torch.testing.assert_close(y.detach(), before)  # nothing changed


def test_a_min_cut_never_recomputes_from_an_input_modified_in_place():
    # exp(y) is cheap to recompute from y in the backward (eager saves exp's result, not y), but
    # y holds its new value there: the forward computes what the backward needs from y's old
    # value and saves it.
    def f(y, w):
        h = torch.exp(y) * w
        y.mul_(3)
        return (h * h).sum() + y.sum()

    w = torch.randn(16, 16, requires_grad=True)
    x = torch.randn(16, 16, requires_grad=True)
    c = ember.compile(f)
    ember.metrics.reset()
    for fn in (f, c):
        w.grad = x.grad = None
        fn(x * 1, w).backward()
        if fn is f:
            want = (w.grad.clone(), x.grad.clone())
    torch.testing.assert_close((w.grad, x.grad), want)
    m = ember.metrics.snapshot()
    assert m["training_graphs"] == 1 and not ember.metrics.fallback_reasons, (m, ember.metrics.fallback_reasons)
