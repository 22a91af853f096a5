"""Views over shape symbols (issue 35, Note [Views over shape symbols] in src/sched/index_ops.cpp):
kernels read a view of a realized tensor at its traced geometry (sizes, strides and storage offset
as expressions over the symbols), and a view something else needs (an extern's argument, a graph
output) is a view step made straight from its root's storage, its geometry evaluated per call. So a
symbolic graph runs the same steps as the static trace of the same program, with no ATen call per
view. Compared with eager at many sizes, on C++ kernels and on Triton's interpreter."""

from __future__ import annotations

import os

import pytest
import torch

import ember
from ember import metrics


def _interpret_triton() -> list:
    ok = os.environ.get("TRITON_INTERPRET") == "1"
    return [False, pytest.param(True, marks=pytest.mark.skipif(not ok, reason="Triton's interpreter is off"))]


def every_view(x, w):
    # x: [B, T, 8]; every view op with a symbolic size, stride or offset, read by kernels and by
    # an extern (the bmm).
    B, T, C = x.shape
    h = torch.tanh(x)                              # computed: realized for the views below
    a = x.transpose(0, 1).permute(2, 0, 1)         # [8, T, B], strides of symbols
    b = a.unsqueeze(0).expand(2, C, T, B) * 2      # broadcast along a new dim
    s = h[:, 1:T - 1] + x.narrow(1, 1, T - 2)      # a slice of a computed value, a narrow
    last = x[:, -1] * 3                            # select at T - 1: an offset over a symbol
    q, k = x.split(4, dim=2)                       # two outputs of one view
    att = q @ k.transpose(1, 2)                    # bmm of views: a view step per operand
    diag = torch.diagonal(att, dim1=1, dim2=2)     # stride T + 1
    flat = h.reshape(B * T, C) @ w                 # a view of a kernel's output, an mm
    return b.sum(0), s, last, diag + 1, flat.view(B, T, -1).relu(), x.transpose(1, 2)


@pytest.mark.parametrize("interpret", _interpret_triton())
def test_every_view_over_symbols_is_read_through_or_a_view_step(interpret):
    torch.manual_seed(0)
    w = torch.randn(8, 5)
    metrics.reset()
    with ember.config.patch(triton_interpret=interpret):
        cf = ember.compile(every_view, dynamic=True)
        for B, T in [(2, 3), (2, 7), (3, 16), (5, 33)]:
            x = torch.randn(B, T, 8)
            got, want = cf(x, w), every_view(x, w)
            for g, e in zip(got, want):
                assert g.shape == e.shape and g.stride() == e.stride()
                torch.testing.assert_close(g, e)
    snap = metrics.snapshot()
    assert snap["graphs"] == 1 and snap["dynamic_graphs"] == 1, (snap, metrics.fallback_reasons)
    # The bmm and the mm are the only ATen calls: no view runs as one.
    assert snap["extern_steps"] == 2, snap
    assert snap["view_steps"] >= 3, snap


def test_views_of_an_input_with_a_storage_offset():
    # The input is itself a view (offset 5 and then 8 per row into a bigger buffer): views are
    # made relative to its offset, and kernels read from its data pointer.
    def f(x):
        T = x.shape[0]
        return x[1:].t() * 2, x[T - 1] + x[0], x.view(-1)[3:]

    metrics.reset()
    cf = ember.compile(f, dynamic=True)
    for T in [3, 9, 40]:
        big = torch.randn(T * 8 + 11)
        x = big[5:5 + T * 8].view(T, 8)
        got, want = cf(x), f(x)
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e)
    snap = metrics.snapshot()
    assert snap["graphs"] == 1 and snap["extern_steps"] == 0, (snap, metrics.fallback_reasons)


def test_a_returned_view_aliases_its_input_as_in_eager():
    def f(x):
        y = x.transpose(0, 1)
        return y, y[0]

    cf = ember.compile(f, dynamic=True)
    for T in [4, 9]:
        x = torch.randn(T, 6)
        y, row = cf(x)
        assert y.data_ptr() == x.data_ptr() and y.stride() == (1, 6)
        x.add_(1)  # a write through the input shows in the views
        torch.testing.assert_close(y, x.t())
        torch.testing.assert_close(row, x[:, 0])


