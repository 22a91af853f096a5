"""The check every capture test makes: a program run through ember.compile matches eager.

`check(fn, *args)` runs `fn` eagerly and compiled `calls` times on separate clones of the same
arguments (then once more on fresh random values of the same shapes, which must hit the cache),
compares the outputs and the arguments after each call (in-place mutations must match), and
asserts ember's frame counters: `captured` frames captured whole, `eager` frames run eagerly
(and, when `reason` is given, that some fallback reason contains it).
"""

from __future__ import annotations

import inspect
import math

import torch

import ember
import ember.metrics
from ember.testing import clone_inputs


def frames() -> tuple[int, int]:
    """(captured_frames, eager_frames) since the last ember.metrics.reset()."""
    snap = ember.metrics.snapshot()
    return snap["captured_frames"], snap["eager_frames"]


def reasons() -> list[str]:
    ember.metrics.snapshot()
    return list(ember.metrics.fallback_reasons)


def assert_same(actual, expected, atol=1e-5, rtol=1e-5, path="out"):
    """Recursive equality: tensors with assert_close (dtype and shape included), containers by
    type, length and keys, floats approximately, everything else with ==."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{path}: expected a tensor, got {type(actual)}"
        assert actual.shape == expected.shape, f"{path}: shape {actual.shape} != {expected.shape}"
        assert actual.dtype == expected.dtype, f"{path}: dtype {actual.dtype} != {expected.dtype}"
        torch.testing.assert_close(actual.detach(), expected.detach(), atol=atol, rtol=rtol,
                                   equal_nan=True, msg=lambda m: f"{path}: {m}")
    elif isinstance(expected, (tuple, list)):
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, atol, rtol, f"{path}[{i}]")
    elif isinstance(expected, dict):
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        assert list(actual) == list(expected), f"{path}: keys {list(actual)} != {list(expected)}"
        for k in expected:
            assert_same(actual[k], expected[k], atol, rtol, f"{path}[{k!r}]")
        if type(expected) is not dict and hasattr(expected, "__dict__"):
            assert_same(vars(actual), vars(expected), atol, rtol, f"vars({path})")
    elif _is_plain_object(expected):
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        assert_same(vars(actual), vars(expected), atol, rtol, f"vars({path})")
    elif isinstance(expected, float) and not isinstance(actual, torch.Tensor):
        assert type(actual) is float, f"{path}: {type(actual)} != float"
        assert math.isclose(actual, expected, rel_tol=rtol, abs_tol=atol) or (
            math.isnan(actual) and math.isnan(expected)), f"{path}: {actual} != {expected}"
    elif expected is None:
        assert actual is None, f"{path}: expected None, got {actual!r}"
    else:
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def _is_plain_object(obj) -> bool:
    """An object of a program's class (compared by its attributes)."""
    return (hasattr(obj, "__dict__") and not isinstance(obj, (type, torch.nn.Module))
            and not callable(obj) and type(obj).__module__ not in ("builtins", "types"))


def _fresh(obj):
    """`obj` with every floating tensor replaced by new random values (same shape and strides)."""
    if isinstance(obj, torch.Tensor) and obj.is_floating_point() and not obj.requires_grad:
        out = torch.empty_strided(obj.size(), obj.stride(), dtype=obj.dtype)
        out.copy_(torch.randn(obj.shape, dtype=obj.dtype))
        return out
    if isinstance(obj, (tuple, list)):
        return type(obj)(_fresh(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _fresh(v) for k, v in obj.items()}
    return obj


def same(compiled, fn, *args, atol=1e-5, rtol=1e-5, **kwargs):
    """One differential call: `fn` and `compiled` on separate clones of the arguments; compares
    the results and the arguments afterwards. Returns the compiled result."""
    eargs, ekw = clone_inputs((list(args), kwargs))
    cargs, ckw = clone_inputs((list(args), kwargs))
    expected = fn(*eargs, **ekw)
    actual = compiled(*cargs, **ckw)
    assert_same(actual, expected, atol, rtol)
    assert_same(cargs, eargs, atol, rtol, path="args after the call")
    assert_same(ckw, ekw, atol, rtol, path="kwargs after the call")
    return actual


def expect_frames(captured, eager, reason=None):
    """Asserts the frame counters since the last metrics.reset().

    `eager` > 0 names frames that cannot be captured whole. Without graph breaks they run eagerly
    and the counts are exact. A build with graph breaks (ember.metrics counts "graph_breaks") may
    instead split such a frame into graphs around the unsupported instruction: then at most
    `eager` frames run eagerly, at least `captured` are captured, and the reason is still
    recorded. Programs expected to be captured whole (`eager` == 0) must never break."""
    got_captured, got_eager = frames()
    breaks = ember.metrics.snapshot().get("graph_breaks", 0)
    rs = reasons()
    msg = (f"expected captured_frames={captured}, eager_frames={eager}; got {got_captured}, "
           f"{got_eager} (graph breaks: {breaks}); fallback reasons: {rs}")
    if eager > 0 and breaks > 0:
        assert got_eager <= eager and got_captured >= captured, msg
    else:
        assert (got_captured, got_eager) == (captured, eager), msg
    if reason is not None:
        assert any(reason in r for r in rs), f"no fallback reason contains {reason!r}: {rs}"


def check(fn, *args, captured=1, eager=0, reason=None, calls=2, fresh=True, atol=1e-5,
          rtol=1e-5, fullgraph=False, backend="ember", **kwargs):
    """Runs `fn` eagerly and through ember.compile (with `backend`) `calls` times on clones of
    `args`/`kwargs` (then once on fresh random float values of the same shapes when `fresh`),
    compares outputs and mutated inputs, and asserts the frame counters. Returns the compiled
    callable."""
    compiled = ember.compile(fn, fullgraph=fullgraph, backend=backend)
    ember.metrics.reset()
    for _ in range(calls):
        same(compiled, fn, *args, atol=atol, rtol=rtol, **kwargs)
    if fresh:
        fargs, fkw = _fresh((list(args), kwargs))
        same(compiled, fn, *fargs, atol=atol, rtol=rtol, **fkw)
    expect_frames(captured, eager, reason)
    return compiled


def line_of(fn, text: str) -> int:
    """The line number of the first line of `fn`'s source containing `text`."""
    lines, first = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line:
            return first + i
    raise AssertionError(f"{text!r} not in the source of {fn.__name__}")
