"""Programs that must run eagerly (the whole frame, no graph breaks yet), with the reason
recorded; results still match eager, and the callees of an eager frame are still captured."""

from __future__ import annotations

import threading
import zlib

import numpy as np
import pytest
import torch
import torch.nn as nn

from capture_check import check, expect_frames, same

import ember


def r(*shape):
    return torch.randn(*shape)


def test_print():
    def f(x):
        print("value")
        return x + 1
    check(f, r(3), captured=0, eager=1, reason="print")


def test_item_in_if():
    def f(x):
        if x.sum().item() > 0:
            return x * 2
        return x - 2
    check(f, r(5), captured=0, eager=1, reason="item")


def test_item_as_value():
    def f(x):
        return x * x.max().item()
    check(f, r(5), captured=0, eager=1, reason="item")


def test_tolist():
    def f(x):
        vals = x.tolist()
        return x * len(vals), vals
    check(f, r(3), captured=0, eager=1, reason="tolist")


def test_bool_of_tensor_in_if():
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x - 2
    check(f, r(5), captured=0, eager=1)


def test_tensor_in_while_condition():
    def f(x):
        while x.abs().max() > 1:
            x = x / 2
        return x
    check(f, r(5) * 10, captured=0, eager=1)


def test_int_of_tensor():
    def f(x):
        return x * int(x.argmax())
    check(f, r(5), captured=0, eager=1)


def test_numpy_call():
    def f(x):
        return torch.from_numpy(np.exp(x.numpy())) + 1
    check(f, r(3), captured=0, eager=1, reason="numpy")


def test_numpy_on_constants():
    # A numpy function of numbers is a number (numpy scalars are guarded by value).
    def f(x):
        return x * float(np.sqrt(4.0)) * np.sqrt(9)
    check(f, r(3), captured=1, eager=0)


def test_generator_function():
    def gen(x, n):
        for i in range(n):
            yield x * i

    def f(x):
        out = x
        for v in gen(x, 3):
            out = out + v
        return out
    # The generator runs to completion inside the trace (it has no side effects): one graph.
    check(f, r(3))


def test_input_requiring_grad_under_grad_mode():
    # Captured as a joint graph (tests/python/training/test_capture_training.py).
    def f(x, w):
        return (x * w).sum()
    w = r(3).requires_grad_()
    check(f, r(3), w, captured=1, eager=0, fresh=False)


def test_module_setattr_counter():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.counter = 0

        def forward(self, x):
            self.counter += 1
            return x * 2

    # The store is replayed after the graph; the counter is read as a value, so each call
    # compiles for its value until the cache-size limit, and runs eagerly from then on.
    m = Counter()
    c = ember.compile(m)
    ember.metrics.reset()
    limit = ember.config.cache_size_limit
    with torch.no_grad(), pytest.warns(RuntimeWarning, match="cache size limit"):
        x = r(3)
        for _ in range(limit + 3):
            torch.testing.assert_close(c(x), x * 2)
    assert m.counter == limit + 3
    expect_frames(limit, 0)  # past the limit: the original bytecode, no compile


def test_setattr_on_argument_object():
    """A store to an attribute of an argument is replayed after the graph (side_effects.h)."""
    class Box:
        pass

    def f(box, x):
        box.value = x * 2
        return x + 1
    b = Box()
    c = ember.compile(f)
    ember.metrics.reset()
    x = r(3)
    torch.testing.assert_close(c(b, x), x + 1)
    torch.testing.assert_close(b.value, x * 2)
    expect_frames(1, 0)


def test_try_except_catching_program_exception():
    def f(x, d):
        try:
            v = d["missing"]
        except KeyError:
            v = 3
        return x * v
    check(f, r(3), {"present": 1})


def test_with_no_grad_inside_function():
    """`with torch.no_grad():` inside the frame: captured if supported, else eager with a reason;
    either way the result matches and the grad mode is restored."""
    def f(x):
        with torch.no_grad():
            y = x * 2
        return y + 1
    c = ember.compile(f)
    ember.metrics.reset()
    for _ in range(2):
        x = r(3)
        same(c, f, x)
        assert torch.is_grad_enabled()
    snap = ember.metrics.snapshot()
    assert snap["captured_frames"] + snap["eager_frames"] == 1


def test_c_extension_function():
    def f(x):
        return x * (zlib.crc32(b"ember") % 7)
    check(f, r(3), captured=0, eager=1)


def test_user_class_constructor():
    """f constructs a user object: a new object, its __init__ inlined."""
    class Point:
        def __init__(self, a, b):
            self.a = a
            self.b = b

    def f(x):
        p = Point(x, 2)
        return p.a * p.b
    check(f, r(3))


def test_lock_in_function():
    lock = threading.Lock()

    def f(x):
        with lock:
            return x + 1
    check(f, r(3), captured=0, eager=1)


def test_global_statement_store():
    def f(x):
        global _STORED
        _STORED = 1
        return x + 1
    check(f, r(3), captured=0, eager=1)


def g_pure(x):
    return (x * 3).sin() + 1


def test_callee_of_eager_frame_is_captured():
    def f(x):
        print("not capturable")
        return g_pure(x) * 2
    check(f, r(4), captured=1, eager=1, reason="print")


def test_two_callees_of_eager_frame_are_captured():
    def h(x):
        return x.cos() - 1

    def f(x):
        y = x.tolist()
        return g2(x) + h(x), len(y)

    def g2(x):
        return x.exp()
    check(f, r(4), captured=2, eager=1)


def test_eager_frame_is_not_retried():
    def f(x):
        print("x")
        return x + 1
    c = ember.compile(f)
    ember.metrics.reset()
    for _ in range(3):
        c(r(3))
    expect_frames(0, 1)


def test_eager_module_submodule_still_captured():
    """The top forward prints (eager); the inner module's forward is still captured."""
    class Inner(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x).relu()

    class Outer(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, x):
            print("outer")
            return self.inner(x) + 1

    with torch.no_grad():
        check(Outer().eval(), r(2, 4), captured=1, eager=1, reason="print")
