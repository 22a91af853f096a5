"""Nested graph breaks: a break inside inlined calls keeps the callers' graph. The graph runs
up to the break, the innermost frame runs the unsupported instruction and resumes, and each
caller resumes after its call with the callee's return value. Differential against eager, with
graph and break counts from ember.explain."""

from __future__ import annotations

import torch

import ember


def r(*shape):
    return torch.randn(*shape)


def counts(fn, *args):
    out = ember.explain(fn)(*args)
    return out.graph_count, out.graph_break_count, out.break_reasons


def _leaf(x):
    y = x.sin()
    print("leaf")  # the break, two calls down
    return y * 3


def _middle(x, k):
    z = _leaf(x + k) - 1
    return z.cos(), k


def test_break_two_calls_down_is_one_break():
    def f(x):
        a = x * 2
        b, k = _middle(a, 2)
        return b + a + k
    x = r(4)
    graphs, breaks, reasons = counts(f, x)
    # One graph before the print, one per frame after it (leaf, middle, f).
    assert (graphs, breaks) == (4, 1)
    assert "_leaf" in reasons[0] or "leaf" in reasons[0]
    assert "<- " in reasons[0]  # the inlined call chain is named
    c = ember.compile(f)
    for _ in range(3):
        x = r(4)
        torch.testing.assert_close(c(x), f(x))


def _mask_rows(x):
    keep = x[:, 0] > 0
    return x[keep]  # a data-dependent shape


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        return _mask_rows(h).relu()


class Net(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block() for _ in range(n)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x) + 1
        return x.sum(0)


def test_data_dependent_shape_in_modules_in_a_loop():
    """As pyg's GCN: the break is two calls below a loop over layers; one break per layer."""
    net = Net(3).eval()
    x = r(16, 4)
    with torch.no_grad():
        graphs, breaks, _ = counts(net, x)
        assert breaks == 3
        c = ember.compile(net)
        for _ in range(3):
            x = r(16, 4)
            torch.testing.assert_close(c(x), net(x))


def _branch(x):
    if x.sum() > 0:  # data-dependent control flow inside the callee
        return x * 2
    return x - 5


def test_conditional_jump_in_the_callee_takes_both_branches():
    def f(x):
        return _branch(x + 1) * 3
    assert counts(f, r(3))[1] == 1
    c = ember.compile(f)
    for x in (torch.ones(3), -torch.ones(3) * 4, torch.ones(3), -torch.ones(3) * 4):
        torch.testing.assert_close(c(x), f(x))


def test_pending_call_below_the_callers_call():
    """The caller's stack holds an outer call (a NULL and its callable) below the inner call."""
    def f(x):
        return torch.tanh(_leaf(x) + 1) * 2
    assert counts(f, r(3))[1] == 1
    c = ember.compile(f)
    for _ in range(2):
        x = r(3)
        torch.testing.assert_close(c(x), f(x))


def _kw(x, *, scale):
    print("kw")
    return x * scale


def test_keyword_call_and_locals_after_the_break():
    def f(x, y):
        t = x + y
        u = _kw(t, scale=3.0)
        return u - t + y
    c = ember.compile(f)
    assert counts(f, r(3), r(3))[1] == 1
    for _ in range(2):
        x, y = r(3), r(3)
        torch.testing.assert_close(c(x, y), f(x, y))


def test_caller_in_a_try_block_breaks_at_its_own_call():
    """A caller inside a try block can not be resumed from outside it: that frame runs eagerly,
    and the callee's frame, captured on its own, takes the nested break."""
    def f(x):
        try:
            y = _middle(x, 1)[0]
        except ValueError:
            y = x
        return y + 1
    graphs, breaks, reasons = counts(f, r(3))
    assert breaks == 2 and "runs eagerly" in reasons[0]
    assert "(_middle): graph break" in reasons[1]
    c = ember.compile(f)
    x = r(3)
    torch.testing.assert_close(c(x), f(x))


class Made:
    def __init__(self, x):
        print("init")  # a break in __init__: the constructor call is not a plain call
        self.x = x * 2


def test_break_in_init_is_not_nested():
    def f(x):
        m = Made(x + 1)
        return m.x + 1
    c = ember.compile(f)
    x = r(3)
    torch.testing.assert_close(c(x), f(x))
    _, breaks, reasons = counts(f, x)
    assert breaks == 2 and "(Made.__init__)" in reasons[1]


def _raises_after(x):
    print("then raise")
    if x.shape[0] == 2:
        raise KeyError("boom")
    return x


def test_exception_after_the_break_reaches_the_caller_of_the_compiled_function():
    def f(x):
        return _raises_after(x * 2) + 1
    c = ember.compile(f)
    x = r(3)
    torch.testing.assert_close(c(x), f(x))  # compiles for size 3
    try:
        c(r(2))
    except KeyError as e:
        assert "boom" in str(e)
    else:
        raise AssertionError("no KeyError")


def test_fullgraph_names_the_nested_break():
    def f(x):
        return _middle(x, 1)[0]
    c = ember.compile(f, fullgraph=True)
    try:
        c(r(3))
    except Exception as e:  # noqa: BLE001
        assert "print" in str(e)
    else:
        raise AssertionError("fullgraph did not raise")



def _project(x, w):
    y = x @ w
    print("project")  # the break: the callee's state holds the parameter w
    return y + w.sum()


class _Projected(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 5))

    def forward(self, x):
        return _project(x.relu(), self.w) * 2


def test_break_whose_state_holds_a_parameter_under_no_grad():
    # The parameter in the callee's state is read from its source after the graph, not passed
    # through it (an output of the graph would not carry its requires_grad under no_grad, and
    # the frame ran eagerly).
    m = _Projected().eval()
    with torch.no_grad():
        graphs, breaks, reasons = counts(m, r(3, 4))
        assert breaks == 1 and not any("require grad" in str(x) for x in reasons), reasons
        c = ember.compile(m)
        for _ in range(2):
            x = r(3, 4)
            torch.testing.assert_close(c(x), m(x))
