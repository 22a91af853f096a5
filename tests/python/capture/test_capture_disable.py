"""torch.compiler.disable under ember.compile, as under torch.compile: a disabled function and
everything it calls run uncompiled (recursive=True, the default); with recursive=False only the
function's own frame does, and what it calls is compiled. The call is a graph break whose reason
names the function."""

from __future__ import annotations

import torch

import ember
import ember.metrics


def compiled_codes(since):
    return " ".join(r["code"] for r in ember.capture.records()[since:])


def _inner(x):
    return x * 3


@torch.compiler.disable
def _deep(x):
    return _inner(x).cos() + 1


@torch.compiler.disable(recursive=False)
def _shallow(x):
    return _inner(x) + 1


def _program(x):
    y = x * 2
    y = _deep(y)
    y = _shallow(y)
    return y.relu()


def test_disabled_functions_are_not_compiled():
    c = ember.compile(_program)
    since = len(ember.capture.records())
    ember.metrics.reset()
    x = torch.randn(8)
    for _ in range(2):
        torch.testing.assert_close(c(x), _program(x))
    codes = compiled_codes(since)
    assert "(_deep)" not in codes  # recursive: neither it
    assert codes.count("(_inner)") == 1  # ... nor _inner under it; _shallow's call of it is
    assert "(_shallow)" not in codes  # recursive=False: its own frame runs uncompiled
    ember.metrics.snapshot()
    reasons = " ".join(ember.metrics.fallback_reasons)
    assert "torch.compiler.disable'd" in reasons, reasons


def test_a_disabled_function_called_from_eager_code_stays_uncompiled():
    # Called from a frame that runs eagerly (never seen by the interpreter), the wrappers still
    # keep their functions out: the decision is the frame hook's.
    def outer(x):
        print("eager frame")  # the frame breaks here
        return _deep(x) + _shallow(x)

    c = ember.compile(outer)
    since = len(ember.capture.records())
    x = torch.randn(4)
    torch.testing.assert_close(c(x), outer(x))
    codes = compiled_codes(since)
    assert "(_deep)" not in codes and "(_shallow)" not in codes
