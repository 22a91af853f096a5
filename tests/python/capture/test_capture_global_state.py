"""Global state that changes what a program computes without changing its inputs. Every
compiled entry guards it (in C++, on every call), as Dynamo's global-state guard does: grad
mode and autocast (tested in test_capture_guards and test_capture_autocast), the default dtype,
deterministic algorithms, float32 matmul precision and the TF32 flags, the thread count, and the
torch function and dispatch mode stacks. A change recompiles (or, under a mode, runs eagerly),
the old entry serves again once the state is back, and every call matches eager.
"""

from __future__ import annotations

import logging

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import ember
import ember.metrics
from global_state import default_dtype, deterministic, matmul_precision, num_threads


def hook_stats():
    return ember._C.capture_hook_stats()


def compiles_during(fn):
    before = hook_stats()["compiles"]
    out = fn()
    return out, hook_stats()["compiles"] - before


def with_factory(x):
    return x + torch.ones(3) * 0.5


def test_default_dtype_change_recompiles():
    c = ember.compile(with_factory)
    x = torch.randn(3)
    torch.testing.assert_close(c(x), with_factory(x))
    with default_dtype(torch.float64):
        out, n = compiles_during(lambda: c(x))
        assert n == 1
        assert out.dtype == torch.float64
        torch.testing.assert_close(out, with_factory(x))
        _, n = compiles_during(lambda: c(x))
        assert n == 0
    out, n = compiles_during(lambda: c(x))
    assert n == 0 and out.dtype == torch.float32


@pytest.mark.parametrize("change", [
    lambda: deterministic(True),
    lambda: matmul_precision("medium"),
    lambda: num_threads(1),
], ids=["deterministic_algorithms", "float32_matmul_precision", "num_threads"])
def test_state_change_recompiles_and_the_old_entry_serves_again(change):
    def f(x, w):
        return torch.relu(x @ w) + 1

    c = ember.compile(f)
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    torch.testing.assert_close(c(x, w), f(x, w))
    with change():
        out, n = compiles_during(lambda: c(x, w))
        assert n == 1
        torch.testing.assert_close(out, f(x, w))
        _, n = compiles_during(lambda: c(x, w))
        assert n == 0
    _, n = compiles_during(lambda: c(x, w))
    assert n == 0


def test_recompile_log_names_the_state_that_changed(monkeypatch, caplog):
    monkeypatch.setenv("EMBER_LOGS", "recompiles")
    c = ember.compile(with_factory)
    x = torch.randn(3)
    with caplog.at_level(logging.WARNING, logger="ember"):
        c(x)
        with deterministic(True):
            c(x)
    msgs = [r.getMessage() for r in caplog.records if "recompiling" in r.getMessage()]
    assert len(msgs) == 1, msgs
    assert "deterministic_algorithms False -> True" in msgs[0], msgs[0]


class CountCalls(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


class CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def test_a_torch_function_mode_sees_every_call():
    def f(x):
        return torch.sin(x) * 2 + 1

    c = ember.compile(f)
    x = torch.randn(5)
    c(x)  # compiled without a mode
    with CountCalls() as eager_mode:
        expected = f(x)
    with CountCalls() as mode:
        out = c(x)
    torch.testing.assert_close(out, expected)
    assert mode.calls == eager_mode.calls > 0
    _, n = compiles_during(lambda: c(x))  # the compiled entry again, without the mode
    assert n == 0


def test_a_frame_under_a_mode_runs_eagerly_without_recompiling_each_call():
    # A frame called now and then under a TorchFunctionMode (transformers' vmap mask creation
    # under TransformGetItemToIndex) runs eagerly there; decided once for that state, later
    # calls under it compile nothing and log no recompile (they recompiled on every call).
    def f(x):
        return torch.sin(x) * 2 + 1

    c = ember.compile(f)
    x = torch.randn(5)
    c(x)  # compiled without a mode
    with CountCalls():
        _, first = compiles_during(lambda: c(x))
    assert first == 1  # the decision
    for _ in range(3):
        with CountCalls() as mode:
            out, n = compiles_during(lambda: c(x))
        assert n == 0
        assert mode.calls > 0
        torch.testing.assert_close(out, f(x))
    _, n = compiles_during(lambda: c(x))  # without the mode: its entry
    assert n == 0


def test_a_dispatch_mode_sees_every_op():
    def f(x):
        return torch.cos(x) - x

    c = ember.compile(f)
    x = torch.randn(5)
    c(x)
    with CountOps() as eager_mode:
        expected = f(x)
    with CountOps() as mode:
        out = c(x)
    torch.testing.assert_close(out, expected)
    assert mode.ops == eager_mode.ops > 0


def test_default_device_context_runs_eagerly_with_a_reason():
    c = ember.compile(with_factory)
    x = torch.randn(3)
    c(x)
    ember.metrics.reset()
    with torch.device("cpu"):  # pushes torch's DeviceContext, a torch function mode
        torch.testing.assert_close(c(x), with_factory(x))
    assert ember.metrics.snapshot()["eager_frames"] == 1
    assert any("torch function mode" in r for r in ember.metrics.fallback_reasons)
