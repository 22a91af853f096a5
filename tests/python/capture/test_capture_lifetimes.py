"""What a compile keeps alive: a dropped ember.compile frees its model (the cache entries of a dead
compiler are dropped, and identity guards hold objects weakly), while ember.metrics still counts
what it compiled. Before, every model compiled in a process lived until the process ended: the
benchmark's GPU memory readings of one model changed when the previous model's were freed."""

from __future__ import annotations

import gc
import weakref

import torch

import ember


def small_model():
    return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def compile_and_run(model, x):
    c = ember.compile(model)
    with torch.no_grad():
        torch.testing.assert_close(c(x), model(x))
    return c


def test_a_dropped_compile_frees_its_model():
    ember.metrics.reset()
    model = small_model()
    c = compile_and_run(model, torch.randn(3, 16))
    weight = weakref.ref(model[0].weight)
    del model, c
    gc.collect()
    assert weight() is None, "a dropped ember.compile kept its model's parameters alive"
    assert ember.metrics.snapshot()["graphs"] == 1  # read after the compiler is gone


def test_models_compiled_one_after_another_are_freed():
    refs = []
    for _ in range(3):
        model = small_model()
        c = compile_and_run(model, torch.randn(2, 16))
        refs.append(weakref.ref(model))
        del model, c
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


MODEL = small_model()


def read_global_model(x):
    return MODEL(x) * 2


def test_an_identity_guard_holds_its_object_weakly():
    """The compiled function lives on; the module its guards named is replaced and freed, and the
    next call recompiles for the new one."""
    global MODEL
    x = torch.randn(2, 16)
    f = ember.compile(read_global_model)
    with torch.no_grad():
        torch.testing.assert_close(f(x), read_global_model(x))
        old = weakref.ref(MODEL)
        MODEL = small_model()
        gc.collect()
        assert old() is None, "an ID_MATCH guard kept the replaced module alive"
        torch.testing.assert_close(f(x), read_global_model(x))


def test_a_compile_dropped_inside_a_compiled_call_is_freed_after_it():
    """Inside a compiled call a dead compiler's entries wait (a caller may be walking a cache);
    they go when the outermost compiled call returns."""
    holder = {}
    model = small_model()
    x = torch.randn(2, 16)
    holder["inner"] = compile_and_run(model, x)
    weight = weakref.ref(model[0].weight)
    del model

    def drop_inner(t):
        holder.clear()
        return t + 1

    outer = ember.compile(drop_inner)
    torch.testing.assert_close(outer(x), x + 1)
    gc.collect()
    assert weight() is None


def _leaf(x):
    y = x.sin()
    print("leaf", end="\r")  # a graph break, two calls down
    return y * 3


def _middle(x):
    return _leaf(x + 1) - 1


def test_freed_break_code_does_not_mark_a_new_code_object():
    """Graph breaks generate code objects the hook runs as they are. Once a dropped compile frees
    them, a new code object may get one's address; it must still be compiled (this test's
    counts were once one graph short after other tests had run)."""
    for _ in range(20):
        c = ember.compile(lambda x: _middle(x * 2) + 1)
        c(torch.randn(4))
        del c
        gc.collect()

    def f(x):
        return _middle(x * 2) + 1

    out = ember.explain(f)(torch.randn(4))
    # One graph up to the print, one per frame after it (leaf, middle, f).
    assert (out.graph_count, out.graph_break_count) == (4, 1)
