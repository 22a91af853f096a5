"""torch.vmap and torch's own torch-function modes inside a captured frame.

torch.vmap's wrapper is done by the interpreter around the vmapped function, which is inlined on
functorch's batched tensors (Note [vmap in the capture]): one graph, guards on what the function
reads. A TorchFunctionMode that torch defines (TransformGetItemToIndex, the mode of
`with torch.device(...)`) is entered for real in a with block (Note [torch's own torch-function
modes]); a mode of the program's own is not, and the frame stays correct. transformers builds
its vmapped masks so (T5Gemma2: 22 graph breaks before, one graph now)."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo._trace_wrapped_higher_order_op import TransformGetItemToIndex
from torch.overrides import TorchFunctionMode

import ember
import ember.metrics

from capture_check import check, reasons


def vmapped_mask(mask_function):
    # As transformers' _vmap_expansion_sdpa: over (batch, head, query, key) indices.
    for dims in ((None, None, None, 0), (None, None, 0, None), (None, 0, None, None),
                 (0, None, None, None)):
        mask_function = torch.vmap(mask_function, in_dims=dims, out_dims=0)
    return mask_function


def test_vmapped_mask_under_transform_getitem_is_one_graph():
    def mask(padding, window):
        def inner(b, h, q, kv):  # a padding mask read by tensor indices, and a sliding window
            return padding[b, kv] & (q - kv < window) & (kv <= q)
        return inner

    def f(padding, x):
        b, s = padding.shape
        with TransformGetItemToIndex():
            m = vmapped_mask(mask(padding, 3))(torch.arange(b), torch.arange(1), torch.arange(s),
                                                torch.arange(s))
        return x.masked_fill(~m, -1.0)

    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    check(f, padding, torch.randn(2, 1, 6, 6))
    assert ember.metrics.snapshot()["graph_breaks"] == 0


def test_vmap_forms():
    def f(x, y, w):
        g = torch.vmap(lambda a, b: (a * b).sum(-1), in_dims=(1, None))  # batch in dim 1
        h = torch.vmap(lambda a: (a.relu(), a.sum(-1, keepdim=True)), out_dims=1)  # two results
        r, s = h(y)
        return g(x, w), r, s, torch.vmap(torch.outer)(y, y * 2)

    check(f, torch.randn(3, 5, 4), torch.randn(2, 6), torch.randn(3, 4))


def test_vmapped_function_reading_a_global_is_guarded():
    # The vmapped function is inlined, so what it reads is guarded like the program's code:
    # run for real, the first scale would have been baked into the graph.
    scale = {"v": 2.0}

    def f(x):
        return torch.vmap(lambda r: r * scale["v"])(x)

    c = ember.compile(f)
    x = torch.randn(3, 4)
    torch.testing.assert_close(c(x), x * 2.0)
    scale["v"] = 5.0
    torch.testing.assert_close(c(x), x * 5.0)


def test_vmap_forms_not_captured_stay_correct():
    def chunked(x):
        return torch.vmap(lambda r: r.sin(), chunk_size=2)(x) + 1

    def keywords(x):
        return torch.vmap(lambda r, k: r * k)(x, k=3.0) + 1

    def nested_in_dims(x):
        return torch.vmap(lambda p: p[0] + p[1], in_dims=((0, 0),))((x, x)) + 1

    for fn in (chunked, keywords, nested_in_dims):
        c = ember.compile(fn)
        x = torch.randn(4, 3)
        torch.testing.assert_close(c(x), fn(x))
        torch.testing.assert_close(c(x), fn(x))
    assert reasons(), "the forms left out should have logged why"


def test_torch_device_context_is_entered():
    def f(x):
        with torch.device("cpu"):
            return x + torch.ones(x.shape)

    check(f, torch.randn(3))


class CountingMode(TorchFunctionMode):
    calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        CountingMode.calls += 1
        return func(*args, **(kwargs or {}))


def test_a_programs_own_mode_is_not_entered_at_capture():
    # Its __torch_function__ counts: entered at capture time only, the counts of later calls
    # would be lost. The block is unsupported; every call counts as in eager.
    def f(x):
        y = x * 2
        with CountingMode():
            y = y + 1
        return y.sin()

    c = ember.compile(f)
    x = torch.randn(4)
    for n in range(1, 4):
        torch.testing.assert_close(c(x), f(x))
        assert CountingMode.calls == 2 * n
    assert any("CountingMode" in r for r in reasons())


def test_an_interrupted_capture_leaves_no_mode_entered():
    # A break inside the block is not taken (none inside with blocks): the capture stops, and
    # the mode it entered for real is popped.
    def f(x):
        with TransformGetItemToIndex():
            y = x[torch.tensor(1)] * 2
            print("side effect")  # unsupported inside the block
        return y

    c = ember.compile(f)
    x = torch.randn(4, 3)
    torch.testing.assert_close(c(x), f(x))
    assert torch._C._len_torch_function_stack() == 0


@pytest.mark.parametrize("dynamic", [False, True])
def test_vmapped_mask_over_sizes(dynamic):
    def f(x):
        s = x.shape[-1]
        idx = torch.arange(s)
        m = torch.vmap(torch.vmap(lambda q, k: k <= q, in_dims=(None, 0)), in_dims=(0, None))(
            idx, idx)
        return x.masked_fill(~m, 0.0)

    c = ember.compile(f, dynamic=dynamic)
    for s in (4, 6, 9):
        x = torch.randn(2, s, s)
        torch.testing.assert_close(c(x), f(x))
