"""Mutations of lists and dicts from outside the captured frame: the frame mutates its copy,
and the compiled frame writes the copy's final items back into the original object after the
graph (as eager leaves them), keeping the original's identity. Differential against eager on
the returned values and on the containers' contents."""

from __future__ import annotations

import pytest
import torch

from capture_check import expect_frames

import ember


def r(*shape):
    return torch.randn(*shape)


def counts(fn, *args):
    out = ember.explain(fn)(*args)
    return out.graph_count, out.graph_break_count


def _same_contents(a, b):
    assert type(a) is type(b) and len(a) == len(b)
    items_a = a.items() if isinstance(a, dict) else enumerate(a)
    for k, v in items_a:
        w = b[k]
        if isinstance(v, torch.Tensor):
            torch.testing.assert_close(v, w)
        else:
            assert v == w


def test_append_to_an_argument_list():
    def f(x, out):
        y = x * 2
        out.append(y)
        out.append(3)
        return y + 1
    assert counts(f, r(3), []) == (1, 0)
    c = ember.compile(f)
    for _ in range(2):
        x = r(3)
        got_list, want_list = [], []
        got, want = c(x, got_list), f(x, want_list)
        torch.testing.assert_close(got, want)
        _same_contents(got_list, want_list)


def test_item_stores_and_deletes_on_an_argument_dict():
    def f(x, cache):
        cache["h"] = x.sin()
        cache["n"] = cache["n"] + 1
        del cache["old"]
        return cache["h"] * 2
    c = ember.compile(f)
    for _ in range(2):
        x = r(4)
        a = {"n": 1, "old": r(2)}
        b = {"n": 1, "old": a["old"]}
        d_identity = a
        torch.testing.assert_close(c(x, a), f(x, b))
        assert a is d_identity
        _same_contents(a, b)


STATE = {"calls": 0}
HISTORY = []


def test_global_containers_are_written_back():
    def f(x):
        STATE["calls"] = STATE["calls"] + 1
        HISTORY.append(x.mean())
        HISTORY[0] = x.sum()
        return x * STATE["calls"]
    c = ember.compile(f)
    STATE["calls"] = 0
    HISTORY.clear()
    x = r(3)
    out = c(x)
    torch.testing.assert_close(out, x * 1)
    assert STATE == {"calls": 1} and len(HISTORY) == 1
    torch.testing.assert_close(HISTORY[0], x.sum())
    out = c(x)  # HISTORY's length changed: a guard fails, the frame compiles again
    torch.testing.assert_close(out, x * 2)
    assert STATE["calls"] == 2 and len(HISTORY) == 2


def test_inplace_add_and_slice_assignment():
    def f(x, acc):
        acc += [x + 1]
        acc[0:1] = [x * 5]
        return len(acc)
    c = ember.compile(f)
    x = r(2)
    got, want = [r(2)], None
    want_list = [got[0]]
    assert c(x, got) == f(x, want_list) == 2
    _same_contents(got, want_list)


def test_one_list_through_two_arguments():
    """The same list passed twice: one copy in the frame, so a mutation through one argument is
    seen through the other; a later call with two different lists fails the guard."""
    def f(x, a, b):
        a.append(x)
        return len(b) + 0 * x
    c = ember.compile(f)
    shared = []
    ref_shared = []
    torch.testing.assert_close(c(r(2), shared, shared), f(r(2), ref_shared, ref_shared))
    assert len(shared) == 1
    a, b, ra, rb = [], [], [], []
    x = r(2)
    torch.testing.assert_close(c(x, a, b), f(x, ra, rb))
    assert (len(a), len(b)) == (1, 0)


def test_mutation_before_a_graph_break_is_written_back_before_resuming():
    def f(x, log):
        log.append(x * 2)
        print("break")
        log.append(len(log))
        return log[0] + 1
    c = ember.compile(f)
    x = r(3)
    got, want = [], []
    torch.testing.assert_close(c(x, got), f(x, want))
    _same_contents(got, want)
    assert counts(f, x, [])[1] == 1


def test_append_to_argument_list():
    def f(xs, x):
        xs.append(x * 2)
        return x + 1
    c = ember.compile(f)
    ember.metrics.reset()
    log = []
    x = r(3)
    torch.testing.assert_close(c(log, x), x + 1)
    torch.testing.assert_close(c(log, x), x + 1)
    assert len(log) == 2
    torch.testing.assert_close(log[0], x * 2)
    # Captured: the append is written back after the graph (side_effects.h). The second call
    # sees a longer list: its length guard fails and the frame compiles again.
    expect_frames(2, 0)


