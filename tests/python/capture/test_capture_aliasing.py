"""Inputs that share memory. A graph traced on distinct tensors is functional: a mutation of
one input is written back after the graph, and the other inputs are read as they were before
it. So every compiled entry whose graph mutates an input guards the memory overlaps of that
input with the others (an Aliasing guard): a call passing one tensor twice, or overlapping
views of one tensor, misses the entry compiled for distinct tensors and is compiled (one tensor
twice: one graph input) or runs eagerly (overlapping views: remembered per guards, so later such
calls do not capture again). Each case is compared with eager, arguments included.
"""

from __future__ import annotations

import logging

import torch

import ember
import ember.metrics


def add_then_read(x, y):
    x.add_(1)
    return y * 2


def copy_then_add(x, y):
    y.copy_(x * 2)
    return x + y


def hook_stats():
    return ember._C.capture_hook_stats()


def counters():
    s = ember.metrics.snapshot()
    return s["captured_frames"], s["eager_frames"]


def run_both(fn, c, make):
    """`fn` eagerly and `c` on separate copies of the arguments `make()` builds (a base tensor
    and the arguments viewing it); compares the results and the bases afterwards."""
    base_e, args_e = make()
    base_c, args_c = make()
    expected = fn(*args_e)
    actual = c(*args_c)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(base_c, base_e)
    return actual


def distinct():
    a, b = torch.ones(4), torch.ones(4)
    return torch.stack([a, b]), (a, b)


def one_tensor_twice():
    t = torch.ones(4)
    return t, (t, t)


def overlapping_views():
    t = torch.arange(5.0)
    return t, (t[:4], t[1:5])


def disjoint_views():
    t = torch.arange(8.0)
    return t, (t[:4], t[4:])


def test_one_tensor_passed_twice_after_distinct_tensors():
    for fn in (add_then_read, copy_then_add):
        c = ember.compile(fn)
        ember.metrics.reset()
        run_both(fn, c, distinct)
        run_both(fn, c, one_tensor_twice)
        run_both(fn, c, one_tensor_twice)
        run_both(fn, c, distinct)
        # Two entries (distinct inputs; one input twice), each compiled once.
        assert counters() == (2, 0), fn.__name__


def test_distinct_tensors_after_one_tensor_twice():
    c = ember.compile(add_then_read)
    ember.metrics.reset()
    run_both(add_then_read, c, one_tensor_twice)
    run_both(add_then_read, c, distinct)
    assert counters() == (2, 0)


def test_overlapping_views_run_eagerly_and_are_remembered():
    for fn in (add_then_read, copy_then_add):
        c = ember.compile(fn)
        ember.metrics.reset()
        run_both(fn, c, distinct)
        assert counters() == (1, 0), fn.__name__
        before = hook_stats()
        for _ in range(3):
            run_both(fn, c, overlapping_views)
        after = hook_stats()
        # The first overlapping call captured the frame, found the overlap and ran eagerly; the
        # next two hit the entry that remembers it and ran eagerly without capturing.
        assert after["compiles"] - before["compiles"] == 1, fn.__name__
        assert after["eager_frames"] - before["eager_frames"] == 3, fn.__name__
        assert counters() == (1, 1), fn.__name__  # (counters() reads the reasons too)
        assert any("overlaps another input" in r for r in ember.metrics.fallback_reasons)


def test_overlap_on_a_warm_entry_misses_it():
    """The entry compiled for (t[:4], u[:4]) of two tensors must not run for (t[:4], t[1:5])."""
    c = ember.compile(add_then_read)
    ember.metrics.reset()

    def two_bases():
        t, u = torch.arange(5.0), torch.arange(5.0)
        return torch.stack([t, u]), (t[:4], u[1:5])

    run_both(add_then_read, c, two_bases)
    run_both(add_then_read, c, overlapping_views)
    run_both(add_then_read, c, two_bases)
    assert counters() == (1, 1)


def test_disjoint_views_of_one_tensor_stay_compiled():
    for fn in (add_then_read, copy_then_add):
        c = ember.compile(fn)
        ember.metrics.reset()
        for _ in range(3):
            run_both(fn, c, disjoint_views)
        assert counters() == (1, 0), fn.__name__


def test_aliased_inputs_without_mutation_share_the_entry():
    def read_both(x, y):
        return x * 2 + y

    c = ember.compile(read_both)
    ember.metrics.reset()
    run_both(read_both, c, distinct)
    run_both(read_both, c, one_tensor_twice)
    run_both(read_both, c, overlapping_views)
    run_both(read_both, c, overlapping_views)
    # Nothing is mutated: aliasing cannot change the result, and one entry serves every call.
    assert counters() == (1, 0)


def test_aliasing_before_a_graph_break():
    def mutate_then_break(x, y):
        x.mul_(3)
        print("", end="")
        return y + 1

    c = ember.compile(mutate_then_break)
    ember.metrics.reset()
    run_both(mutate_then_break, c, distinct)
    run_both(mutate_then_break, c, one_tensor_twice)
    for _ in range(2):
        run_both(mutate_then_break, c, overlapping_views)
    run_both(mutate_then_break, c, distinct)


def test_recompile_log_names_the_overlap(monkeypatch, caplog):
    monkeypatch.setenv("EMBER_LOGS", "recompiles")
    c = ember.compile(add_then_read)
    with caplog.at_level(logging.WARNING, logger="ember"):
        run_both(add_then_read, c, distinct)
        run_both(add_then_read, c, one_tensor_twice)
    msgs = [r.getMessage() for r in caplog.records if "recompiling" in r.getMessage()]
    assert len(msgs) == 1, msgs
    assert "now shares memory with L['y']" in msgs[0], msgs[0]
