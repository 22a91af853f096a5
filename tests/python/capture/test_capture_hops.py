"""Programs that used to crash or raise raw errors under ember.compile: torch.cond (a
higher-order op: a graph break with a reason, the op runs eagerly), torch.utils.checkpoint
(captured as the call it wraps, as Dynamo captures the region; training gradients match eager),
torch.export of an ember.compile'd module, and errors raised while capturing (the traceback
names the program's own line)."""

from __future__ import annotations

import traceback

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import ember
import ember.metrics


def reasons():
    ember.metrics.snapshot()
    return list(ember.metrics.fallback_reasons)


def branchy(x):
    y = x * 2
    z = torch.cond(y.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (y,))
    return z + 1


@pytest.mark.parametrize("fullgraph", [False, True])
def test_cond_is_a_graph_break_not_a_crash(fullgraph):
    c = ember.compile(branchy, fullgraph=fullgraph)
    ember.metrics.reset()
    for sign in (1.0, -1.0):
        x = torch.rand(4) * sign
        if fullgraph:
            with pytest.raises(Exception, match="higher-order op"):
                c(x)
        else:
            torch.testing.assert_close(c(x), branchy(x))
    if not fullgraph:
        assert any("higher-order op" in r for r in reasons())


def test_cond_under_torch_compile_backend_ember():
    c = torch.compile(branchy, backend="ember")
    for sign in (1.0, -1.0):
        x = torch.rand(4) * sign
        torch.testing.assert_close(c(x), branchy(x))


class Checkpointed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 8)
        self.b = torch.nn.Linear(8, 4)

    def block(self, x, scale=1.0):
        return torch.nn.functional.gelu(self.a(x)) * scale

    def forward(self, x):
        y = checkpoint(self.block, x, use_reentrant=False, scale=0.5)
        return self.b(y).sum()


def grads(model, x):
    model.zero_grad()
    loss = model(x)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def test_checkpoint_in_training_is_captured_whole():
    torch.manual_seed(0)
    m = Checkpointed()
    c = ember.compile(m)
    ember.metrics.reset()
    for _ in range(2):
        x = torch.randn(3, 4)
        loss_c, g_c = grads(c, x)
        loss_e, g_e = grads(m, x)
        torch.testing.assert_close(loss_c, loss_e)
        for a, b in zip(g_c, g_e):
            torch.testing.assert_close(a, b)
    snap = ember.metrics.snapshot()
    assert snap["captured_frames"] == 1 and snap["graph_breaks"] == 0, reasons()
    assert snap["training_graphs"] == 1


@pytest.mark.parametrize("with_break", [False, True])
def test_export_of_a_compiled_module(with_break):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x):
            y = self.lin(x)
            if with_break:
                print("", end="")
            return y.relu()

    m = M()
    c = ember.compile(m)
    x = torch.randn(4, 3)
    c(x)
    ep = torch.export.export(c, (x,))
    torch.testing.assert_close(ep.module()(x), m(x))


def test_an_error_during_capture_names_the_programs_line():
    def helper(a):
        return a @ torch.ones(5, 5)  # the failing line

    def f(x):
        return helper(x + 1)

    for fullgraph in (False, True):
        with pytest.raises(RuntimeError, match="cannot be multiplied") as info:
            ember.compile(f, fullgraph=fullgraph)(torch.randn(3, 4))
        text = "".join(traceback.format_exception(info.value))
        assert "the failing line" in text, text


def test_a_torch_compiled_function_inside_is_inlined():
    """ember.compile over a function that calls a torch.compile'd one: the compiled function's
    original is captured (as Dynamo inlines a nested compiled function), not Dynamo run on
    tracer tensors."""
    @torch.compile(backend="eager")
    def inner(x):
        return x * 3

    inner(torch.randn(3))  # Dynamo's frame evaluation installed before ember's

    def outer(x):
        return inner(x * 2) + 1

    c = ember.compile(outer)
    ember.metrics.reset()
    for n in (4, 5):
        x = torch.randn(n)
        torch.testing.assert_close(c(x), outer(x))
    assert ember.metrics.snapshot()["graph_breaks"] == 0


def test_cond_after_dynamo_ran():
    """Dynamo's evaluator installed before ember's and again over it (torch.cond's eager path
    compiles with Dynamo): each chains to the other; frames must not pass between them
    forever."""
    @torch.compile(backend="eager")
    def warm(x):
        return x + 1

    warm(torch.randn(2))
    c = ember.compile(branchy)
    for sign in (1.0, -1.0, 1.0):
        x = torch.rand(4) * sign
        torch.testing.assert_close(c(x), branchy(x))


def test_cond_then_a_torch_compiled_callee_over_new_shapes():
    """torch.cond followed by a call to a torch.compile'd function, over several shapes (Dynamo
    recompiles the callee with dynamic shapes): ember's tracer tensors must never reach Dynamo
    ("Cannot call storage_offset() on tensor with symbolic sizes" before EagerUnhooked)."""
    g = torch.compile(lambda t: t * 3, backend="eager")
    g(torch.randn(3))

    def f(x):
        z = torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))
        return g(z) + 1

    c = ember.compile(f)
    for n, sign in ((4, 1.0), (4, -1.0), (5, 1.0), (6, -1.0), (7, 1.0)):
        x = torch.rand(n) * sign
        torch.testing.assert_close(c(x), f(x))


def test_associative_scan_in_generic_mode_is_captured_whole():
    # transformers' Mamba under compilation (is_compiling is true): associative_scan's generic
    # mode is Python over torch.vmap and slices, inlined into the graph like the program's code.
    from torch._higher_order_ops.associative_scan import associative_scan

    def combine(left, right):  # a linear recurrence h = a * h + b
        return left[0] * right[0], right[0] * left[1] + right[1]

    def f(a, b):
        _, h = associative_scan(combine, (a, b), dim=2, combine_mode="generic")
        return h * 2

    c = ember.compile(f)
    ember.metrics.reset()
    with torch.no_grad():
        for n in (7, 16):  # odd and even lengths take both arms of the recursion
            a, b = torch.rand(2, 3, n, 4), torch.randn(2, 3, n, 4)
            torch.testing.assert_close(c(a, b), f(a, b))
            h, want = torch.zeros(2, 3, 4), []
            for t in range(n):  # the recurrence itself
                h = a[:, :, t] * h + b[:, :, t]
                want.append(h)
            torch.testing.assert_close(c(a, b), torch.stack(want, 2) * 2)
    snap = ember.metrics.snapshot()
    assert snap["graph_breaks"] == 0 and snap["eager_frames"] == 0, reasons()