def test_setitem_and_pop_on_argument_list():
    def f(xs, x):
        xs[0] = x * 2
        xs.pop()
        return x + 1
    c = ember.compile(f)
    ember.metrics.reset()
    log = [1, 2, 3]
    x = r(3)
    torch.testing.assert_close(c(log, x), x + 1)
    assert len(log) == 2
    torch.testing.assert_close(log[0], x * 2)
    expect_frames(1, 0)


def test_extend_argument_list_in_callee():
    def record(log, v):
        log.extend([v, v + 1])

    def f(xs, x):
        record(xs, x)
        return x * 2
    c = ember.compile(f)
    ember.metrics.reset()
    log = []
    x = r(3)
    torch.testing.assert_close(c(log, x), x * 2)
    assert len(log) == 2
    torch.testing.assert_close(log[1], x + 1)
    expect_frames(1, 0)


def test_store_into_argument_dict():
    def f(d, x):
        d["out"] = x * 2
        return x
    c = ember.compile(f)
    ember.metrics.reset()
    d = {}
    x = r(3)
    c(d, x)
    torch.testing.assert_close(d["out"], x * 2)
    expect_frames(1, 0)


def test_a_comprehension_of_an_eager_frame_iterates_its_iterator_unconsumed():
    # 3.11: a comprehension is a frame of its own, given its caller's iterator. When the caller
    # runs eagerly (no break inside a try block), the comprehension is compiled alone over the
    # rest of that iterator, read without advancing it (range, list, tuple and dict iterators),
    # and guarded like a list: a new length recompiles (Note [A comprehension's iterator]).
    import sys

    def f(table, ids):
        try:
            print("", end="")
        finally:
            pass
        rows = [torch.index_select(table, 0, ids[i]) for i in range(ids.shape[0])]
        cols = {k: table[:, j] * 2 for k, j in {"a": 0, "b": 1}.items()}
        return torch.stack(rows), cols

    since = len(ember.capture.records())
    c = ember.compile(f)
    table = torch.randn(10, 3)
    for n in (3, 3, 4):
        ids = torch.randint(0, 10, (n, 5))
        torch.testing.assert_close(c(table, ids), f(table, ids))
    recs = ember.capture.records()[since:]
    comps = [r for r in recs if "comp>" in r["code"]]
    if sys.version_info < (3, 12):  # 3.12 inlines comprehensions (PEP 709): no frames of their own
        assert all(r["captured"] for r in comps), [(r["code"], r["reason"]) for r in comps]
        assert sum("<listcomp>" in r["code"] for r in comps) == 2  # lengths 3 and 4
        assert sum("<dictcomp>" in r["code"] for r in comps) == 1


class _Features(torch.nn.ModuleDict):
    """timm's feature extractors: the outputs of some layers collected in an OrderedDict made in
    the frame, returned whole; `loud` prints in the loop (a graph break with the OrderedDict in the
    frame's state)."""

    def __init__(self, loud):
        super().__init__({"a": torch.nn.Linear(4, 4), "b": torch.nn.ReLU(),
                          "c": torch.nn.Linear(4, 2)})
        self.ret = {"a": "0", "c": "1"}
        self.loud = loud

    def forward(self, x):
        from collections import OrderedDict

        out = OrderedDict()
        for name, m in self.items():
            x = m(x)
            if name in self.ret:
                out[self.ret[name]] = x
            if self.loud and name == "b":
                print("", end="")
        return out


@pytest.mark.parametrize("loud", [False])
def test_an_ordered_dict_made_in_the_frame(loud):
    # Constructing an OrderedDict was a graph break; after it, the resume function guarded the
    # new OrderedDict of each call by identity and recompiled every call (timm's
    # vit_*_resnet*d hybrids: 6 recompiles in 3 calls). Not yet: a break with the OrderedDict in
    # the state (loud=True), whose resume function still guards it by identity (an OrderedDict
    # from outside the frame is not copied as a dict is).
    from collections import OrderedDict

    m = _Features(loud)
    c = ember.compile(m)
    for _ in range(3):
        x = r(3, 4)
        got, want = c(x), m(x)
        assert type(got) is OrderedDict and list(got) == list(want)
        for k in want:
            torch.testing.assert_close(got[k], want[k])
    s = ember.metrics.snapshot()
    assert s["graph_breaks"] == (1 if loud else 0) and s["eager_frames"] == 0, s
    assert s["captured_frames"] == (2 if loud else 1), s  # no recompiles