def test_the_gpt2_block_runs_the_steps_of_its_static_trace():
    # Over symbols the block's views are read through or view steps as in the static graph:
    # the same nodes fused into the same kernels (a combo kernel of the q and k copies among
    # them), the same ATen calls (the four linear layers' addmm and two bmm).
    import sys  # noqa: PLC0415
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "differential"))
    from test_diff_dynamic_shapes import GPT2Layer  # noqa: PLC0415

    torch.manual_seed(0)
    m = GPT2Layer(C=32, H=4, max_len=64).eval()
    counts = {}
    for dynamic in (False, True):
        metrics.reset()
        cf = ember.compile(m, dynamic=dynamic)
        with torch.no_grad():
            for T in ([7] if not dynamic else [5, 7, 30]):
                x = torch.randn(2, T, 32)
                torch.testing.assert_close(cf(x), m(x))
        snap = metrics.snapshot()
        counts[dynamic] = {
            k: snap[k] for k in ("fused_nodes", "kernels", "extern_steps", "view_steps")}
    assert counts[True] == counts[False], counts
    assert counts[True]["extern_steps"] == 6, counts


# A view of a value the kernel computes, the view the only reader: its index function needs no size
# as a number, so one kernel computes the value at the view's index, as in a static graph (the
# root was stored by one kernel and read back by a second before).
_VIEWS_OF_COMPUTED = {
    "transpose": ("f32[{B}, 16, 4]{{64, 1, 16}}", "aten::transpose.int(%1, 1, 2)",
                  lambda h: h.transpose(1, 2)),
    "permute": ("f32[4, {B}, 16]{{16, 64, 1}}", "aten::permute(%1, [1, 0, 2])",
                lambda h: h.permute(1, 0, 2)),
    "unsqueeze": ("f32[{B}, 1, 4, 16]{{64, 64, 16, 1}}", "aten::unsqueeze(%1, 1)",
                  lambda h: h.unsqueeze(1)),
    "expand": ("f32[{B}, 4, 16]", "aten::expand(%1, [{B}, 4, 16], implicit=False)",
               lambda h: h.expand(h.shape)),  # a broadcasting one is stored by the cost rule
    "alias": ("f32[{B}, 4, 16]", "aten::alias(%1)", lambda h: h),
    "view to the same sizes": ("f32[{B}, 4, 16]", "aten::view(%1, [{B}, 4, 16])", lambda h: h.view(h.shape)),
}


@pytest.mark.parametrize("view", list(_VIEWS_OF_COMPUTED))
def test_a_view_of_a_value_its_kernel_computes_is_an_index_function(view):
    import ember._C as C  # noqa: PLC0415

    vtype, call, ref = _VIEWS_OF_COMPUTED[view]
    kernels = {}
    for B in ("5", "s0"):
        symbol = '  symbol s0 : [2, inf] hint 5 "L[\'x\'].size()[0]"\n' if B == "s0" else ""
        t = vtype.format(B=B)
        text = (f"graph {{\n{symbol}  input %0 : f32[{B}, 4, 16] cpu  # user x\n"
                f"  %1 : f32[{B}, 4, 16] cpu = aten::tanh(%0)\n"
                f"  %2 : {t} cpu = {call.format(B=B)}\n"
                f"  %3 : {t.split('{')[0]} cpu = aten::mul.Tensor(%2, 2)\n"
                f"  return (%3)\n}}\n")
        cg = C.CompiledGraph(C.parse_traced_graph(text))
        kernels[B] = cg.num_kernels
        for n in ([5] if B == "5" else [2, 5, 9]):
            x = torch.randn(n, 4, 16)
            torch.testing.assert_close(cg(x)[0], ref(x.tanh()) * 2)
    assert kernels == {"5": 1, "s0": 1}, kernels
